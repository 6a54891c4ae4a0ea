-- entities/register.lua: a versioned key-value register.
--
-- Every write takes the next value of a register-wide version counter, so a
-- key's version only grows, even across delete and re-create: a `cas` that
-- read version 7 can never succeed against a key that was deleted and put
-- again since. A missing key has version 0, so `cas` with
-- expect_version = 0 means "create if absent".
--
-- Messages (keys are strings; anything else raises an error):
--   put    {key, value}                 reply {ok = true, version = n}
--   get    {key}                        reply {value = v|nil, version = n|0}
--   delete {key}                        reply {ok = true, deleted = bool}
--   cas    {key, expect_version, value} reply {ok = true, version = n}, or
--                                       {ok = false, version = current}
--   keys                                reply {keys = {sorted list}}

local type = type
local pairs = pairs
local error = error
local tostring = tostring
local sort = table.sort

local M = {}

function M.init()
    -- entries[key] = { value = v, version = n }; clock = last version used.
    return { entries = {}, clock = 0 }
end

local function check_key(msg)
    local key = msg.key
    if type(key) ~= "string" then
        error(msg.type .. ": 'key' must be a string, got " .. type(key))
    end
    return key
end

local function check_value(msg)
    local value = msg.value
    if value == nil then
        error(msg.type .. ": 'value' is required (use delete to remove a key)")
    end
    return value
end

local function write(state, key, value)
    local version = state.clock + 1
    state.clock = version
    state.entries[key] = { value = value, version = version }
    return version
end

function M.receive(state, msg, ctx)
    local t = msg.type
    if t == "get" then
        local entry = state.entries[check_key(msg)]
        if entry then
            ctx:reply({ value = entry.value, version = entry.version })
        else
            ctx:reply({ version = 0 })
        end
    elseif t == "put" then
        local key = check_key(msg)
        ctx:reply({ ok = true, version = write(state, key, check_value(msg)) })
    elseif t == "delete" then
        local key = check_key(msg)
        local existed = state.entries[key] ~= nil
        state.entries[key] = nil
        ctx:reply({ ok = true, deleted = existed })
    elseif t == "cas" then
        local key = check_key(msg)
        local expect = msg.expect_version
        if type(expect) ~= "number" then
            error("cas: 'expect_version' must be a number, got " .. type(expect))
        end
        local value = check_value(msg)
        local entry = state.entries[key]
        local current = entry and entry.version or 0
        if current ~= expect then
            ctx:reply({ ok = false, version = current })
        else
            ctx:reply({ ok = true, version = write(state, key, value) })
        end
    elseif t == "keys" then
        local keys = {}
        for k in pairs(state.entries) do
            keys[#keys + 1] = k
        end
        sort(keys)
        ctx:reply({ keys = keys })
    else
        error("unknown message type: " .. tostring(t))
    end
end

return M
