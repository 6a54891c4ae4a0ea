return {
    cluster = "fz",
    secret = "spec-secret-7f3a9c2e41b8",
    nodes = { { name = "a", listen = "127.0.0.1:7101", http = "127.0.0.1:7201" } },
    entities = { Counter = { module = "counter", shard_count = 8 } },
}
