-- Hot reload (`--watch`) on real nodes: an edited behavior module runs
-- from the next message of a live entity, after its `migrate`; an edited
-- strategy module places the next unowned shard; an edit that does not
-- load, or does not behave, keeps the old code and logs one `reload:`
-- line; `moonshard run --watch` passes --watch on to every node.
--
-- The configs and modules are written into the cluster's temp dir (the
-- config's folder is on the node's module path). Each edit changes the
-- file's size, and the watcher compares size and mtime in ns.

local helpers = require "helpers.node"
local pin_strategy = require "helpers.pin"

local format = string.format
local json = helpers.json

-- Starts node `n` of a helpers.cluster as Node:launch does, plus --watch,
-- and waits until it answers HTTP (its watcher has started by then).
local function launch_watching(n)
    n.runs = n.runs + 1
    n.log_path = format("%s/%s.%d.log", n.dir, n.name, n.runs)
    n.proc = helpers.spawn({ helpers.bin, "node", n.config, "--name", n.name,
                             "--watch" },
                           { stdout = n.log_path, stderr = "stdout" })
    n.pid = n.proc.pid
    return n:wait_healthy()
end

-- Writes `text` to `path` at least 20 ms after the previous write, so the
-- mtime moves even on a coarse clock.
local function edit(path, text)
    helpers.sleep(0.02)
    helpers.write_file(path, text)
end

-- The `reload:` lines of `level` ("INFO", "WARN") in the node's log.
local function reload_lines(n, level)
    local list = {}
    for l in n:log():gmatch("[^\n]+") do
        if l:find(" " .. level .. " node=", 1, true)
            and l:find('msg="reload: ', 1, true) then
            list[#list + 1] = l
        end
    end
    return list
end

-- Waits until the node's log has `count` reload lines of `level`; returns
-- the last one. Then checks, one poll round later, that no more came.
local function wait_reload_lines(n, level, count)
    local lines = helpers.wait_until(function()
        local l = reload_lines(n, level)
        return #l >= count and l, #l .. " lines"
    end, 5, count .. " " .. level .. " reload lines of " .. n.name)
    helpers.sleep(0.8)
    assert.equal(count, #reload_lines(n, level))
    return lines[count]
end

-- The config of a helpers.cluster `c`, with `entities` given as Lua source
-- and `head` before the `return`.
local function write_config(c, head, entities)
    local nodes = {}
    for _, n in ipairs(c.nodes) do
        nodes[#nodes + 1] = format("{ name = %q, listen = %q, http = %q }",
                                   n.name, n.listen, n.address)
    end
    helpers.write_file(c.config, head .. format([[
return {
    cluster = "reload",
    secret = %q,
    admin_token = %q,
    nodes = { %s },
    entities = %s,
}
]], c.secret, c.admin_token, table.concat(nodes, ", "), entities))
end

describe("--watch", function()
    teardown(function()
        helpers.stop_all_checked()
        assert.same({}, helpers.leaks())
    end)

    describe("a behavior edit", function()
        local c, n, path

        local V1 = [[
local M = {}
function M.init() return { n = 0 } end
function M.receive(state, msg, ctx)
    if msg.type == "incr" then state.n = state.n + 1 end
    ctx:reply({ code = 1, n = state.n })
end
return M
]]

        -- Version `code` of the module: a counter whose state is
        -- { count =, from = }, with a migrate (unless `migrate` is false),
        -- and a `version` field when `version` is given.
        local function counter(code, version, migrate)
            return format([[
local M = {}
M.version = %s
function M.init() return { count = 0 } end
%s
function M.receive(state, msg, ctx)
    if msg.type == "incr" then state.count = state.count + 1 end
    ctx:reply({ code = %d, count = state.count, from = state.from })
end
return M
]], version and format("%q", version) or "nil", migrate or [[
function M.migrate(state, old)
    return { count = state.count or state.n, from = old }
end]], code)
        end

        local function get(id)
            return n:call("Evolving", id, { type = "get" })
        end

        -- Waits until entity `id` answers "get" with code `code`; returns
        -- the reply.
        local function wait_code(id, code)
            return helpers.wait_until(function()
                local status, r, raw = n:ask("Evolving", id, { type = "get" })
                return status == 200 and r.code == code and r,
                    status .. " " .. raw
            end, 5, id .. " to run version " .. code)
        end

        setup(function()
            c = helpers.cluster({ size = 1, entities = {} })
            path = c.dir .. "/evolving.lua"
            helpers.write_file(path, V1)
            write_config(c, "", [[{
        Evolving = { module = "evolving", shard_count = 4 },
    }]])
            n = launch_watching(c:node("n1"))
        end)

        it("runs a live entity's next message with the new code, on the "
           .. "state it had, after migrate(state, old version)", function()
            for _ = 1, 3 do
                n:call("Evolving", "e1", { type = "incr" })
            end
            assert.same({ code = 1, n = 3 }, get("e1"))
            edit(path, counter(2, "v2"))
            -- v1 has no `version` field: its load count, 1
            assert.same({ code = 2, count = 3, from = 1 }, wait_code("e1", 2))
            assert.same({ code = 2, count = 4, from = 1 },
                        n:call("Evolving", "e1", { type = "incr" }))
            -- activated under the new code: init, no migrate
            assert.same({ code = 2, count = 0 }, get("e2"))
            -- "watching ..." and "behavior of Evolving replaced"
            assert.equal(2, #reload_lines(n, "INFO"))
        end)

        it("keeps the old code when an edit does not load, with one "
           .. "reload: line", function()
            edit(path, "local M = {\n")
            local l = wait_reload_lines(n, "WARN", 1)
            assert.truthy(l:find(path, 1, true))
            assert.same({ code = 2, count = 5, from = 1 },
                        n:call("Evolving", "e1", { type = "incr" }))
            edit(path, "return { init = function() return {} end }\n")
            wait_reload_lines(n, "WARN", 2)
            assert.same({ code = 2, count = 5, from = 1 }, get("e1"))
        end)

        it("passes the old module's version field as old_version",
           function()
            edit(path, counter(3))
            assert.same({ code = 3, count = 5, from = "v2" },
                        wait_code("e1", 3))
        end)

        it("fails the message when migrate raises, keeps the state, and "
           .. "migrates from the version the state was made under",
           function()
            edit(path, counter(4, nil, [[
function M.migrate() error("cannot migrate") end]]))
            helpers.wait_until(function()
                local status = n:ask("Evolving", "e1", { type = "get" })
                return status == 500, status
            end, 5, "migrate to fail")
            -- loads: v1 1, v2 2, v3 3 (edits that did not load do not
            -- count); e1's state is still v3's
            edit(path, counter(5))
            assert.same({ code = 5, count = 5, from = 3 }, wait_code("e1", 5))
        end)
    end)

    describe("a ctx kept in the state", function()
        local c, n, path

        -- Version `code`: init keeps the ctx in the state; every reply
        -- goes through the kept ctx and says whether it is the ctx of
        -- this message; v2's migrate says the same of the ctx it gets.
        local function keeper(code, migrate)
            return format([[
local M = {}
function M.init(ctx)
    -- "slow" ids wait in init for a Sleeper's 4 s nap
    if ctx.id:sub(1, 4) == "slow" then
        assert(ctx:ref("Sleeper", ctx.id):ask({ type = "nap",
                                                 seconds = 4 }, 8))
    end
    return { ctx = ctx }
end
%s
function M.receive(state, msg, ctx)
    state.ctx:reply({ code = %d, same = state.ctx.id == ctx.id,
                      id = state.ctx.id, type = state.ctx.type,
                      migrated = state.migrated, mid = state.mid })
end
return M
]], migrate and [[
function M.migrate(state, old, ctx)
    return { ctx = state.ctx, migrated = state.ctx.id == ctx.id,
             mid = ctx.id }
end]] or "", code)
        end

        setup(function()
            c = helpers.cluster({ size = 1, entities = {} })
            path = c.dir .. "/ctxkeeper.lua"
            helpers.write_file(path, keeper(1))
            write_config(c, format("package.path = %q .. package.path\n",
                                   helpers.fixtures .. "/?.lua;"), [[{
        Keeper = { module = "ctxkeeper", shard_count = 4 },
        Sleeper = { module = "sleeper" },
    }]])
            n = launch_watching(c:node("n1"))
        end)

        -- each message has a ctx of its own: `same` compares ids, and the
        -- kept ctx answers (its reply is the answer)
        it("still acts for its entity after its behavior is swapped, in "
           .. "migrate and in the next message", function()
            assert.same({ code = 1, same = true, id = "k1", type = "Keeper" },
                        n:call("Keeper", "k1", { type = "get" }))
            edit(path, keeper(2, true))
            local r = helpers.wait_until(function()
                local status, body, raw = n:ask("Keeper", "k1",
                                                { type = "get" })
                return status == 200 and body.code == 2 and body,
                    status .. " " .. raw
            end, 5, "k1 to run version 2")
            assert.same({ code = 2, same = true, id = "k1", type = "Keeper",
                          migrated = true, mid = "k1" }, r)
        end)

        it("is migrated when the swap came while its init waited",
           function()
            local lines = #reload_lines(n, "INFO")
            local t0 = helpers.now()
            assert.equal(202, (n:tell("Keeper", "slow-1", { type = "get" })))
            helpers.sleep(0.3) -- init is waiting in its ask
            edit(path, keeper(3, true))
            helpers.wait_until(function()
                return #reload_lines(n, "INFO") > lines
            end, 5, "the swap")
            -- the swap came before init returned (it waits 4 s)
            assert.is_true(helpers.now() - t0 < 3.5)
            local r = helpers.wait_until(function()
                local status, body, raw = n:ask("Keeper", "slow-1",
                                                { type = "get" }, 5)
                return status == 200 and body, status .. " " .. raw
            end, 10, "slow-1 to answer")
            -- init ran v2's code and returned its state after the swap:
            -- v3's migrate ran before v3 handled the next message
            assert.same({ code = 3, same = true, id = "slow-1",
                          type = "Keeper", migrated = true,
                          mid = "slow-1" }, r)
        end)
    end)

    describe("a strategy edit on two nodes", function()
        local c, n1, n2, path
        local next_id = 0

        -- The module pinning every shard to `target`.
        local function pin(target, moves_others)
            return pin_strategy.source(target, moves_others)
        end

        -- A new id whose shard has no owner yet.
        local function fresh_id()
            while true do
                next_id = next_id + 1
                local id = "id" .. next_id
                if n1:owner("Pinned", id).owner == json.null then
                    return id
                end
            end
        end

        -- Activates a new id (through n2's gateway) and returns its owner
        -- as both nodes see it.
        local function place_new()
            local id = fresh_id()
            assert.same({ value = 0 }, n2:call("Pinned", id, { type = "get" }))
            return helpers.wait_until(function()
                local o1, o2 = n1:owner("Pinned", id), n2:owner("Pinned", id)
                return o1.owner == o2.owner and o1.owner,
                    tostring(o1.owner) .. " / " .. tostring(o2.owner)
            end, 5, "both nodes to know the owner of " .. id)
        end

        setup(function()
            c = helpers.cluster({ size = 2, entities = {} })
            path = c.dir .. "/pin.lua"
            helpers.write_file(path, pin("n1"))
            write_config(c, 'local pin = require "pin"\n', [[{
        Pinned = { module = "counter", shard_count = 64,
                   allocation = pin.new() },
    }]])
            n1, n2 = c:node("n1"), c:node("n2")
            -- n1 first: the oldest member, so the coordinator
            launch_watching(n1)
            launch_watching(n2)
            c:wait_converged({ "n1", "n2" }, 10)
        end)

        it("places new shards with the strategy as started", function()
            for _ = 1, 3 do
                assert.equal("n1", place_new())
            end
        end)

        it("keeps the old strategy after an edit with a syntax error",
           function()
            edit(path, pin("n2") .. "end\n") -- '<eof>' expected near 'end'
            local l = wait_reload_lines(n1, "WARN", 1)
            assert.truthy(l:find(path, 1, true))
            assert.equal("n1", place_new())
        end)

        it("keeps the old strategy after an edit that answers an unknown "
           .. "member", function()
            edit(path, pin("n1"):gsub("for _, m in", [[
do return "nobody" end
    for _, m in]]))
            local l = wait_reload_lines(n1, "WARN", 2)
            assert.truthy(l:find("nobody", 1, true))
            assert.equal("n1", place_new())
        end)

        it("places the next new shard with the edited strategy", function()
            edit(path, pin("n2"))
            local l = wait_reload_lines(n1, "INFO", 2) -- and "watching"
            assert.truthy(l:find("strategy of Pinned replaced (pin)", 1,
                                 true))
            assert.equal("n2", place_new())
            assert.equal("n2", place_new())
        end)

        it("moves the placed shards through handoff once an edit's "
           .. "rebalance proposes them", function()
            local before = n1:allocations("Pinned")
            local on_n1 = 0
            for _, sh in ipairs(before.shards) do
                if sh.owner == "n1" then on_n1 = on_n1 + 1 end
            end
            assert.is_true(on_n1 >= 3)
            edit(path, pin("n2", true))
            wait_reload_lines(n1, "INFO", 3)
            local a = helpers.wait_until(function()
                local now = n1:allocations("Pinned")
                for _, sh in ipairs(now.shards) do
                    if sh.owner == "n1" then
                        return nil, "shard " .. sh.shard .. " on n1"
                    end
                end
                return now
            end, 15, "every placed shard to move to n2")
            assert.is_true(a.generation > before.generation)
            assert.is_true(n1:stats().moves.finished >= on_n1)
            assert.equal("n2", place_new())
        end)
    end)

    describe("under moonshard run", function()
        it("is passed on to every node", function()
            local c = helpers.cluster({ size = 2, entities = {} })
            write_config(c, "", [[{ Counter = { module = "counter" } }]])
            local log = c.dir .. "/run.log"
            local run = helpers.spawn({ helpers.bin, "run", "--watch",
                                        c.config },
                                      { stdout = log, stderr = "stdout" })
            local children = {}
            local ok, err = pcall(function()
                helpers.wait_until(function()
                    local text = helpers.read_file(log) or ""
                    return text:find('node=n1 msg="reload: watching', 1, true)
                        and text:find('node=n2 msg="reload: watching', 1,
                                      true)
                        and text:find("node n1 is Up", 1, true)
                        and text:find("node n2 is Up", 1, true), text
                end, 10, "both nodes to watch and be Up")
                local list = helpers.read_file(format(
                    "/proc/%d/task/%d/children", run.pid, run.pid)) or ""
                for pid in list:gmatch("%d+") do
                    children[#children + 1] = tonumber(pid)
                end
            end)
            -- stops both nodes (the launcher forwards the signal)
            assert.is_true(run:terminate(40))
            for _, pid in ipairs(children) do
                if helpers.pid_alive(pid) then -- never left behind
                    os.execute("kill -9 " .. pid)
                end
                assert.is_false(helpers.pid_alive(pid))
            end
            assert(ok, err)
        end)
    end)
end)
