-- Errors for HTTP clients carry a code, a short message and an id that
-- the node logs with the whole detail; the message never shows the
-- server's files, module search lists or heap addresses (issue 9, item 7).

local helpers = require "helpers.node"

local FAILING = [[
local M = {}
function M.receive(_, msg, ctx)
    if msg.type == "table" then
        error({ reason = "a table without a message" })
    elseif msg.type == "path" then
        error("/usr/share/lua/5.1/vendor/secret.lua:12: cannot open "
              .. "/etc/moonshard/keys.txt at 0x55d0c0ffee00")
    elseif msg.type == "require" then
        require("no_such_module_here")
    elseif msg.type == "coded" then
        error({ code = "out_of_stock", message = "no more widgets" })
    elseif msg.type == "long" then
        error(string.rep("long words ", 100))
    end
    ctx:reply({ ok = true })
end
return M
]]

local LEAKS = { "/usr/", "/etc/", "/tmp/", "package.path",
                "package.preload", "?.lua", "0x", ".lua", "\\n", "\\t" }

describe("errors answered to HTTP clients", function()
    local c

    setup(function()
        c = helpers.cluster_up({
            size = 2,
            secret = "spec-secret-7f3a9c2e41b8",
            entities = {
                Failing = { module = "failing", shard_count = 8 },
                Missing = { module = "no_such_module" },
            },
            files = { ["failing.lua"] = FAILING },
        })
        -- 8 shards: without n2's registration they could all go to n1
        c:node("n1"):wait_placed_on("Failing", "n2")
    end)

    teardown(function()
        helpers.stop_all_checked()
    end)

    -- The error of an HTTP answer, checked for its shape and for leaks;
    -- its id is in the log of the node `n` that answered.
    local function check(n, status, body, raw, want_status, want_code)
        assert.equal(want_status, status, raw)
        local e = assert.is_table(body and body.error, raw)
        assert.equal(want_code, e.code, raw)
        assert.is_string(e.message)
        assert.is_true(#e.message > 0 and #e.message <= 200, raw)
        assert.matches("^e%-%x+$", e.id, 1)
        for _, leak in ipairs(LEAKS) do
            assert.is_nil(raw:find(leak, 1, true),
                          "'" .. leak .. "' in " .. raw)
        end
        helpers.wait_until(function()
            return n:log():find("error_id=" .. e.id, 1, true)
        end, 5, "the id in the node's log")
        return e
    end

    -- The line of n's log that has error id `id`.
    local function log_line(n, id)
        local text = n:log()
        local at = assert(text:find("error_id=" .. id, 1, true))
        local first = text:sub(1, at):match(".*\n()") or 1
        return text:sub(first, (text:find("\n", at, true) or 0) - 1)
    end

    local function ask(n, t, id, msg)
        local status, body, raw = n:ask(t, id, msg)
        return status, body, raw
    end

    it("answers a handler that raised a table with a generic message",
       function()
        local n = c:node("n1")
        local status, body, raw = ask(n, "Failing", "t1", { type = "table" })
        local e = check(n, status, body, raw, 500, "handler_error")
        assert.equal("the entity's handler raised an error", e.message)
        -- the log line with the id has the detail
        local line = log_line(n, e.id)
        assert.matches("table: 0x", line, 1, true)
    end)

    it("answers a handler that raised a path-looking string without the "
       .. "paths and the address", function()
        local n = c:node("n1")
        local status, body, raw = ask(n, "Failing", "p1", { type = "path" })
        local e = check(n, status, body, raw, 500, "handler_error")
        assert.matches("cannot open", e.message, 1, true)
        local line = log_line(n, e.id)
        assert.matches("/etc/moonshard/keys.txt", line, 1, true)
    end)

    it("answers a handler whose require failed without the search list",
       function()
        local n = c:node("n1")
        local status, body, raw = ask(n, "Failing", "r1",
                                      { type = "require" })
        local e = check(n, status, body, raw, 500, "handler_error")
        assert.equal("module 'no_such_module_here' not found", e.message)
        local line = log_line(n, e.id)
        assert.matches("no field package.preload", line, 1, true)
    end)

    it("keeps the message of an error table and bounds a long one",
       function()
        local n = c:node("n1")
        local status, body, raw = ask(n, "Failing", "c1", { type = "coded" })
        local e = check(n, status, body, raw, 500, "handler_error")
        assert.equal("no more widgets", e.message)
        status, body, raw = ask(n, "Failing", "l1", { type = "long" })
        e = check(n, status, body, raw, 500, "handler_error")
        assert.matches("%.%.%.$", e.message)
    end)

    it("answers a type whose module failed to load with code, message and "
       .. "id", function()
        local n = c:node("n2")
        for _, action in ipairs({ "ask", "tell" }) do
            local status, body, raw = n:http("POST",
                helpers.entity_path("Missing", "m1", action),
                { type = "x" })
            check(n, status, body, raw, 503, "unavailable")
        end
    end)

    it("logs the id on the node that answered when the entity lives on "
       .. "another", function()
        -- ids on both nodes: whichever owns the entity, one answer is
        -- forwarded from the other node
        for i = 1, 64 do
            local id = "fwd-" .. i
            c:node("n1"):activate("Failing", id) -- places its shard
            local owner = c:node("n1"):owner("Failing", id).owner
            if owner == "n2" then
                local n = c:node("n1")
                local status, body, raw = ask(n, "Failing", id,
                                              { type = "path" })
                local e = check(n, status, body, raw, 500, "handler_error")
                assert.matches("cannot open", e.message, 1, true)
                return
            end
        end
        error("no id of 64 on n2")
    end)

    it("gives every error answer an id, the gateway's own too", function()
        local n = c:node("n1")
        local status, body, raw = n:http("GET", "/v1/nope")
        check(n, status, body, raw, 404, "not_found")
        status, body, raw = n:http("POST", "/v1/entities/Nope/x/tell",
                                   { type = "x" })
        check(n, status, body, raw, 404, "unknown_type")
    end)
end)
