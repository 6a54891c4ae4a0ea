-- A strict reader of the Prometheus text exposition format (0.0.4) for
-- the specs: parse(text) -> families, or raises with the line at fault.
-- families[name] = { kind =, help =, samples = { { labels = {..},
-- value = n }, .. } }. It checks what a scraper relies on: metric and
-- label names, one HELP and one TYPE per family, both before its samples,
-- samples of a family together, label values escaped, numeric values.

local M = {}

local NAME = "^[%a_:][%w_:]*$"
local KINDS = { counter = true, gauge = true, untyped = true,
                histogram = true, summary = true }

local function unescape(s)
    return (s:gsub("\\(.)", function(c)
        if c == "n" then return "\n" end
        if c == "\\" or c == "\"" then return c end
        error("bad escape \\" .. c)
    end))
end

-- '{a="x",b="y"}' -> { a = "x", b = "y" }
local function labels(text)
    local out, pos = {}, 2
    while pos < #text do
        local k, stop = text:match("^([%a_][%w_]*)=\"()", pos)
        assert(k, "bad label name at " .. text:sub(pos))
        local v, last = {}, stop
        while true do
            local c = text:sub(last, last)
            assert(c ~= "" and c ~= "\n", "unterminated label value")
            if c == "\\" then
                v[#v + 1] = text:sub(last, last + 1)
                last = last + 2
            elseif c == "\"" then
                break
            else
                v[#v + 1] = c
                last = last + 1
            end
        end
        assert(out[k] == nil, "label " .. k .. " twice")
        out[k] = unescape(table.concat(v))
        pos = last + 1
        local sep = text:sub(pos, pos)
        if sep == "," then
            pos = pos + 1
        else
            assert(sep == "}", "expected , or } after label " .. k)
        end
    end
    assert(text:sub(-1) == "}", "labels not closed")
    return out
end

local function value(s)
    if s == "NaN" then return 0 / 0 end
    if s == "+Inf" then return math.huge end
    if s == "-Inf" then return -math.huge end
    return assert(tonumber(s), "bad value " .. s)
end

function M.parse(text)
    assert(text:sub(-1) == "\n", "the text does not end with a newline")
    local families, order, current = {}, {}, nil
    local function family(name)
        local f = families[name]
        if not f then
            f = { samples = {} }
            families[name] = f
            order[#order + 1] = name
        end
        return f
    end
    local n = 0
    for line in text:gmatch("([^\n]*)\n") do
        n = n + 1
        local ok, err = pcall(function()
            local kw, name, rest = line:match("^# (%u+) (%S+) ?(.*)$")
            if kw == "HELP" or kw == "TYPE" then
                assert(name:match(NAME), "bad metric name " .. name)
                local f = family(name)
                assert(#f.samples == 0, kw .. " after the samples")
                if kw == "HELP" then
                    assert(f.help == nil, "second HELP")
                    f.help = rest
                else
                    assert(f.kind == nil, "second TYPE")
                    assert(KINDS[rest], "bad type " .. rest)
                    f.kind = rest
                end
                current = name
                return
            end
            assert(line:sub(1, 1) ~= "#", "unknown comment")
            assert(line ~= "", "empty line")
            local sname, lab, val = line:match("^([^{%s]+)({.*}) (%S+)$")
            if not sname then
                sname, val = line:match("^(%S+) (%S+)$")
            end
            assert(sname and sname:match(NAME), "bad sample line")
            assert(sname == current,
                   "sample of " .. sname .. " outside its family")
            local f = family(sname)
            f.samples[#f.samples + 1] = { labels = lab and labels(lab) or {},
                                          value = value(val) }
        end)
        if not ok then
            error(string.format("line %d %q: %s", n, line, tostring(err)), 2)
        end
    end
    return families, order
end

return M
