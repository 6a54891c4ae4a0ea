-- examples/demo/cluster.lua: the demo the README's first command starts.
-- One node on 127.0.0.1 with the shipped behaviors of entities/.
return {
    cluster = "demo",
    nodes = {
        { name = "n1", listen = "127.0.0.1:7101", http = "127.0.0.1:7201" },
    },
    entities = {
        Counter   = { module = "counter", shard_count = 64, idle_timeout = 120 },
        Register  = { module = "register", shard_count = 64, idle_timeout = 600 },
        Inventory = { module = "inventory", shard_count = 64, idle_timeout = 600 },
        Order     = { module = "order", shard_count = 128, idle_timeout = 600 },
    },
}
