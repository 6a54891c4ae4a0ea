-- moonshard.strategy.least_loaded: Akka's LeastShardAllocationStrategy
-- (the algorithm of Akka 2.6.10 and later).
--
--     local s = require("moonshard.strategy.least_loaded").new{
--         absolute_limit = 20,   -- at most this many moves per round; 0: no cap
--         relative_limit = 0.1,  -- at most this share of the shards per round
--     }
--
-- Allocation gives an unowned shard to the most suitable member, by this
-- order: not leaving first, then the newer `version` (compared numerically
-- by dotted components), then the fewest shards, then the oldest
-- (`up_number`), then the lowest address (host, then port as a number).
-- Members that are up or leaving can be given shards; joining ones cannot.
--
-- Rebalance, in rounds (the coordinator calls it again once the moves of a
-- round are done):
--
--   * nothing while a move is in progress, while a member is joining or
--     unreachable, or while members run different versions;
--   * optimal = ceil(shards / members), over the up and leaving members and
--     the shards they own;
--   * phase 1: from each member owning more than optimal, its excess, lowest
--     shards first;
--   * phase 2, only when phase 1 found nothing: when some members own two or
--     more fewer than optimal, one shard (its lowest) from each member owning
--     optimal or more, as many as those members are short of optimal - 1;
--   * at most max(1, min(floor(relative_limit * shards), absolute_limit))
--     shards per round, taken from members in allocation order.
--
-- Repeated rounds, with each proposed shard re-allocated by `allocate`,
-- leave every member within one shard of every other.
--
-- Defaults: relative_limit = 0.1, absolute_limit = 0. Akka reads an
-- absolute limit of 0 as "use the pre-2.6.10 algorithm"; here the
-- algorithm above is always used and absolute_limit = 0 means "no absolute
-- cap", so only the relative limit applies.

local util = require "moonshard.strategy.util"

local ipairs = ipairs
local tostring = tostring
local setmetatable = setmetatable
local ceil = math.ceil
local sort = table.sort

local M = {}

-- luacheck: no self (a method need not use its object's options)
local methods = {}
local mt = { __index = methods }

-- Creates the strategy. Raises on a bad option.
function M.new(opts)
    opts = util.options(opts, { "absolute_limit", "relative_limit" },
                        "least_loaded", 2)
    local absolute = util.integer_option(opts, "absolute_limit", 0, 0, 2)
    local relative = util.number_option(opts, "relative_limit", 0, 1, true,
                                        0.1, 2)
    local self = {
        absolute_limit = absolute,
        relative_limit = relative,
    }
    self.id = util.id("least_loaded", {
        absolute_limit = absolute, relative_limit = relative,
    })
    return setmetatable(self, mt)
end

-- True when member a is more suitable than member b for a new shard, given
-- the number of shards each owns.
local function more_suitable(a, b, ca, cb)
    local la, lb = util.is_leaving(a), util.is_leaving(b)
    if la ~= lb then
        return lb
    end
    local v = util.compare_versions(a.version, b.version)
    if v ~= 0 then
        return v > 0
    end
    if ca ~= cb then
        return ca < cb
    end
    return util.older(a, b)
end

-- The members that may own shards, each as { member, shards = {...} },
-- most suitable first.
local function regions(v)
    local owned = util.owned(v)
    local list = {}
    for _, m in ipairs(v.members) do
        if util.can_own(m) then
            list[#list + 1] = { member = m, shards = owned[m.name] }
        end
    end
    sort(list, function(x, y)
        return more_suitable(x.member, y.member, #x.shards, #y.shards)
    end)
    return list
end

-- Returns the name of the member to own `shard`, or nil and a reason when
-- no member can take shards.
function methods:allocate(shard, view)
    local v = util.view(view, 2)
    util.check_shard(shard, v, 2)
    local list = regions(v)
    if #list == 0 then
        return nil, "no member can take shards of "
            .. tostring(v.entity_type) .. " (none is up or leaving)"
    end
    return list[1].member.name
end

-- Returns the shards to move this round, ascending.
function methods:rebalance(view)
    local v = util.view(view, 2)
    if not util.quiet(v) then
        return {}
    end
    local list = regions(v)
    local total = 0
    for _, r in ipairs(list) do
        total = total + #r.shards
    end
    if #list == 0 or total == 0 then
        return {}
    end
    local optimal = ceil(total / #list)
    for _, r in ipairs(list) do
        r.optimal = optimal
    end
    return util.two_phase(list, util.limit(total, self.relative_limit,
                                           self.absolute_limit))
end

-- Most minus least shards over the up members (used by rate_limited).
function methods:spread(view)
    return util.count_spread(util.view(view, 2))
end

return M
