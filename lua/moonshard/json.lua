-- moonshard.json: what a behavior needs to say things JSON can say and a
-- Lua table cannot (DESIGN G9).
--
--   local json = require "moonshard.json"
--   ctx:reply({ items = json.empty_array })     -> {"items":[]}
--   ctx:reply({ items = json.array(list) })     -> [] when list is empty
--   ctx:reply({ gone = json.null })             -> {"gone":null}
--
-- An empty Lua table is written {}: Lua cannot tell an empty array from an
-- empty object. A table whose metatable has __jsontype = "array" is always
-- written as an array; json.array(t) gives t that metatable (and returns
-- t), json.empty_array is a shared, read-only empty one. The marker is a
-- plain metatable field, so this module needs no node: behaviors that use
-- it run under busted too. Decoding does not set it: an empty array that
-- arrives in a message is an empty table, and goes out again as {} unless
-- the handler marks it.
--
-- Inside a node, json.encode(value) is the node's own encoder (exact
-- numbers; see runtime/lua/json_encode.h); outside one it is nil.

local ok_core, encoder = pcall(require, "moonshard.encoder")

local setmetatable, error, type = setmetatable, error, type

local M = {}

M.array_mt = { __jsontype = "array" }

M.empty_array = setmetatable({}, {
    __jsontype = "array",
    __newindex = function()
        error("moonshard.json.empty_array is shared and read-only: use "
              .. "json.array({}) for an array to fill", 2)
    end,
    __metatable = false,
})

-- lua-cjson's null: a NULL light userdata, which the encoder writes null
M.null = require("cjson").null

function M.array(t)
    if type(t) ~= "table" then
        error("bad 't' argument: a table is required", 2)
    end
    return setmetatable(t, M.array_mt)
end

M.encode = ok_core and encoder.encode or nil

return M
