-- examples/custom_strategy/cluster.lua: three local nodes; Counter shards
-- are pinned round-robin with the custom strategy in pinned.lua (beside
-- this file, so `require "pinned"` finds it), Register uses the default
-- least_loaded.
local strategy = require "moonshard.strategy"
local pinned = require "pinned"

return {
    cluster = "pinned",
    -- A fixed secret, for this example only (anyone who reads this file
    -- can join these nodes); a real cluster takes its own from
    -- `moonshard secret`.
    secret = "example-only-secret-3b8d61f0",
    nodes = {
        { name = "n1", listen = "127.0.0.1:7111", http = "127.0.0.1:7211" },
        { name = "n2", listen = "127.0.0.1:7112", http = "127.0.0.1:7212" },
        { name = "n3", listen = "127.0.0.1:7113", http = "127.0.0.1:7213" },
    },
    entities = {
        Counter = {
            module = "counter",
            shard_count = 12,
            allocation = pinned.new{ members = { "n1", "n2", "n3" } },
            -- Send shards home two at a time, and only while the shard
            -- counts of the nodes differ at all.
            rebalance = strategy.rate_limited{ threshold = 0,
                                               max_concurrent = 2 },
        },
        Register = { module = "register", shard_count = 64 },
    },
}
