-- The boundary between the host and Lua code, on real nodes: failures in
-- odd places stay with the message that met them. An ask whose yield
-- fails and is caught, an error object whose __tostring raises, a
-- partitioner that routes or asks, owner_for with an id over the limit,
-- numbers JSON cannot carry back, and a hot reload while an entity's init
-- waits in an ask. (Found by a review that tried to break the host.)

local helpers = require "helpers.node"

local format = string.format

-- Asks where a yield cannot happen (inside table.sort's comparator) and
-- sends to a type whose partitioner tries to activate an entity.
local SORTER = [[
local M = {}
function M.init() return { n = 0 } end
function M.receive(state, msg, ctx)
    if msg.type == "sort" then
        local ref = ctx:ref("Counter", "z")
        local ok, e = pcall(table.sort, { 3, 1, 2 }, function(a, b)
            ref:ask({ type = "get" }, 1)
            return a < b
        end)
        state.n = state.n + 1
        ctx:reply({ ok = ok, e = tostring(e) })
    elseif msg.type == "tell_tagged" then
        local ok, err = ctx:ref("Tagged", "t1"):tell({ type = "incr" })
        state.n = state.n + 1
        ctx:reply({ ok = ok or false, code = err and err.code })
    elseif msg.type == "tell_peeky" then
        local ok, err = ctx:ref("Peeky", "p2"):tell({ type = "incr" })
        ctx:reply({ ok = ok or false, code = err and err.code })
    elseif msg.type == "owner" then
        local ok, err = pcall(require("moonshard").owner_for, "Hashed",
                              string.rep("k", msg.n))
        ctx:reply({ ok = ok, err = tostring(err) })
    elseif msg.type == "get" then
        ctx:reply({ n = state.n })
    end
end
return M
]]

-- init fails once with an error object whose __tostring raises
local WEIRD = [[
local M = {}
local first = {}
function M.init(ctx)
    if not first[ctx.id] then
        first[ctx.id] = true
        error(setmetatable({}, { __tostring = function() error("no text") end }))
    end
    return { fresh = true }
end
function M.receive(state, _, ctx)
    ctx:reply({ has_state = state ~= nil })
end
return M
]]

describe("the host's boundary with Lua", function()
    local n

    setup(function()
        n = helpers.start({
            entities = {
                Counter = { module = "counter" },
                Tagged = { module = "counter", shard_count = 4,
                           partitioner = { __lua = [[function(id, n)
                               require("moonshard").activate("Counter", "p", 1)
                               return 0
                           end]] } },
                Loop = { module = "counter", shard_count = 4,
                         partitioner = { __lua = [[function(id, n)
                             local _, s = require("moonshard").owner_for("Loop", id)
                             return s or 0
                         end]] } },
                Hashed = { module = "counter", shard_count = 4,
                           partitioner = { __lua = [[function(id, n)
                               return #id % n
                           end]] } },
                -- looks up another type's owner: refused on every path
                Peeky = { module = "counter", shard_count = 4,
                          partitioner = { __lua = [[function(id, n)
                              require("moonshard").owner_for("Hashed", id)
                              return 0
                          end]] } },
                Sorter = { module = "sorter", on_error = "stop" },
                Weird = { module = "weird" },
            },
            files = { ["sorter.lua"] = SORTER, ["weird.lua"] = WEIRD },
        })
    end)

    teardown(function()
        helpers.stop_all_checked()
    end)

    it("does not count a caught failed ask as a handler error", function()
        local before = n:stats().handler_errors
        local status, body, raw = n:ask("Sorter", "s1", { type = "sort" })
        assert.equal(200, status, raw)
        assert.is_false(body.ok) -- the yield failed, and was caught
        -- on_error = "stop" would have passivated it: it kept its state
        helpers.sleep(0.2)
        assert.same({ n = 1 }, n:call("Sorter", "s1", { type = "get" }))
        assert.equal(before, n:stats().handler_errors)
    end)

    it("fails only the send whose partitioner tried to ask", function()
        local before = n:stats().handler_errors
        local r = n:call("Sorter", "s2", { type = "tell_tagged" })
        assert.same({ ok = false, code = "partitioner" }, r)
        assert.same({ n = 1 }, n:call("Sorter", "s2", { type = "get" }))
        assert.equal(before, n:stats().handler_errors)
        assert.matches("a partitioner cannot send, ask or look up owners",
                       n:log(), 1, true)
    end)

    it("refuses a partitioner that looks up owners, without recursing",
       function()
        local status, body = n:tell("Loop", "l1", { type = "incr" })
        assert.equal(500, status)
        assert.equal("partitioner", body.error.code)
        assert.is_true(n:alive())
    end)

    it("refuses a partitioner that looks up another type's owner, over "
       .. "HTTP too", function()
        local status, body = n:tell("Peeky", "p1", { type = "incr" })
        assert.equal(500, status)
        assert.equal("partitioner", body.error.code)
        local r = n:call("Sorter", "s4", { type = "tell_peeky" })
        assert.same({ ok = false, code = "partitioner" }, r)
    end)

    it("refuses owner_for with an id over the limit", function()
        for _, len in ipairs({ 600, 200000 }) do
            local r = n:call("Sorter", "s3", { type = "owner", n = len })
            assert.is_false(r.ok)
            assert.matches("size limit", r.err, 1, true)
        end
        assert.is_true(n:alive())
        assert.equal(200, (n:ask("Counter", "still", { type = "get" })))
    end)

    it("keeps an entity whose init raised an odd error object inactive",
       function()
        local status, body, raw = n:ask("Weird", "w1", { type = "x" })
        assert.equal(500, status, raw)
        assert.matches("__tostring raised", body.error.message, 1, true)
        -- the next message runs init again, and receive gets its state
        assert.same({ has_state = true }, n:call("Weird", "w1",
                                                 { type = "x" }))
    end)

    it("refuses numbers that could not be sent back", function()
        for _, lit in ipairs({ "1e999", "-1e400", "NaN", "Infinity",
                               "0x10" }) do
            local id = "num-" .. lit
            local status, body = n:http("POST", "/v1/entities/Counter/"
                                        .. id .. "/tell",
                                        '{"type":"incr","by":' .. lit .. '}')
            assert.equal(400, status, lit)
            assert.equal("bad_json", body.error.code, lit)
            assert.same({ value = 0 }, n:call("Counter", id,
                                              { type = "get" }))
        end
    end)
end)

-- v1's init waits about 2 s in an ask; v2 migrates the state
local V1 = [[
local M = {}
function M.init(ctx)
    ctx:ref("Slow", "s-" .. ctx.id):ask({ type = "nap", seconds = 2 }, 10)
    return { n = 0 }
end
function M.receive(state, msg, ctx)
    if msg.type == "incr" then state.n = state.n + 1 end
    ctx:reply({ code = 1, n = state.n })
end
return M
]]

local V2 = [[
local M = {}
M.version = "v2"
function M.init() return { count = 0 } end
function M.migrate(state, old)
    return { count = state.count or state.n, from = old }
end
function M.receive(state, msg, ctx)
    if msg.type == "incr" then state.count = state.count + 1 end
    ctx:reply({ code = 2, count = state.count, from = state.from })
end
return M
]]

describe("a hot reload while an entity's init waits in an ask", function()
    local c, n, path

    setup(function()
        c = helpers.cluster({
            size = 1,
            watch = true,
            entities = {
                Evolving = { module = "evolving", shard_count = 4 },
                Slow = { module = "sleeper", shard_count = 4 },
            },
            files = { ["evolving.lua"] = V1 },
        })
        path = c.dir .. "/evolving.lua"
        n = c:node("n1")
        c:start()
    end)

    teardown(function()
        helpers.stop_all_checked()
    end)

    it("migrates the entity before the new code handles it", function()
        local asks = n:stats().asks_started
        assert.equal(202, (n:tell("Evolving", "e1", { type = "incr" })))
        helpers.wait_until(function() -- until init waits in its ask
            return n:stats().asks_started > asks
        end, 5, "init to ask")
        helpers.write_file(path, V2)
        helpers.wait_until(function()
            return n:log():find("reload", 1, true)
        end, 10, "the reload")
        local status, body, raw = n:ask("Evolving", "e1", { type = "get" },
                                        10)
        assert.equal(200, status, raw)
        assert.same({ code = 2, count = 1, from = 1 }, body,
                    format("log:\n%s", n:log()))
    end)
end)
