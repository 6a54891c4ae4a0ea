-- moonshard.strategy.rendezvous: highest-random-weight (rendezvous hashing)
-- placement.
--
--     local s = require("moonshard.strategy.rendezvous").new()
--
-- Every member scores every shard; the shard goes to the member with the
-- highest score:
--
--     score(name, type, shard) = fmix64(fnv1a64(name .. "\0" .. type
--                                               .. "\0" .. decimal(shard)))
--
-- fnv1a64 is moonshard.partition's hash, fmix64 MurmurHash3's 64-bit
-- finalizer (it spreads FNV's weakly mixed last bytes over all 64 bits).
-- Scores compare as unsigned 64-bit integers; an equal score goes to the
-- lower name. Nothing depends on the process (no seed, no addresses of
-- tables), so every node and every run computes the same winner.
--
-- The score uses the member's `name`, not its address or uid, so a
-- restarted node (a new incarnation with the same name) wins back exactly
-- the shards it had. Adding a member moves only the shards it wins;
-- removing one moves only the shards it owned.
--
-- Up members compete; when no member is up, leaving ones do. Joining
-- members do not take shards until they are up.
--
-- Rebalance proposes, ascending, every shard owned by an up or leaving
-- member that is not its winner (so it also drains leaving members),
-- except shards already moving. It proposes nothing while a member is
-- joining or unreachable or members run different versions (DESIGN §3).
-- It has no cap of its own: after a member joins, about shards/members
-- shards move at once; wrap it in rate_limited to spread that out. Shards
-- owned by names that are not in the view are left to the coordinator,
-- which reallocates them with `allocate`.
--
-- Versions do not take part in the score (that would move shards at every
-- rolling update), so a rolling update does not pull shards towards newer
-- nodes the way least_loaded does.

local bit = require "bit"
local partition = require "moonshard.partition"
local util = require "moonshard.strategy.util"

local type = type
local error = error
local ipairs = ipairs
local tostring = tostring
local setmetatable = setmetatable
local bxor = bit.bxor
local rshift = bit.rshift
local format = string.format
local byte = string.byte
local hash = partition.hash

local M = {}

local M1 = 0xff51afd7ed558ccdULL
local M2 = 0xc4ceb9fe1a85ec53ULL

local function fmix64(h)
    h = bxor(h, rshift(h, 33)) * M1
    h = bxor(h, rshift(h, 33)) * M2
    return bxor(h, rshift(h, 33))
end

-- FNV-1a is a stream hash: hashing the shard's digits on from the hash of
-- "name\0type\0" gives fnv1a64 of the whole key. Rebalance scores every
-- shard for every member, so each member's prefix is hashed once.
local PRIME = 0x100000001b3ULL

local function score_from(prefix, shard)
    local h = prefix
    local digits = format("%d", shard)
    for i = 1, #digits do
        h = bxor(h, byte(digits, i)) * PRIME
    end
    return fmix64(h)
end

local function prefix_hash(name, etype)
    return hash(name .. "\0" .. etype .. "\0")
end

-- The score of `name` for `shard` of entity type `etype`: a uint64_t cdata.
function M.score(name, etype, shard)
    return score_from(prefix_hash(name, etype), shard)
end

-- luacheck: no self (a method need not use its object's options)
local methods = {}
local mt = { __index = methods }

-- Creates the strategy. It takes no options.
function M.new(opts)
    util.options(opts, {}, "rendezvous", 2)
    return setmetatable({ id = "rendezvous" }, mt)
end

local function entity_type(v)
    local t = v.entity_type
    if type(t) ~= "string" then
        error("bad view: entity_type must be a string, got " .. type(t), 3)
    end
    return t
end

-- The members that compete for shards: the up ones, else the leaving ones;
-- each as { member, prefix = its prefix hash }.
local function contenders(v, etype)
    local up, leaving = {}, {}
    for _, m in ipairs(v.members) do
        local list = m.status == "up" and up
            or util.is_leaving(m) and leaving or nil
        if list then
            list[#list + 1] = { member = m, prefix = prefix_hash(m.name, etype) }
        end
    end
    return #up > 0 and up or leaving
end

-- True when (score, name) beats (best_score, best_name): a higher score,
-- or the same score and a lower name.
function M.beats(score, name, best_score, best_name)
    return score > best_score or (score == best_score and name < best_name)
end

local function winner(list, shard)
    local beats = M.beats
    local best, best_score
    for _, c in ipairs(list) do
        local s = score_from(c.prefix, shard)
        if best == nil or beats(s, c.member.name, best_score, best.name) then
            best, best_score = c.member, s
        end
    end
    return best
end

-- Returns the name of the member with the highest score for `shard`, or
-- nil and a reason when no member can take shards.
function methods:allocate(shard, view)
    local v = util.view(view, 2)
    util.check_shard(shard, v, 2)
    local etype = entity_type(v)
    local list = contenders(v, etype)
    if #list == 0 then
        return nil, "no member can take shards of " .. tostring(etype)
            .. " (none is up or leaving)"
    end
    return winner(list, shard).name
end

-- Returns the shards whose owner is not their winner, ascending.
function methods:rebalance(view)
    local v = util.view(view, 2)
    local etype = entity_type(v)
    if not util.stable(v) then
        return {}
    end
    local list = contenders(v, etype)
    if #list == 0 then
        return {}
    end
    local plan, in_progress = v.plan, v.in_progress
    local moves = {}
    for shard = 0, v.shard_count - 1 do
        local owner = v.by_name[plan[shard]]
        if owner and util.can_own(owner) and not in_progress[shard]
            and winner(list, shard) ~= owner then
            moves[#moves + 1] = shard
        end
    end
    return moves
end

return M
