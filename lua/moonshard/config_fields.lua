-- moonshard.config_fields: the pieces moonshard.config checks a config
-- with: "host:port" addresses, the error a failed check raises (a field's
-- path, a reason, the value, shown bounded and escaped, credentials
-- concealed) and the field checkers (known keys, tables, strings,
-- integers, seconds, addresses). moonshard.config holds the schema that
-- uses them; M.load turns a raised failure into its one-line error.

local type = type
local pairs = pairs
local ipairs = ipairs
local error = error
local tostring = tostring
local tonumber = tonumber
local setmetatable = setmetatable
local getmetatable = getmetatable
local floor = math.floor
local huge = math.huge
local min = math.min
local sort = table.sort
local concat = table.concat
local format = string.format
local find = string.find
local lower = string.lower
local match = string.match
local gmatch = string.gmatch
local gsub = string.gsub
local sub = string.sub
local byte = string.byte

local M = {}

local INT_MAX = 2147483647
M.INT_MAX = INT_MAX

-------------------------------------------------------------------------------
-- Addresses

local function is_ipv4(s)
    local a, b, c, d = match(s, "^(%d+)%.(%d+)%.(%d+)%.(%d+)$")
    if not a then
        return false
    end
    for _, o in ipairs({ a, b, c, d }) do
        -- No leading zeros: "010" means 8 to some parsers and 10 to others.
        if #o > 3 or (#o > 1 and sub(o, 1, 1) == "0") or tonumber(o) > 255 then
            return false
        end
    end
    return true
end

-- Counts the colon-separated hex groups of `s`, or nil if one is malformed.
local function ipv6_groups(s)
    if s == "" then
        return 0
    end
    local n = 0
    for g in gmatch(s .. ":", "([^:]*):") do
        if not match(g, "^%x%x?%x?%x?$") then
            return nil
        end
        n = n + 1
    end
    return n
end

local function is_ipv6(h)
    if h == "" or find(h, "[^%x:%.]") then
        return false
    end
    if find(h, ".", 1, true) then
        -- An embedded IPv4 tail ("::ffff:10.0.0.1") stands for two groups.
        local head, v4 = match(h, "^(.*:)([^:]*)$")
        if not head or not is_ipv4(v4) then
            return false
        end
        h = head .. "0:0"
    end
    local a, b = find(h, "::", 1, true)
    if not a then
        return ipv6_groups(h) == 8
    end
    if find(h, "::", a + 1, true) then
        return false
    end
    local left = ipv6_groups(sub(h, 1, a - 1))
    local right = ipv6_groups(sub(h, b + 1))
    return left ~= nil and right ~= nil and left + right <= 7
end

-- Splits "host:port". The host is an IPv4 literal, "localhost", or an IPv6
-- literal in brackets (returned without them); the port is 1..65535.
-- Returns host, port (a number), or nil and a reason.
function M.parse_address(s)
    if type(s) ~= "string" then
        error("bad 'address' argument (string expected, got " .. type(s)
              .. ")", 2)
    end
    local host, port
    if sub(s, 1, 1) == "[" then
        host, port = match(s, "^%[([^%]]*)%]:(.*)$")
        if not host then
            return nil, "expected \"[IPv6]:port\""
        end
        if not is_ipv6(host) then
            return nil, "bad IPv6 address"
        end
    else
        host, port = match(s, "^(.*):([^:]*)$")
        if not host then
            return nil, "expected \"host:port\""
        end
        if find(host, ":", 1, true) then
            return nil, "an IPv6 host must be in brackets, as in [::1]:7101"
        end
        if host == "" then
            return nil, "missing host"
        end
        if host ~= "localhost" and not is_ipv4(host) then
            return nil, "host must be an IPv4 address, \"localhost\" or [IPv6]"
        end
    end
    if not match(port, "^[1-9]%d?%d?%d?%d?$") or tonumber(port) > 65535 then
        return nil, "port must be an integer in 1..65535"
    end
    return host, tonumber(port)
end

-------------------------------------------------------------------------------
-- Error reporting

local Failure = {}
-- A value an error must not show (a credential): shown as its description.
local Concealed = {}

local ESCAPES = { ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t",
                  ["\""] = "\\\"", ["\\"] = "\\\\" }

local function show(v)
    if getmetatable(v) == Concealed then
        return v.what
    end
    local t = type(v)
    if t == "string" then
        local s = v
        if #s > 40 then
            s = sub(s, 1, 37) .. "..."
        end
        s = gsub(s, "[%c\"\\]", function(ch)
            return ESCAPES[ch] or format("\\%d", byte(ch))
        end)
        return "\"" .. s .. "\""
    elseif t == "number" or t == "boolean" or t == "nil" then
        return tostring(v)
    end
    return t
end

local function path_string(path)
    local parts = {}
    for i, key in ipairs(path) do
        if type(key) == "string" and match(key, "^[%a_][%w_]*$") then
            parts[#parts + 1] = (i > 1 and "." or "") .. key
        elseif type(key) == "number" then
            parts[#parts + 1] = "[" .. tostring(key) .. "]"
        else
            parts[#parts + 1] = "[" .. show(key) .. "]"
        end
    end
    return concat(parts)
end

local function fail(path, reason, value)
    error(setmetatable({ path = path, reason = reason, value = value },
                       Failure), 0)
end

local function child(path, key)
    local p = {}
    for i = 1, #path do
        p[i] = path[i]
    end
    p[#p + 1] = key
    return p
end

-------------------------------------------------------------------------------
-- Schema checks

local function is_integer(v)
    return type(v) == "number" and v == floor(v) and v > -huge and v < huge
end

local function is_list(t)
    if type(t) ~= "table" then
        return false
    end
    local count = 0
    for _ in pairs(t) do
        count = count + 1
    end
    for i = 1, count do
        if t[i] == nil then
            return false
        end
    end
    return true
end

-- Edit distance, for "did you mean" hints on unknown fields.
local function distance(a, b)
    local prev = {}
    for j = 0, #b do
        prev[j] = j
    end
    for i = 1, #a do
        local cur = { [0] = i }
        for j = 1, #b do
            local cost = byte(a, i) == byte(b, j) and 0 or 1
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
        end
        prev = cur
    end
    return prev[#b]
end

local function sorted_keys(t)
    local keys = {}
    for k in pairs(t) do
        keys[#keys + 1] = k
    end
    sort(keys, function(a, b)
        local ta, tb = type(a), type(b)
        if ta ~= tb then
            return ta < tb
        end
        if ta == "string" or ta == "number" then
            return a < b
        end
        return false
    end)
    return keys
end

-- the fields whose values no error shows
local CONCEALED_FIELDS = { secret = true, admin_token = true, database = true,
                           api_token = true }

-- Fails on the first key of `t` (in sorted order) not listed in `known`.
local function check_known(t, path, known, elsewhere)
    for _, k in ipairs(sorted_keys(t)) do
        if not known[k] then
            -- `elsewhere` (optional): [field] = why a field known in
            -- another place of the config does not belong here
            local best = elsewhere and elsewhere[k] and k
            local reason = best and elsewhere[k] or "unknown field"
            if not best and type(k) == "string" then
                local best_d
                for _, name in ipairs(sorted_keys(known)) do
                    local d = distance(k, name)
                    if d <= 2 and (not best_d or d < best_d) then
                        best, best_d = name, d
                    end
                end
                if best then
                    reason = format("unknown field, did you mean %q?", best)
                end
            end
            local v = t[k]
            -- a misspelt credential (`databse = "postgresql://u:pw@..."`)
            -- or anything that looks like one is not shown
            if type(v) == "string" and (CONCEALED_FIELDS[best]
                    or find(lower(v), "password", 1, true)
                    or find(v, "://[^/]*:[^/]*@")) then
                v = setmetatable({ what = "a string" }, Concealed)
            end
            fail(child(path, k), reason, v)
        end
    end
end

local function check_table(v, path)
    if type(v) ~= "table" then
        fail(path, "must be a table", v)
    end
    return v
end

local function string_field(t, key, path, opts)
    local v = t[key]
    local p = child(path, key)
    if v == nil then
        if opts.required then
            fail(p, "required", v)
        end
        return opts.default
    end
    if type(v) ~= "string" or v == "" then
        -- a credential given as a number is the credential: name its type
        if opts.conceal and type(v) ~= "string" then
            v = setmetatable({ what = "a " .. type(v) }, Concealed)
        end
        fail(p, "must be a non-empty string", v)
    end
    if opts.pattern and not find(v, opts.pattern) then
        fail(p, opts.pattern_reason, opts.conceal and setmetatable(
            { what = format("%d bytes", #v) }, Concealed) or v)
    end
    if opts.max_len and #v > opts.max_len then
        fail(p, format("must be at most %d bytes", opts.max_len),
             format("%d bytes", #v))
    end
    return v
end

-- An integer in lo..hi. With `hint_lo` the common message only names the
-- lower bound (hi is then a sanity cap for the C side).
local function integer_field(t, key, path, lo, hi, default, hint_lo)
    local v = t[key]
    if v == nil then
        return default
    end
    if not is_integer(v) or v < lo or v > hi then
        local reason
        if hint_lo and not (is_integer(v) and v > hi) then
            reason = format("must be an integer >= %d", lo)
        else
            reason = format("must be an integer in %d..%d", lo, hi)
        end
        fail(child(path, key), reason, v)
    end
    return v
end

-- An optional limit: an integer in 1..INT_MAX, or false for none.
-- Returns it, false, or nil when the field is absent.
local function limit_field(t, key, path)
    local v = t[key]
    if v == nil or v == false then
        return v
    end
    if not is_integer(v) or v < 1 or v > INT_MAX then
        fail(child(path, key), format("must be an integer in 1..%d, or "
             .. "false (no limit)", INT_MAX), v)
    end
    return v
end

-- A number of seconds in [lo, hi] (default `default`), as milliseconds.
local function seconds_field(t, key, path, lo, hi, default)
    local v = t[key]
    if v == nil then
        v = default
    end
    if type(v) ~= "number" or v ~= v or v < lo or v > hi then
        fail(child(path, key), format("must be a number of seconds from %g"
             .. " to %g", lo, hi), v)
    end
    return floor(v * 1000 + 0.5)
end

local function address_field(v, path, required)
    if v == nil then
        if required then
            fail(path, "required", v)
        end
        return nil
    end
    if type(v) ~= "string" then
        fail(path, "must be a \"host:port\" string", v)
    end
    local host, err = M.parse_address(v)
    if not host then
        fail(path, "must be \"host:port\": " .. err, v)
    end
    return v
end

M.Failure, M.Concealed = Failure, Concealed
M.show, M.path_string, M.fail, M.child = show, path_string, fail, child
M.is_integer, M.is_list, M.sorted_keys = is_integer, is_list, sorted_keys
M.check_known, M.check_table = check_known, check_table
M.string_field, M.integer_field = string_field, integer_field
M.limit_field = limit_field
M.seconds_field, M.address_field = seconds_field, address_field

return M
