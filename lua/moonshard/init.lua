-- moonshard: the control API for Lua code running inside a node (entity
-- handlers):
--
--   local moonshard = require "moonshard"
--   moonshard.owner_for(type, id)     -> owner node name or nil, shard
--   moonshard.allocations(type)       -> {type=, generation=, shard_count=,
--                                         shards = {[shard] = name|false}}
--   moonshard.activate(type, id, s?)  -> true (created) | false | nil, err
--                                        (waits like an ask)
--   moonshard.local_entity_count()    -> entities active on this node
--   moonshard.stats()                 -> the node's counters (a table)
--
-- The answers are copies: changing them changes nothing in the node.

local core = require "moonshard.core"
local cjson = require "cjson.safe"
local host = require "moonshard.host"

local type, error, tostring, ipairs = type, error, tostring, ipairs

local M = {}

local function type_of(tname)
    local t = type(tname) == "string" and core.type_index(tname)
    if not t then
        error("unknown entity type '" .. tostring(tname) .. "'", 3)
    end
    return t
end

function M.owner_for(tname, id)
    if type(id) ~= "string" or id == "" then
        error("bad 'id' argument: a non-empty string is required", 2)
    end
    local t = type_of(tname)
    local shard, perr = host.shard_for(t, id)
    if perr then error(perr.message, 2) end
    local o = cjson.decode(core.owner(t, id, shard))
    if type(o) ~= "table" then return nil end
    if o.code then error(o.message, 2) end -- the partitioner failed
    if o.owner == nil or o.owner == cjson.null then
        return nil, o.shard
    end
    return o.owner, o.shard
end

function M.allocations(tname)
    local a = cjson.decode(core.allocations(type_of(tname)))
    if type(a) ~= "table" or type(a.shards) ~= "table" then return nil end
    local shards = {}
    for _, e in ipairs(a.shards) do
        shards[e.shard] = (e.owner ~= cjson.null and e.owner) or false
    end
    return { type = a.type, generation = a.generation,
             shard_count = a.shard_count, shards = shards }
end

M.activate = host.activate

function M.stats()
    return cjson.decode(core.stats())
end

function M.local_entity_count()
    local s = M.stats()
    return s and s.active_entities or 0
end

return M
