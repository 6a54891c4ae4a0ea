-- examples/custom_strategy/pinned.lua: a custom allocation strategy.
--
-- Pins shard s to members[s % #members + 1] while that member is up, and
-- otherwise (not started yet, leaving, downed) places the shard with a
-- fallback strategy, least_loaded by default. Rebalance sends shards back
-- to their pinned member once it is up again.
--
--     local pinned = require "pinned"
--     allocation = pinned.new{ members = { "n1", "n2", "n3" } }
--
-- It keeps the contract of DESIGN.md §3: pure (no I/O, clock or
-- randomness), deterministic (it walks shards by number, never with
-- pairs), options checked in `new`, and an id that includes the options
-- and the fallback's id, so nodes configured differently are told apart.

local util = require "moonshard.strategy.util"
local least_loaded = require "moonshard.strategy.least_loaded"

local type = type
local error = error
local ipairs = ipairs
local setmetatable = setmetatable

local M = {}

local methods = {}
local mt = { __index = methods }

function M.new(opts)
    opts = util.options(opts, { "members", "fallback" }, "pinned", 2)
    local names = opts.members
    if type(names) ~= "table" or #names == 0 then
        util.bad_option("members", "must be a non-empty list of member names",
                        names, 2)
    end
    for i, name in ipairs(names) do
        if type(name) ~= "string" or name == "" then
            util.bad_option("members", "entry " .. i .. " must be a name",
                            name, 2)
        end
    end
    local fallback = opts.fallback or least_loaded.new()
    if not util.is_strategy(fallback) then
        error("bad option 'fallback': must be a strategy", 2)
    end
    local self = { members = { unpack(names) }, fallback = fallback }
    self.id = util.id("pinned", { members = self.members }, fallback)
    return setmetatable(self, mt)
end

-- The member shard `shard` is pinned to, when it is up; else nil.
local function home(self, shard, v)
    local name = self.members[shard % #self.members + 1]
    local m = v.by_name[name]
    if m and m.status == "up" then
        return name
    end
    return nil
end

function methods:allocate(shard, view)
    local v = util.view(view, 2)
    util.check_shard(shard, v, 2)
    return home(self, shard, v) or self.fallback:allocate(shard, view)
end

function methods:rebalance(view)
    local v = util.view(view, 2)
    -- The rules every shipped strategy keeps: one round at a time, and no
    -- voluntary moves while a member is joining, unreachable or on another
    -- version.
    if not util.quiet(v) then
        return {}
    end
    local moves = {}
    for shard = 0, v.shard_count - 1 do
        local owner, want = v.plan[shard], home(self, shard, v)
        if want and v.by_name[owner] and owner ~= want then
            moves[#moves + 1] = shard
        end
    end
    return moves
end

return M
