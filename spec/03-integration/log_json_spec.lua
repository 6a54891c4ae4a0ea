-- log_format = "json" on a real node (runtime/core/log.h): every line of
-- its stderr is one JSON object with time, level, node, the fields and
-- msg, and what comes from outside (ids from HTTP paths, what a handler
-- logs) comes back from a JSON parser byte for byte -- but for the bytes
-- a text line shows as \xNN (not valid or harmless UTF-8), shown the same
-- way here.

local helpers = require "helpers.node"
local cjson = require "cjson"

local byte, format = string.byte, string.format

-- Every line of the node's stderr, decoded; fails on the first that is
-- not one JSON object.
local function records(n)
    local list = {}
    for line in n:stderr():gmatch("[^\n]+") do
        local ok, rec = pcall(cjson.decode, line)
        assert(ok and type(rec) == "table",
               "a log line is not a JSON object:\n" .. line)
        assert.matches("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%.%d%d%dZ$",
                       rec.time)
        assert.is_truthy(({ DEBUG = 1, INFO = 1, WARN = 1, ERROR = 1 })
                         [rec.level], line)
        assert.equal("n1", rec.node)
        assert.is_string(rec.msg, line)
        for k, v in pairs(rec) do
            assert.is_string(v, k) -- every value a string
        end
        list[#list + 1] = rec
    end
    return list
end

local function with(list, key, value)
    local found = {}
    for _, rec in ipairs(list) do
        if rec[key] == value then found[#found + 1] = rec end
    end
    return found
end

local function pct_all(s)
    return (s:gsub(".", function(c) return format("%%%02X", byte(c)) end))
end

describe("JSON log lines", function()
    local n

    setup(function()
        n = helpers.start({
            stderr_apart = true,
            settings = { log_format = "json" },
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

    local function fail_on(id)
        local before = n:stats().handler_errors
        local path = "/v1/entities/Counter/" .. pct_all(id) .. "/tell"
        local status, _, raw = n:http("POST", path, { type = "bogus" })
        assert.equal(202, status, raw)
        helpers.wait_until(function()
            return n:stats().handler_errors > before
        end, 5, "the handler error")
    end

    it("writes the start-up lines as JSON objects", function()
        local list = records(n)
        assert.is_true(#list >= 1)
        assert.equal("{", n:stderr():sub(1, 1))
    end)

    it("gives back ids with quotes, newlines, tabs, backslashes and "
       .. "UTF-8 as they were", function()
        local forged = '"}\n{"time":"x","level":"ERROR","node":"n9"'
        local ids = { 'say "hi"', "tab\there", "cr\rlf\n", "back\\slash",
                      "caf\195\169", "k=v", forged, "ctl\1\127" }
        for _, id in ipairs(ids) do fail_on(id) end
        local list = records(n)
        for _, id in ipairs(ids) do
            local hit = with(list, "id", id)
            assert.equal(1, #hit, format("id %q", id))
            assert.equal("ERROR", hit[1].level)
            assert.equal("Counter", hit[1].type)
        end
        assert.same({}, with(list, "node", "n9"))
    end)

    it("shows bytes that are not UTF-8 as \\xNN, as a text line does",
       function()
        fail_on("\255\254 bad")
        assert.equal(1, #with(records(n), "id", "\\xff\\xfe bad"))
    end)

    it("writes what a handler logs as msg, with the entity's fields",
       function()
        local text = 'one\n{"level":"ERROR"}\r\t\\ "q" \0 end'
        local status, _, raw = n:http("POST", "/v1/entities/Echo/e%221/ask",
                                      { text = text })
        assert.equal(200, status, raw)
        local hit = with(records(n), "msg", text)
        assert.equal(1, #hit)
        assert.equal("WARN", hit[1].level)
        assert.equal("Echo", hit[1].type)
        assert.equal('e"1', hit[1].id)
    end)
end)
