-- examples/demo/cluster.lua: the demo the README's first command starts.
-- Three nodes on 127.0.0.1, each its own process, with the shipped
-- behaviors of entities/. Any node answers for any entity. `Account` is
-- persistent (event sourced): its journal lives in PostgreSQL, so an
-- account outlives the node that held it.
return {
    cluster = "demo",
    -- .ci/demo starts a throwaway PostgreSQL (.ci/pg) and passes its
    -- connection string (with a random password) in MOONSHARD_DATABASE.
    -- Without it, a local server on the default port is tried; the
    -- in-memory types work either way.
    database = os.getenv("MOONSHARD_DATABASE")
        or "host=127.0.0.1 port=5432 dbname=moonshard user=moonshard"
           .. " connect_timeout=5",
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
        -- leases short enough that a node killed outright (not left) has
        -- its shards taken over within seconds; a snapshot every 20 events
        Account   = { module = "account", shard_count = 64, idle_timeout = 600,
                      persistence = "events", lease_duration = 6,
                      lease_renew_interval = 2, lease_window = 30,
                      snapshot_every = 20 },
    },
}
