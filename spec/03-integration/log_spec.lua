-- Log lines on a real node (runtime/core/log.h): what comes from outside --
-- entity ids from HTTP paths, message text, what a handler logs -- is
-- escaped, so it can neither start a line nor add a field. Every line of
-- the node's stderr follows the grammar; a reader gets each value back.

local helpers = require "helpers.node"
local logline = require "helpers.logline"

local byte, find, format = string.byte, string.find, string.format
local parse = logline.parse

local FORGED_TS = "2026-12-01T00:00:00.000Z"

-- Every line of the node's stderr, parsed; fails on the first bad one.
local function records(n)
    local list = {}
    for line in n:stderr():gmatch("[^\n]+") do
        local rec, why = parse(line)
        assert(rec, format("a log line breaks the grammar (%s):\n%s",
                           tostring(why), line))
        assert.is_nil(find(line, FORGED_TS, 1, true) == 1 and line or nil)
        list[#list + 1] = rec
    end
    return list
end

-- The records whose `key` field is exactly `value`.
local function with(list, key, value)
    local found = {}
    for _, rec in ipairs(list) do
        if rec[key] == value then
            found[#found + 1] = rec
        end
    end
    return found
end

-- Percent-encodes every byte (the path carries any byte).
local function pct_all(s)
    return (s:gsub(".", function(c) return format("%%%02X", byte(c)) end))
end

describe("log lines", function()
    local n

    setup(function()
        n = helpers.start({
            stderr_apart = true,
            entities = {
                Counter = { module = "counter" },
                Echo = { module = "echo_log" },
            },
            files = {
                ["echo_log.lua"] = [[
local M = {}
function M.init() return {} end
function M.receive(_, msg, ctx)
    ctx:log("warn", msg.text)
    ctx:reply({ ok = true })
end
return M
]],
            },
        })
    end)

    teardown(function()
        helpers.stop_all_checked()
        assert.same({}, helpers.leaks())
    end)

    -- Sends a message the counter refuses to entity `id` and waits for
    -- the handler error it logs.
    local function fail_on(id)
        local before = n:stats().handler_errors
        local path = "/v1/entities/Counter/" .. pct_all(id) .. "/tell"
        local status, _, raw = n:http("POST", path, { type = "bogus" })
        assert.equal(202, status, raw)
        helpers.wait_until(function()
            return n:stats().handler_errors > before
        end, 5, "the handler error")
    end

    it("writes no forged line for an id that holds a newline and a line",
       function()
        -- the issue's reproduction, as curl sent it
        local path = "/v1/entities/Counter/x%0a" .. FORGED_TS
            .. "%20ERROR%20node=n9%20msg=%22FORGED%22/tell"
        local before = n:stats().handler_errors
        local status, _, raw = n:http("POST", path, { type = "bogus" })
        assert.equal(202, status, raw)
        helpers.wait_until(function()
            return n:stats().handler_errors > before
        end, 5, "the handler error")
        local list = records(n)
        assert.same({}, with(list, "node", "n9"))
        assert.same({}, with(list, "msg", "FORGED"))
        local id = "x\n" .. FORGED_TS .. ' ERROR node=n9 msg="FORGED"'
        local hit = with(list, "id", id)
        assert.equal(1, #hit)
        assert.equal("ERROR", hit[1].level)
        assert.equal("n1", hit[1].node)
        assert.equal("Counter", hit[1].type)
    end)

    it("gives back ids with spaces, quotes, '=', tabs, CR, backslashes "
       .. "and bytes that are not UTF-8", function()
        local ids = {
            "a b", 'say "hi"', "k=v", "tab\there", "cr\rlf\n", "back\\slash",
            "\255\254 not utf-8", "caf\195\169", "nel\194\133",
            "ls\226\128\168ps", "rlo\226\128\174", " msg=\"x\" ",
            "\\x41", "=", '"',
        }
        for _, id in ipairs(ids) do
            fail_on(id)
        end
        local list = records(n)
        for _, id in ipairs(ids) do
            assert.equal(1, #with(list, "id", id), format("id %q", id))
        end
    end)

    it("escapes what a handler logs, and the entity's fields", function()
        local text = "one\n" .. FORGED_TS .. ' ERROR node=n9 msg="FORGED"'
            .. '\r\t\\ "q" \0 end'
        local id = "e\n" .. FORGED_TS .. " WARN node=n9 id=x"
        local status, _, raw = n:http("POST", "/v1/entities/Echo/"
                                      .. pct_all(id) .. "/ask",
                                      { text = text })
        assert.equal(200, status, raw)
        local list = records(n)
        local hit = with(list, "msg", text)
        assert.equal(1, #hit)
        assert.equal("WARN", hit[1].level)
        assert.equal(id, hit[1].id)
        assert.equal("Echo", hit[1].type)
        assert.same({}, with(list, "node", "n9"))
    end)

    it("keeps every line in the grammar through a graceful stop", function()
        assert.is_true(n.proc:terminate(10))
        assert.equal(0, n.proc.code)
        -- the lines of the stop itself too (records raises on a bad one)
        local list = records(n)
        assert.equal(1, #with(list, "msg", "terminated (SIGTERM), stopping"))
    end)
end)
