-- Log lines on a real node (runtime/core/log.h): what comes from outside --
-- entity ids from HTTP paths, message text, what a handler logs -- is
-- escaped, so it can neither start a line nor add a field. Every line of
-- the node's stderr follows the grammar; a reader gets each value back.

local helpers = require "helpers.node"

local byte, char, sub, find, format = string.byte, string.char, string.sub,
    string.find, string.format

local FORGED_TS = "2026-12-01T00:00:00.000Z"

-- ---- a reader of the grammar of log.h --------------------------------

local ESC = { [byte("\\")] = "\\", [byte('"')] = '"', [byte("n")] = "\n",
              [byte("r")] = "\r", [byte("t")] = "\t" }

local function is_bare(c)
    return c > 0x20 and c < 0x7f and c ~= 0x22 and c ~= 0x5c and c ~= 0x3d
end

-- The value at `pos`: returns it and the position after it, or nil, why.
local function read_value(line, pos)
    if byte(line, pos) ~= 0x22 then
        local e = pos
        while e <= #line and byte(line, e) ~= 0x20 do
            if not is_bare(byte(line, e)) then
                return nil, "bad byte in a bare value at " .. e
            end
            e = e + 1
        end
        if e == pos then
            return nil, "empty bare value at " .. pos
        end
        return sub(line, pos, e - 1), e
    end
    local out, i = {}, pos + 1
    while true do
        local c = byte(line, i)
        if not c then
            return nil, "unterminated quote"
        elseif c < 0x20 or c == 0x7f then
            return nil, "raw control byte at " .. i
        elseif c == 0x22 then
            return table.concat(out), i + 1
        elseif c ~= 0x5c then
            out[#out + 1] = char(c)
            i = i + 1
        else
            local e = byte(line, i + 1)
            if e == byte("x") then
                local n = tonumber(sub(line, i + 2, i + 3), 16)
                if not n or not find(sub(line, i + 2, i + 3), "^%x%x$") then
                    return nil, "bad \\x escape at " .. i
                end
                out[#out + 1] = char(n)
                i = i + 4
            elseif e and ESC[e] then
                out[#out + 1] = ESC[e]
                i = i + 2
            else
                return nil, "bad escape at " .. i
            end
        end
    end
end

-- One line: returns { level =, fields = { {k, v}, ... }, [k] = v } or nil,
-- why. node= comes first and msg= last.
local function parse(line)
    local ts, level, pos = line:match(
        "^(%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%.%d%d%dZ) (%u+) ()")
    if not ts or not (level == "DEBUG" or level == "INFO"
                      or level == "WARN" or level == "ERROR") then
        return nil, "no timestamp and level"
    end
    local rec = { ts = ts, level = level, fields = {} }
    while true do
        local key, vpos = line:match("^([%w_]+)=()", pos)
        if not key then
            return nil, "no key at " .. pos
        end
        local v, after = read_value(line, vpos)
        if not v then
            return nil, after
        end
        rec.fields[#rec.fields + 1] = { key, v }
        rec[key] = rec[key] or v
        if #rec.fields == 1 and key ~= "node" then
            return nil, "node= is not first"
        end
        if key == "msg" then
            if after <= #line then
                return nil, "text after msg="
            end
            return rec
        end
        if byte(line, after) ~= 0x20 then
            return nil, "no space after a value at " .. after
        end
        pos = after + 1
    end
end

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
        helpers.stop_all()
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
end)
