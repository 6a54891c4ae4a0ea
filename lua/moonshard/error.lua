-- moonshard.error: error values that cross the wire unchanged.
--
-- An error is a plain table { code = "timeout", message = "...", ...fields }.
-- Only strings, numbers, booleans and plain tables go in it, so the host can
-- encode it as JSON, send it to another node and decode it there without
-- losing anything; `M.from` puts the metatable back on a decoded table.
-- The metatable only adds `__tostring` ("code: message") for logs and
-- `error()` messages; code must never depend on it being present.

local type = type
local pairs = pairs
local tostring = tostring
local error = error
local getmetatable = getmetatable
local setmetatable = setmetatable

local M = {}

-- Codes the runtime itself produces, one per row of the C table in
-- runtime/core/errors.h (spec/01-unit/error_spec.lua checks that both list
-- the same names). User code may use its own codes too.
M.codes = {
    overflow      = "overflow",      -- a mailbox or buffer bound was hit
    unknown_type  = "unknown_type",  -- no such entity type is configured
    handler_error = "handler_error", -- the handler raised a Lua error
    no_reply      = "no_reply",      -- the handler returned without replying
    bad_json      = "bad_json",      -- a payload did not decode
    not_object    = "not_object",    -- a message decoded to a non-object
    unavailable   = "unavailable",   -- the type's behavior module failed
                                     -- to load
    ask_self      = "ask_self",      -- an entity asked itself (would deadlock)
    config        = "config",        -- the configuration was refused
    partitioner   = "partitioner",   -- the type's partitioner failed
    timeout       = "timeout",       -- an ask got no reply in time
    cancelled     = "cancelled",     -- the ask was cancelled (stop, handoff)
    invalid       = "invalid",       -- a bad argument (a request the node
                                     -- cannot take as it is)
    too_large     = "too_large",     -- a message exceeded max_message_bytes
    no_memory     = "no_memory",     -- the node ran out of memory
    busy          = "busy",          -- already under way (a shard move)
    no_owner      = "no_owner",      -- no node takes the message as the
                                     -- owner of its shard (it is moving)
    bad_timeout   = "bad_timeout",   -- an ask timeout was not a positive number
    lease_unavailable = "lease_unavailable", -- a persistent shard's lease
                                     -- could not be had within its window
    db_query      = "db_query",      -- PostgreSQL refused the statement
    db_connection = "db_connection", -- no connection to PostgreSQL
    db_queue_full = "db_queue_full", -- the node's PostgreSQL queue is full
    db_schema     = "db_schema",     -- the database's schema is newer than
                                     -- this build knows
    stale_owner   = "stale_owner",   -- a write of a node whose lease epoch
                                     -- is no longer current was refused
    revision_conflict = "revision_conflict", -- another writer extended
                                     -- the entity's history
    remember_store_failed = "remember_store_failed", -- a fail_closed
                                     -- shard's remember store failed
}

local mt = {}

mt.__tostring = function(e)
    return tostring(e.code) .. ": " .. tostring(e.message)
end

-- Builds an error table. `fields` (optional) is copied in first, so it
-- cannot override `code` or `message`.
function M.new(code, message, fields)
    if type(code) ~= "string" or code == "" then
        error("bad 'code' argument (non-empty string expected, got "
              .. type(code) .. ")", 2)
    end
    if message ~= nil and type(message) ~= "string" then
        error("bad 'message' argument (string expected, got "
              .. type(message) .. ")", 2)
    end
    if fields ~= nil and type(fields) ~= "table" then
        error("bad 'fields' argument (table expected, got "
              .. type(fields) .. ")", 2)
    end
    local e = {}
    if fields then
        for k, v in pairs(fields) do
            e[k] = v
        end
    end
    e.code = code
    e.message = message or code
    return setmetatable(e, mt)
end

-- True when `e` is an error table, and, if `code` is given, has that code.
function M.is(e, code)
    if type(e) ~= "table" or type(e.code) ~= "string" then
        return false
    end
    return code == nil or e.code == code
end

-- Gives a decoded error table (from JSON) its metatable back, in place.
-- Returns nil for anything that is not shaped like an error.
function M.from(t)
    if type(t) ~= "table" or type(t.code) ~= "string" then
        return nil
    end
    if getmetatable(t) == nil then
        setmetatable(t, mt)
    end
    if t.message == nil then
        t.message = t.code
    end
    return t
end

return M
