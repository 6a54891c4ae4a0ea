-- moonshard.strategy.no_rebalance: a rebalance policy that makes no
-- voluntary moves.
--
--     local no_rebalance = require "moonshard.strategy.no_rebalance"
--     local s = no_rebalance.new(inner)   -- allocate as inner, never rebalance
--     local p = no_rebalance.new()        -- a policy for an entity's
--                                         -- `rebalance` field: the config
--                                         -- binds it to the type's allocation
--
-- `rebalance` always returns {}. `allocate` (and `eligible`, `spread`) are
-- the inner strategy's, so unowned shards are still placed, and shards
-- still leave owners that are gone or not eligible: those moves are the
-- coordinator's, not voluntary ones.
--
-- Ids: `no_rebalance(INNER_ID)`; unbound, `no_rebalance`.

local util = require "moonshard.strategy.util"

local error = error
local setmetatable = setmetatable

local M = {}

-- luacheck: no self (a method need not use its object's options)
local methods = {}
local mt = { __index = methods }

local unbound = {}
local unbound_mt = { __index = unbound }

-- Returns the strategy `inner` with voluntary moves turned off, or, with no
-- argument, the unbound policy. Raises on anything else.
function M.new(inner)
    if inner == nil then
        return setmetatable({ id = "no_rebalance" }, unbound_mt)
    end
    if not util.is_strategy(inner) then
        error("bad 'inner' argument to no_rebalance (strategy expected: a"
              .. " table with an id and allocate and rebalance methods)", 2)
    end
    return setmetatable({ inner = inner, id = util.id("no_rebalance", nil,
                                                      inner) }, mt)
end

-- Binds the unbound policy to `inner` (what the config does with an
-- entity's `rebalance = strategy.no_rebalance()`).
function unbound:bind(inner)
    if not util.is_strategy(inner) then
        error("bad 'inner' argument to no_rebalance (strategy expected)", 2)
    end
    return M.new(inner)
end

function methods:allocate(shard, view)
    return self.inner:allocate(shard, view)
end

function methods:rebalance(view)
    util.view(view, 2)
    return {}
end

-- A policy does not change who may own shards: ask the inner strategy.
methods.eligible = util.inner_eligible

function methods:spread(view)
    if self.inner.spread then
        return self.inner:spread(view)
    end
    return util.count_spread(util.view(view, 2))
end

return M
