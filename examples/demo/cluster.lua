-- examples/demo/cluster.lua: the demo the README's first command starts.
-- Three nodes on 127.0.0.1, each its own process, with the shipped
-- behaviors of entities/. Any node answers for any entity.
return {
    cluster = "demo",
    -- A fixed secret, for this demo only: anyone who reads this file can
    -- join these nodes. A real cluster takes its own from
    -- `moonshard secret` (here through MOONSHARD_SECRET, which wins).
    secret = os.getenv("MOONSHARD_SECRET") or "demo-only-secret-4f9c2a7e",
    admin_token = os.getenv("MOONSHARD_ADMIN_TOKEN") or "demo-admin",
    nodes = {
        { name = "n1", listen = "127.0.0.1:7101", http = "127.0.0.1:7201" },
        { name = "n2", listen = "127.0.0.1:7102", http = "127.0.0.1:7202" },
        { name = "n3", listen = "127.0.0.1:7103", http = "127.0.0.1:7203" },
    },
    entities = {
        Counter   = { module = "counter", shard_count = 64, idle_timeout = 120 },
        Register  = { module = "register", shard_count = 64, idle_timeout = 600 },
        Inventory = { module = "inventory", shard_count = 64, idle_timeout = 600 },
        Order     = { module = "order", shard_count = 128, idle_timeout = 600 },
    },
}
