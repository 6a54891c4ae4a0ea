-- spec/helpers/logline.lua: a reader of the node's log lines, following
-- the grammar written in runtime/core/log.h (an implementation of its
-- own, so that a spec checks the writer against the documented format).
--
--   parse(line)  -> { ts =, level =, fields = { {key, value}, ... },
--                     [key] = value (the first of that key) } | nil, why
--   records(text) -> every line of `text` parsed; raises on a bad one

local byte, char, sub, find, format = string.byte, string.char, string.sub,
    string.find, string.format
local concat = table.concat

local M = {}

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
            return concat(out), i + 1
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
function M.parse(line)
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

-- Every line of `text`, parsed; raises on the first line that breaks the
-- grammar.
function M.records(text)
    local list = {}
    for line in text:gmatch("[^\n]+") do
        local rec, why = M.parse(line)
        if not rec then
            error(format("a log line breaks the grammar (%s):\n%s",
                         tostring(why), line), 2)
        end
        list[#list + 1] = rec
    end
    return list
end

-- Milliseconds since the epoch of a record's timestamp (for differences).
function M.ms(rec)
    local y, mo, d, h, mi, s, ms = rec.ts:match(
        "^(%d+)-(%d+)-(%d+)T(%d+):(%d+):(%d+)%.(%d+)Z$")
    local t = os.time({ year = tonumber(y), month = tonumber(mo),
                        day = tonumber(d), hour = tonumber(h),
                        min = tonumber(mi), sec = tonumber(s) })
    return t * 1000 + tonumber(ms)
end

return M
