-- nemesis/strategy.lua: the allocation strategy of every nemesis type, a
-- weighted least_loaded whose weights nemesis/run rewrites to hot-reload
-- it (the `reload` fault; nodes run with --watch).
--
-- nemesis/run copies this file into the cluster dir as
-- nemesis_strategy.lua and rewrites the WEIGHTS line there (same text on
-- every node): a reload changes the placement, and the coordinator's
-- rebalance round moves shards. The id stays "nemesis_weighted" whatever
-- the weights, on purpose: a reload does not register the types again
-- (README "Hot reload (--watch)"), so a node restarted after a reload
-- must present the fingerprint the others started with. Everything else
-- of the strategy contract holds (pure, deterministic); the methods are
-- defined here, so the reload sees the types' strategies use this file.

local weighted = require "moonshard.strategy.weighted_least_loaded"

local setmetatable = setmetatable

local WEIGHTS = { n1 = 1, n2 = 1, n3 = 1, n4 = 1, n5 = 1 } -- WEIGHTS

local M = {}

local methods = {}
local mt = { __index = methods }

-- relative_limit 0.5: a round moves up to half the shards of a type
function M.new()
    local inner = weighted.new{ weights = WEIGHTS, relative_limit = 0.5 }
    return setmetatable({ id = "nemesis_weighted", inner = inner }, mt)
end

function methods:allocate(shard, view)
    return self.inner:allocate(shard, view)
end

function methods:rebalance(view)
    return self.inner:rebalance(view)
end

function methods:spread(view)
    return self.inner:spread(view)
end

return M
