-- moonshard.strategy: constructors for the shipped allocation strategies
-- and rebalance policies, for cluster config scripts.
--
--     local strategy = require "moonshard.strategy"
--     entities = {
--         Order = {
--             module     = "order",
--             allocation = strategy.role_aware(strategy.rendezvous(),
--                                              { "backend" }),
--             rebalance  = strategy.rate_limited{ threshold = 1,
--                                                 max_concurrent = 4 },
--         },
--     }
--
-- Each constructor is the `new` of moonshard.strategy.NAME (see that file
-- for the algorithm and options):
--
--   least_loaded(opts)            Akka's least-shard strategy (the default)
--   rendezvous(opts)              highest-random-weight placement
--   weighted_least_loaded(opts)   least_loaded per unit of weight
--   role_aware(inner, roles)      only members having all `roles`
--   no_rebalance(inner)           no voluntary moves
--   rate_limited(inner, opts)     voluntary moves gated and capped
--
-- How an entity's `allocation` and `rebalance` combine:
--
--   * `allocation` (a strategy; default least_loaded()) places every
--     unowned shard, including the shards a rebalance round moves.
--   * `rebalance` left out: the allocation strategy's own rebalance
--     proposes the voluntary moves.
--   * `rebalance` a policy without an inner strategy
--     (`no_rebalance()`, `rate_limited{...}`): it is bound to the
--     allocation strategy, as if written rate_limited(allocation, {...}).
--   * `rebalance` a full strategy (say rate_limited(least_loaded(), {...})):
--     its `rebalance` proposes the moves, and `allocation` still places
--     them. Keep the two consistent, or shards may be proposed and placed
--     back where they were.
--
-- `M.bind(allocation, rebalance)` does exactly this and returns the object
-- whose `rebalance` the coordinator calls.

local util = require "moonshard.strategy.util"

local error = error

local M = {}

M.least_loaded = require("moonshard.strategy.least_loaded").new
M.rendezvous = require("moonshard.strategy.rendezvous").new
M.weighted_least_loaded =
    require("moonshard.strategy.weighted_least_loaded").new
M.role_aware = require("moonshard.strategy.role_aware").new
M.no_rebalance = require("moonshard.strategy.no_rebalance").new
M.rate_limited = require("moonshard.strategy.rate_limited").new

M.is_strategy = util.is_strategy
M.is_policy = util.is_policy

-- Returns the strategy whose rebalance proposes an entity type's voluntary
-- moves, given its `allocation` strategy and its `rebalance` field (nil, an
-- unbound policy or a strategy). Raises on anything else.
function M.bind(allocation, rebalance)
    if not util.is_strategy(allocation) then
        error("bad 'allocation' argument (strategy expected)", 2)
    end
    if rebalance == nil then
        return allocation
    elseif util.is_policy(rebalance) then
        local s = rebalance:bind(allocation)
        if not util.is_strategy(s) then
            error("policy " .. rebalance.id .. " did not bind to a strategy", 2)
        end
        return s
    elseif util.is_strategy(rebalance) then
        return rebalance
    end
    error("bad 'rebalance' argument (strategy or policy expected)", 2)
end

return M
