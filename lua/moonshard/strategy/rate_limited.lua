-- moonshard.strategy.rate_limited: a rebalance policy that lets the inner
-- strategy's voluntary moves through only while the plan is uneven enough,
-- and only a few at a time.
--
--     local rate_limited = require "moonshard.strategy.rate_limited"
--     local s = rate_limited.new(inner, { threshold = 1, max_concurrent = 4 })
--     local p = rate_limited.new{ threshold = 1, max_concurrent = 4 }
--         -- a policy for an entity's `rebalance` field: the config binds it
--         -- to the type's allocation strategy
--
-- `rebalance(view)` returns {} unless all of these hold, and otherwise the
-- inner strategy's proposals, minus shards already moving, ascending,
-- truncated to the first max_concurrent - (moves in progress):
--
--   * fewer than max_concurrent shards are in progress;
--   * the most and least loaded eligible up members differ by more than
--     `threshold` shards: the inner strategy's `spread(view)` when it has
--     one (least_loaded: shard counts; weighted_least_loaded: deviation
--     from each member's ideal share), else the difference of shard counts
--     over the up members it finds eligible;
--   * no member is joining or unreachable and all run the same version.
--
-- It raises when the inner strategy answers something that is not a list
-- of shards in range. `allocate` (and `eligible`, `spread`) are the inner
-- strategy's.
--
-- Options: threshold, a number >= 0 (default 1); max_concurrent, an
-- integer >= 1 (default 3). The defaults are those of Akka's pre-2.6.10
-- least-shard strategy (rebalance-threshold, max-simultaneous-rebalance).
-- Ids: `rate_limited{max_concurrent=4,threshold=1}(INNER_ID)`; unbound,
-- without the "(INNER_ID)".

local util = require "moonshard.strategy.util"

local type = type
local error = error
local ipairs = ipairs
local setmetatable = setmetatable
local huge = math.huge

local M = {}

local methods = {}
local mt = { __index = methods }

local unbound = {}
local unbound_mt = { __index = unbound }

local function check_options(opts, level)
    level = level + 1
    opts = util.options(opts, { "max_concurrent", "threshold" },
                        "rate_limited", level)
    return {
        threshold = util.number_option(opts, "threshold", 0, huge, false, 1,
                                       level),
        max_concurrent = util.integer_option(opts, "max_concurrent", 1, 3,
                                             level),
    }
end

-- rate_limited.new(inner, opts) returns a strategy; rate_limited.new(opts)
-- (or no argument) the unbound policy. Raises on a bad argument or option.
function M.new(inner, opts)
    if util.is_strategy(inner) then
        local o = check_options(opts, 2)
        local self = { inner = inner, threshold = o.threshold,
                       max_concurrent = o.max_concurrent }
        self.id = util.id("rate_limited", o, inner)
        return setmetatable(self, mt)
    end
    if opts ~= nil or (inner ~= nil and type(inner) ~= "table")
        or util.is_policy(inner)
        or (type(inner) == "table" and inner.allocate ~= nil) then
        error("bad 'inner' argument to rate_limited (strategy expected: a"
              .. " table with an id and allocate and rebalance methods)", 2)
    end
    local o = check_options(inner, 2)
    return setmetatable({ id = util.id("rate_limited", o), options = o },
                        unbound_mt)
end

-- Binds the unbound policy to `inner` (what the config does with an
-- entity's `rebalance = strategy.rate_limited{...}`).
function unbound:bind(inner)
    if not util.is_strategy(inner) then
        error("bad 'inner' argument to rate_limited (strategy expected)", 2)
    end
    return M.new(inner, self.options)
end

function methods:allocate(shard, view)
    return self.inner:allocate(shard, view)
end

-- A policy does not change who may own shards: ask the inner strategy.
methods.eligible = util.inner_eligible

function methods:spread(view)
    local inner = self.inner
    if inner.spread then
        return inner:spread(view)
    end
    return util.count_spread(util.view(view, 2), inner.eligible and function(m)
        return inner:eligible(m)
    end or nil)
end

function methods:rebalance(view)
    local v = util.view(view, 2)
    local room = self.max_concurrent - util.in_progress_count(v)
    if room <= 0 or not util.stable(v) or self:spread(view) <= self.threshold
    then
        return {}
    end
    local proposed = util.check_proposals(self.inner:rebalance(view), v,
                                          self.inner.id, 2)
    local moves = {}
    for _, shard in ipairs(proposed) do
        if #moves >= room then
            break
        end
        if not v.in_progress[shard] then
            moves[#moves + 1] = shard
        end
    end
    return moves
end

return M
