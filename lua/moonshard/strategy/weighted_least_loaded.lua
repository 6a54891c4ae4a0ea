-- moonshard.strategy.weighted_least_loaded: least_loaded, balancing shards
-- per unit of weight instead of shards per member.
--
--     local s = require("moonshard.strategy.weighted_least_loaded").new{
--         weights = { n1 = 2, n2 = 1 },  -- by member name; else member.weight
--         absolute_limit = 0,            -- as least_loaded
--         relative_limit = 0.1,
--     }
--
-- A member's weight is `weights[name]` when given, else its `weight` field,
-- else 1. Weights must be positive numbers: a zero or negative weight is a
-- configuration error, raised by `new` for `weights` and by `allocate` and
-- `rebalance` for a member's `weight`.
--
-- A member's ideal share of the S owned shards is S * weight / W, W the sum
-- of the weights (over the up and leaving members). Allocation follows
-- least_loaded's order with "fewest shards" replaced by "furthest below its
-- ideal share once this shard is placed" (count - (S + 1) * weight / W,
-- lowest first); placing shards one by one this way keeps every member
-- within one shard of its ideal share. Rebalance is least_loaded's, with
-- each member's own optimal ceil(S * weight / W): phase 1 takes the excess
-- above it, phase 2 evens out members two or more below it. Converged, each
-- member is within one shard of its ideal share (it may rest one below an
-- exact integer share: phase 2 leaves a member one below its ceil). With
-- equal weights this is exactly least_loaded.

local util = require "moonshard.strategy.util"

local type = type
local error = error
local ipairs = ipairs
local tostring = tostring
local setmetatable = setmetatable
local ceil = math.ceil
local max = math.max
local min = math.min
local huge = math.huge
local sort = table.sort
local format = string.format

local M = {}

-- Ideal shares are computed in floating point; a share within EPS of an
-- integer counts as that integer, so 3 * (1/3) * 3 does not round up to 4.
local EPS = 1e-9

-- luacheck: no self (a method need not use its object's options)
local methods = {}
local mt = { __index = methods }

local function check_weights(w)
    if w == nil then
        return nil
    end
    if type(w) ~= "table" then
        util.bad_option("weights", "must be a table of member name = weight",
                        w, 3)
    end
    local copy = {}
    for _, name in ipairs(util.sorted_keys(w)) do
        local v = w[name]
        if type(name) ~= "string" or name == "" then
            util.bad_option("weights", "keys must be member names", name, 3)
        end
        if type(v) ~= "number" or v ~= v or v <= 0 or v == huge then
            util.bad_option("weights", format(
                "weight of %s must be a positive number", name), v, 3)
        end
        copy[name] = v
    end
    return copy
end

-- Creates the strategy. Raises on a bad option.
function M.new(opts)
    opts = util.options(opts, { "absolute_limit", "relative_limit", "weights" },
                        "weighted_least_loaded", 2)
    local absolute = util.integer_option(opts, "absolute_limit", 0, 0, 2)
    local relative = util.number_option(opts, "relative_limit", 0, 1, true,
                                        0.1, 2)
    local weights = check_weights(opts.weights)
    local self = {
        absolute_limit = absolute,
        relative_limit = relative,
        weights = weights or {},
    }
    self.id = util.id("weighted_least_loaded", {
        absolute_limit = absolute, relative_limit = relative,
        weights = weights,
    })
    return setmetatable(self, mt)
end

-- The weight of member m. Raises a configuration error for a weight that
-- is not a positive number.
function methods:weight(m)
    local w = self.weights[m.name]
    if w ~= nil then
        return w
    end
    w = m.weight
    if w == nil then
        return 1
    end
    if type(w) ~= "number" or w ~= w or w <= 0 or w == huge then
        error(format("configuration error: member %s has weight %s;"
                     .. " weights must be positive numbers", m.name,
                     tostring(w)), 0)
    end
    return w
end

-- The members that may own shards, each as { member, shards, weight },
-- and the totals S (shards owned) and W (weight).
local function regions(self, v)
    local owned = util.owned(v)
    local list, shards, weight = {}, 0, 0
    for _, m in ipairs(v.members) do
        if util.can_own(m) then
            local r = { member = m, shards = owned[m.name], weight = self:weight(m) }
            list[#list + 1] = r
            shards = shards + #r.shards
            weight = weight + r.weight
        end
    end
    return list, shards, weight
end

-- Most suitable first, with `load` the key to compare after version.
local function sort_regions(list, load)
    sort(list, function(x, y)
        local a, b = x.member, y.member
        local la, lb = util.is_leaving(a), util.is_leaving(b)
        if la ~= lb then
            return lb
        end
        local v = util.compare_versions(a.version, b.version)
        if v ~= 0 then
            return v > 0
        end
        local ka, kb = load(x), load(y)
        if ka ~= kb then
            return ka < kb
        end
        return util.older(a, b)
    end)
end

-- Returns the name of the member to own `shard`, or nil and a reason.
function methods:allocate(shard, view)
    local v = util.view(view, 2)
    util.check_shard(shard, v, 2)
    local list, shards, weight = regions(self, v)
    if #list == 0 then
        return nil, "no member can take shards of "
            .. tostring(v.entity_type) .. " (none is up or leaving)"
    end
    sort_regions(list, function(r)
        return #r.shards - (shards + 1) * r.weight / weight
    end)
    return list[1].member.name
end

-- Returns the shards to move this round, ascending.
function methods:rebalance(view)
    local v = util.view(view, 2)
    if not util.quiet(v) then
        return {}
    end
    local list, shards, weight = regions(self, v)
    if #list == 0 or shards == 0 then
        return {}
    end
    for _, r in ipairs(list) do
        r.optimal = ceil(shards * r.weight / weight - EPS)
    end
    -- Same order as allocation sees the members now.
    sort_regions(list, function(r)
        return #r.shards - shards * r.weight / weight
    end)
    return util.two_phase(list, util.limit(shards, self.relative_limit,
                                           self.absolute_limit))
end

-- The spread of the up members' deviations from their ideal shares, in
-- shards: max(count - ideal) - min(count - ideal). Used by rate_limited.
function methods:spread(view)
    local v = util.view(view, 2)
    local owned = util.owned(v)
    local up, shards, weight = {}, 0, 0
    for _, m in ipairs(v.members) do
        if m.status == "up" then
            local w = self:weight(m)
            up[#up + 1] = { count = #owned[m.name], weight = w }
            shards = shards + #owned[m.name]
            weight = weight + w
        end
    end
    if #up < 2 then
        return 0
    end
    local hi, lo = -huge, huge
    for _, r in ipairs(up) do
        local d = r.count - shards * r.weight / weight
        hi, lo = max(hi, d), min(lo, d)
    end
    return hi - lo
end

return M
