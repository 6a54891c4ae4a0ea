local config = require "moonshard.config"

-- A valid config; cases below edit it. A line ending in "--@" marks where
-- the error is expected.
local BASE = [[
-- a test cluster
local unused = { module = "decoy", shard_count = 1 }

return {
    cluster = "demo",
    secret = "s3cret-4b7e9d01a2c6",
    nodes = {
        { name = "n1", listen = "127.0.0.1:7101", http = "127.0.0.1:7201",
          roles = { "backend" } },
        {
            name = "n2",
            listen = "127.0.0.1:7102",
            http = "127.0.0.1:7202",
        },
    },
    entities = {
        Counter = {
            module = "counter",
            shard_count = 16,
            on_error = "stop",
        },
        Order = {
            module = "order",
            shard_count = 32,
            idle_timeout = 2.5,
        },
    },
    limits = {
        json_max_depth = 16,
    },
}
]]

local function replace(src, old, new)
    local a, b = src:find(old, 1, true)
    assert(a, "template has no " .. old)
    assert(not src:find(old, b + 1, true), "template has two " .. old)
    return src:sub(1, a - 1) .. new .. src:sub(b + 1)
end

local function marked_line(src)
    local n = 0
    for line in (src .. "\n"):gmatch("([^\n]*)\n") do
        n = n + 1
        if line:find("--@", 1, true) then
            return n
        end
    end
    error("no --@ marker")
end

local created = {}

-- Writes `src` to a fresh temp file and returns its path.
local function write_temp(src, suffix)
    local base = os.tmpname()
    local path = base .. (suffix or ".lua")
    created[#created + 1] = base
    created[#created + 1] = path
    local f = assert(io.open(path, "w"))
    f:write(src)
    f:close()
    return path, base
end

describe("moonshard.config", function()
    local saved_path

    before_each(function()
        saved_path = package.path
    end)

    after_each(function()
        package.path = saved_path
        for _, p in ipairs(created) do
            os.remove(p)
        end
        created = {}
    end)

    describe("load", function()
        it("loads a valid file and fills every default", function()
            local path = write_temp(BASE)
            local cfg = assert(config.load(path))
            assert.equal("demo", cfg.cluster)
            assert.equal("s3cret-4b7e9d01a2c6", cfg.secret)
            assert.equal(path, cfg.file)
            -- the nodes listed, the first first (a restarted first node
            -- asks the others before it would found a cluster again)
            assert.same({ "127.0.0.1:7101", "127.0.0.1:7102" }, cfg.seeds)
            assert.same({ name = "n2", listen = "127.0.0.1:7102",
                          http = "127.0.0.1:7202", roles = {}, weight = 1 },
                        cfg.nodes[2])
            assert.same({ "backend" }, cfg.nodes[1].roles)
            assert.same({ max_message_bytes = 1048576, json_max_depth = 16,
                          http_timeout_ms = 30000, http_connections = 1024 },
                        cfg.limits)
            assert.equal(64, cfg.gc_step_kb)
            assert.equal(64, cfg.gc_headroom_mb)
            assert.is_false(cfg.admin_remote)
            assert.is_false(cfg.max_active_entities)
        end)

        it("refuses a file of compiled bytecode, even a valid one", function()
            -- LuaJIT runs bytecode unverified: a damaged chunk (one is in
            -- fuzz/corpus/config/) crashed the loader, so none is run
            local bc = string.dump(assert(loadstring(BASE)))
            local path = write_temp(bc)
            local cfg, err = config.load(path)
            assert.is_nil(cfg)
            assert.equal(path .. ": a config file must be Lua source text,"
                         .. " not compiled bytecode", err)
        end)

        it("takes a partitioner function and names its code", function()
            local src = replace(BASE, "shard_count = 32,", [[shard_count = 32,
            partitioner = function(id, n) return #id % n end,]])
            local cfg = assert(config.load(write_temp(src)))
            local order = cfg.entities.Order
            assert.is_function(order.partitioner)
            assert.equal(5, order.partitioner("abcde", 32))
            assert.matches("^custom:%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x$",
                           order.partition_id)
            assert.equal("fnv1a", cfg.entities.Counter.partition_id)
            -- the same code gives the same id; other code another one
            local again = assert(config.load(write_temp(src)))
            assert.equal(order.partition_id,
                         again.entities.Order.partition_id)
            local other = replace(BASE, "shard_count = 32,", [[shard_count = 32,
            partitioner = function(id, n) return (#id + 1) % n end,]])
            assert.are_not.equal(order.partition_id, assert(config.load(
                write_temp(other))).entities.Order.partition_id)
        end)

        it("takes remember settings with their defaults", function()
            local src = replace(BASE, "shard_count = 32,", [[shard_count = 32,
                                remember = { store = "file", dir = "/var/lib/r" },]])
            local c = assert(config.load(write_temp(src)))
            assert.same({ store = "file", dir = "/var/lib/r", fsync = "always",
                          keep_on_idle = false, on_failure = "fail_open" },
                        c.entities.Order.remember)
            assert.is_false(c.entities.Counter.remember)
        end)

        it("takes persistence settings with their defaults", function()
            local src = replace(replace(BASE, [[cluster = "demo",]],
                                        [[cluster = "demo", database = "host=127.0.0.1",]]),
                                "shard_count = 32,", [[shard_count = 32, persistence = "events",
                                lease_duration = 30,]])
            local c = assert(config.load(write_temp(src)))
            local o = c.entities.Order
            assert.equal("events", o.persistence)
            assert.equal(30000, o.lease_duration_ms)
            assert.equal(3000, o.lease_renew_interval_ms)
            assert.equal(60000, o.lease_window_ms)
            assert.equal(100, o.snapshot_every)
            assert.is_false(o.delete_events_on_snapshot)
            assert.is_false(c.entities.Counter.persistence)
            assert.equal(86400000, c.operation_retention_ms)
            -- a short lease gets a renewal a third of it by default
            src = replace(src, "lease_duration = 30,", "lease_duration = 3,")
            o = assert(config.load(write_temp(src))).entities.Order
            assert.equal(1000, o.lease_renew_interval_ms)
            -- in whole milliseconds, never above a third (2000 / 3)
            src = replace(src, "lease_duration = 3,", "lease_duration = 2,")
            o = assert(config.load(write_temp(src))).entities.Order
            assert.equal(666, o.lease_renew_interval_ms)
        end)

        it("gives a type remembered in PostgreSQL leases, and only such a "
           .. "type lease settings without persistence", function()
            local src = replace(BASE, [[cluster = "demo",]],
                                [[cluster = "demo", database = "host=127.0.0.1",]])
            local pg = replace(src, "shard_count = 32,", [[shard_count = 32,
            remember = { store = "postgres" }, lease_duration = 4,]])
            local o = assert(config.load(write_temp(pg))).entities.Order
            assert.is_false(o.persistence)
            assert.equal(4000, o.lease_duration_ms)
            assert.equal(1333, o.lease_renew_interval_ms)
            local file = replace(src, "shard_count = 32,", [[shard_count = 32,
            remember = { store = "file", dir = "/tmp" }, lease_duration = 4,]])
            local c, err = config.load(write_temp(file))
            assert.is_nil(c)
            assert.matches("lease_duration: applies only to a type with "
                           .. "persistence", err, 1, true)
        end)

        it("takes a database connection string, none by default", function()
            assert.is_nil(assert(config.load(write_temp(BASE))).database)
            local uri = "postgresql://ms:pw-5c1e9a@127.0.0.1:5432/app"
            local src = replace(BASE, [[cluster = "demo",]],
                                [[cluster = "demo", database = "]] .. uri .. [[",]])
            assert.equal(uri, assert(config.load(write_temp(src))).database)
        end)

        it("takes admin_remote = true", function()
            local src = replace(BASE, [[cluster = "demo",]],
                                [[cluster = "demo", admin_remote = true,]])
            assert.is_true(assert(config.load(write_temp(src))).admin_remote)
        end)

        it("lists entity types sorted by name with defaults filled", function()
            local cfg = assert(config.load(write_temp(BASE)))
            assert.equal(2, #cfg.entity_list)
            local counter, order = cfg.entity_list[1], cfg.entity_list[2]
            -- The strategy objects are checked in strategy_config_spec.lua.
            local fields = {}
            for k, v in pairs(counter) do
                if k ~= "allocation" and k ~= "rebalance" then
                    fields[k] = v
                end
            end
            local ll = "least_loaded{absolute_limit=0,relative_limit=0.1}"
            assert.same({
                name = "Counter", module = "counter", shard_count = 16,
                idle_timeout = 120, idle_timeout_ms = 120000,
                on_error = "stop", max_pending = 10000, slow_handler_ms = 100,
                allocation_id = ll, rebalance_id = ll, partition_id = "fnv1a",
                persistence = false, remember = false,
            }, fields)
            assert.equal("Order", order.name)
            assert.equal(2500, order.idle_timeout_ms)
            assert.equal("resume", order.on_error)
            assert.equal(counter, cfg.entities.Counter)
        end)

        it("uses idle_timeout_ms 0 for idle_timeout = false", function()
            local src = replace(BASE, "idle_timeout = 2.5", "idle_timeout = false")
            local cfg = assert(config.load(write_temp(src)))
            assert.equal(0, cfg.entities.Order.idle_timeout_ms)
            assert.is_false(cfg.entities.Order.idle_timeout)
        end)

        it("never rounds a tiny idle_timeout down to 'never'", function()
            local src = replace(BASE, "idle_timeout = 2.5", "idle_timeout = 1e-4")
            local cfg = assert(config.load(write_temp(src)))
            assert.equal(1, cfg.entities.Order.idle_timeout_ms)
        end)

        it("keeps explicit seeds, limits, gc_step_kb and gc_headroom_mb",
           function()
            local src = replace(BASE, [[cluster = "demo",]], [[
cluster = "demo",
    seeds = { "127.0.0.1:7102", "localhost:7101", "[::1]:7103" },
    gc_step_kb = 8, gc_headroom_mb = 0,]])
            src = replace(src, "json_max_depth = 16,",
                          "json_max_depth = 16, max_message_bytes = 64,")
            local cfg = assert(config.load(write_temp(src)))
            assert.same({ "127.0.0.1:7102", "localhost:7101", "[::1]:7103" },
                        cfg.seeds)
            assert.equal(8, cfg.gc_step_kb)
            assert.equal(0, cfg.gc_headroom_mb)
            assert.equal(64, cfg.limits.max_message_bytes)
            src = replace(BASE, [[cluster = "demo",]],
                          [[cluster = "demo", gc_headroom_mb = 1024,]])
            assert.equal(1024,
                         assert(config.load(write_temp(src))).gc_headroom_mb)
        end)

        it("fills the watchdog's defaults and keeps its settings", function()
            local cfg = assert(config.load(write_temp(BASE)))
            assert.equal(5000, cfg.stuck_handler_ms)
            assert.equal(60000, cfg.stuck_handler_exit_ms)
            local src = replace(BASE, [[cluster = "demo",]], [[cluster = "demo",
    stuck_handler_ms = 250, stuck_handler_exit_ms = false,]])
            cfg = assert(config.load(write_temp(src)))
            assert.equal(250, cfg.stuck_handler_ms)
            assert.equal(0, cfg.stuck_handler_exit_ms) -- 0: never
            src = replace(BASE, [[cluster = "demo",]], [[cluster = "demo",
    stuck_handler_ms = 90000,]])
            cfg = assert(config.load(write_temp(src)))
            assert.equal(90000, cfg.stuck_handler_exit_ms) -- not below it
        end)

        it("keeps an on_member_event function, and none by default",
           function()
            local cfg = assert(config.load(write_temp(BASE)))
            assert.is_nil(cfg.on_member_event)
            local src = replace(BASE, [[cluster = "demo",]], [[cluster = "demo",
    on_member_event = function(ev) return ev.kind end,]])
            cfg = assert(config.load(write_temp(src)))
            assert.is_function(cfg.on_member_event)
            assert.equal("member_up", cfg.on_member_event({ kind = "member_up" }))
        end)

        it("fills the membership's defaults and keeps its settings",
           function()
            local cfg = assert(config.load(write_temp(BASE)))
            assert.equal(1000, cfg.heartbeat_interval_ms)
            assert.equal(5000, cfg.unreachable_after_ms)
            assert.equal(1000, cfg.gossip_interval_ms)
            assert.equal(3, cfg.gossip_fanout)
            assert.equal(5000, cfg.seed_timeout_ms)
            assert.equal(2000, cfg.lone_leave_timeout_ms)
            assert.equal("text", cfg.log_format)
            assert.equal(1, cfg.nodes[1].weight)
            assert.is_nil(cfg.nodes[1].version) -- the binary's
            local src = replace(BASE, [[cluster = "demo",]], [[cluster = "demo",
    heartbeat_interval = 0.25, unreachable_after = 0.5,
    gossip_interval = 0.1, gossip_fanout = 5, seed_timeout = 0.2,
    lone_leave_timeout = 30, log_format = "json",]])
            src = replace(src, [[name = "n2",]],
                          [[name = "n2", weight = 1000, version = "2.0.0-rc.1+b7",]])
            cfg = assert(config.load(write_temp(src)))
            assert.equal(250, cfg.heartbeat_interval_ms)
            assert.equal(500, cfg.unreachable_after_ms)
            assert.equal(100, cfg.gossip_interval_ms)
            assert.equal(5, cfg.gossip_fanout)
            assert.equal(200, cfg.seed_timeout_ms)
            assert.equal(30000, cfg.lone_leave_timeout_ms)
            assert.equal("json", cfg.log_format)
            assert.equal(1000, cfg.nodes[2].weight)
            assert.equal("2.0.0-rc.1+b7", cfg.nodes[2].version)
            -- 32 bytes, the most a member's version may have
            src = replace(BASE, [[name = "n2",]],
                          [[name = "n2", version = "]] .. ("v"):rep(32) .. [[",]])
            cfg = assert(config.load(write_temp(src)))
            assert.equal(("v"):rep(32), cfg.nodes[2].version)
        end)

        it("lets the script require modules beside it", function()
            -- Both temp files land in the same directory.
            local _, base = write_temp("return { name = 'from-module' }")
            local module_name = base:match("([^/]+)$")
            local src = replace(BASE, [[cluster = "demo",]],
                "cluster = require(" .. string.format("%q", module_name)
                .. ").name,")
            local cfg, err = config.load(write_temp(src))
            package.loaded[module_name] = nil
            assert.is_nil(err)
            assert.equal("from-module", cfg.cluster)
        end)

        it("gives the script the normal globals", function()
            local src = replace(BASE, [[secret = "s3cret-4b7e9d01a2c6",]],
                [[secret = os.getenv("MOONSHARD_NO_SUCH_VAR") or "k3y-" .. tostring(#"abc") .. "-9f8e7d6c5b4a",]])
            local cfg = assert(config.load(write_temp(src)))
            assert.equal("k3y-3-9f8e7d6c5b4a", cfg.secret)
        end)

        it("keeps the script's own globals out of _G", function()
            local src = "moonshard_config_leak = true\n" .. BASE
            assert(config.load(write_temp(src)))
            assert.is_nil(rawget(_G, "moonshard_config_leak"))
        end)

        it("returns the Lua message for a syntax error", function()
            local src = replace(BASE, [[cluster = "demo",]], [[cluster = "demo" "x" = 1,]])
            local path = write_temp(src)
            local cfg, err = config.load(path)
            assert.is_nil(cfg)
            assert.matches(path:gsub("%p", "%%%0") .. ":5:", err)
        end)

        it("returns the Lua message for a runtime error", function()
            local src = replace(BASE, [[secret = "s3cret-4b7e9d01a2c6",]],
                                [[secret = nil .. "x", --@]])
            local path = write_temp(src)
            local cfg, err = config.load(path)
            assert.is_nil(cfg)
            assert.matches(path:gsub("%p", "%%%0") .. ":" .. marked_line(src)
                           .. ": attempt to concatenate", err)
        end)

        it("rejects a script that does not return a table", function()
            local path = write_temp("local x = 1\nreturn 'demo'\n")
            local cfg, err = config.load(path)
            assert.is_nil(cfg)
            assert.equal(path .. ":2: config script must return a table"
                         .. " (got \"demo\")", err)
        end)

        it("reports a missing file", function()
            local cfg, err = config.load("/nonexistent/moonshard/cluster.lua")
            assert.is_nil(cfg)
            assert.matches("/nonexistent/moonshard/cluster.lua", err, 1, true)
        end)

        it("raises on a non-string path", function()
            assert.has_error(function() config.load(42) end,
                             "bad 'path' argument (string expected, got number)")
        end)
    end)

    describe("the secret", function()
        -- one node, no secret: may run alone
        local SINGLE = [[
return {
    cluster = "solo",
    nodes = { { name = "n1", listen = "127.0.0.1:7101", http = "127.0.0.1:7201" } },
    entities = { Counter = { module = "counter" } },
}
]]

        it("may be left out by a config of one node", function()
            local cfg = assert(config.load(write_temp(SINGLE)))
            assert.is_nil(cfg.secret)
            assert.same({ "127.0.0.1:7101" }, cfg.seeds)
        end)

        it("may be left out when the only seed is the node's own address",
           function()
            local src = replace(SINGLE, [[cluster = "solo",]],
                                [[cluster = "solo", seeds = { "127.0.0.1:7101" },]])
            assert(config.load(write_temp(src)))
        end)

        it("is required by one node with another seed", function()
            -- no `secret` line to point at: the line of `return {`
            local src = replace(SINGLE, [[cluster = "solo",]],
                [[cluster = "solo", seeds = { "127.0.0.1:7101", "127.0.0.1:7102" },]])
            src = replace(src, "return {", "return { --@")
            local path = write_temp(src)
            local cfg, err = config.load(path)
            assert.is_nil(cfg)
            assert.equal(path .. ":" .. marked_line(src) .. ": secret: required"
                         .. " when a seed (127.0.0.1:7102) is not this node's"
                         .. " own listen address; generate one with"
                         .. " `moonshard secret` (got nil)", err)
        end)

        it("is required by one node whose seed names it differently",
           function()
            -- compared as written: refusing is the safe side
            local src = replace(SINGLE, [[cluster = "solo",]],
                [[cluster = "solo", seeds = { "localhost:7101" },]])
            local cfg, err = config.load(write_temp(src))
            assert.is_nil(cfg)
            assert.matches("secret: required when a seed (localhost:7101)",
                           err, 1, true)
        end)

        it("is checked when a single node sets one", function()
            local src = replace(SINGLE, [[cluster = "solo",]],
                                [[cluster = "solo", secret = "tooshort", --@]])
            local path = write_temp(src)
            local _, err = config.load(path)
            assert.equal(path .. ":" .. marked_line(src) .. ": secret: must be"
                         .. " at least 16 bytes; generate one with"
                         .. [[ `moonshard secret` (got "8 bytes")]], err)
        end)

        it("never shows up in an error", function()
            local src = replace(BASE, [[secret = "s3cret-4b7e9d01a2c6",]],
                                [[secret = "pw-1234",]])
            local _, err = config.load(write_temp(src))
            assert.is_nil(err:find("pw-1234", 1, true))
            src = replace(BASE, [[secret = "s3cret-4b7e9d01a2c6",]],
                          [[secret = "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzz",]])
            _, err = config.load(write_temp(src))
            assert.is_nil(err:find("zzzz", 1, true))
        end)

        it("accepts 16 bytes that are not low entropy", function()
            assert.is_nil(config.secret_problem("demo-only-secret"))
            assert.equal("must be at least 16 bytes",
                         config.secret_problem("demo-only-secre"))
        end)

        it("accepts every secret of the `moonshard secret` form", function()
            -- 64 hex digits of random bytes; a fixed seed keeps this
            -- reproducible
            math.randomseed(9)
            for _ = 1, 2000 do
                local t = {}
                for i = 1, 32 do
                    t[i] = string.format("%02x", math.random(0, 255))
                end
                local s = table.concat(t)
                assert.is_nil(config.secret_problem(s), s)
            end
        end)

        it("is set and accepted in every example config", function()
            local p = io.popen("ls examples/*/cluster.lua")
            local n = 0
            for path in p:lines() do
                local cfg, err = config.load(path)
                assert(cfg, err)
                assert.is_string(cfg.secret, path)
                n = n + 1
            end
            p:close()
            assert.is_true(n >= 2)
        end)

        it("raises on a non-string argument", function()
            assert.has_error(function() config.secret_problem(nil) end,
                             "bad 'secret' argument (string expected, got nil)")
        end)
    end)

    describe("bad fields", function()
        -- { name, { {old, new}, ... }, expected "FIELD: reason (got V)" }
        local cases = {
            { "an empty cluster name",
              { { [[cluster = "demo",]], [[cluster = "", --@]] } },
              [[cluster: must be a non-empty string (got "")]] },
            { "a cluster name with spaces",
              { { [[cluster = "demo",]], [[cluster = "my demo", --@]] } },
              [[cluster: must contain only letters, digits, '_', '.' and '-' (got "my demo")]] },
            { "a missing cluster (at the return line)",
              { { [[cluster = "demo",]], "" }, { "return {", "return { --@" } },
              "cluster: required (got nil)" },
            { "a non-string secret",
              { { [[secret = "s3cret-4b7e9d01a2c6",]], [[secret = 42, --@]] } },
              "secret: must be a non-empty string (got a number)" },
            { "a secret given as a number (never shown)",
              { { [[secret = "s3cret-4b7e9d01a2c6",]],
                  [[secret = 7305918264537281, --@]] } },
              "secret: must be a non-empty string (got a number)" },
            { "an admin token given as a number (never shown)",
              { { [[secret = "s3cret-4b7e9d01a2c6",]],
                  [[secret = "s3cret-4b7e9d01a2c6", admin_token = 982734, --@]] } },
              "admin_token: must be a non-empty string (got a number)" },
            { "a missing secret with two nodes (at the return line)",
              { { [[secret = "s3cret-4b7e9d01a2c6",]], "" }, { "return {", "return { --@" } },
              "secret: required when the config lists more than one node;"
              .. " generate one with `moonshard secret` (got nil)" },
            { "a secret from an unset environment variable",
              { { [[secret = "s3cret-4b7e9d01a2c6",]],
                  [[secret = os.getenv("MOONSHARD_NO_SUCH_VAR_9"), --@]] } },
              "secret: required when the config lists more than one node;"
              .. " generate one with `moonshard secret` (got nil)" },
            { "a secret shorter than 16 bytes",
              { { [[secret = "s3cret-4b7e9d01a2c6",]], [[secret = "s3cret-4b7e9d01", --@]] } },
              "secret: must be at least 16 bytes; generate one with"
              .. [[ `moonshard secret` (got "15 bytes")]] },
            { "a secret of one repeated character",
              { { [[secret = "s3cret-4b7e9d01a2c6",]], [[secret = ("x"):rep(40), --@]] } },
              "secret: is too easy to guess: fewer than 6 distinct bytes;"
              .. [[ generate one with `moonshard secret` (got "40 bytes")]] },
            { "a secret of few distinct bytes",
              { { [[secret = "s3cret-4b7e9d01a2c6",]], [[secret = "abcdeabcdeedcbaabcdeeddc", --@]] } },
              "secret: is too easy to guess: fewer than 6 distinct bytes;"
              .. [[ generate one with `moonshard secret` (got "24 bytes")]] },
            { "a secret that is a run of the alphabet",
              { { [[secret = "s3cret-4b7e9d01a2c6",]], [[secret = "abcdefghijklmnopqrstuvwxyz", --@]] } },
              "secret: is too easy to guess: a run of evenly spaced characters;"
              .. [[ generate one with `moonshard secret` (got "26 bytes")]] },
            { "a secret that is a run of digits, wrapping",
              { { [[secret = "s3cret-4b7e9d01a2c6",]], [[secret = "01234567890123456789", --@]] } },
              "secret: is too easy to guess: a run of evenly spaced characters;"
              .. [[ generate one with `moonshard secret` (got "20 bytes")]] },
            { "a secret that repeats a shorter piece",
              { { [[secret = "s3cret-4b7e9d01a2c6",]], [[secret = "hunter2!hunter2!hunt", --@]] } },
              "secret: is too easy to guess: a shorter piece repeated;"
              .. [[ generate one with `moonshard secret` (got "20 bytes")]] },
            { "a secret with a NUL byte",
              { { [[secret = "s3cret-4b7e9d01a2c6",]], [[secret = "s3cret-4b7e\0d01a2c6", --@]] } },
              "secret: must not contain a NUL byte;"
              .. [[ generate one with `moonshard secret` (got "19 bytes")]] },
            { "a secret over 255 bytes",
              { { [[secret = "s3cret-4b7e9d01a2c6",]], [[secret = ("s3cret-4b7e9d01a2c6"):rep(14), --@]] } },
              [[secret: must be at most 255 bytes (got "266 bytes")]] },
            { "a seed without a port",
              { { [[secret = "s3cret-4b7e9d01a2c6",]], [[seeds = { "127.0.0.1:7101", "127.0.0.1" }, --@]] } },
              [[seeds[2]: must be "host:port": expected "host:port" (got "127.0.0.1")]] },
            { "an empty seed list",
              { { [[secret = "s3cret-4b7e9d01a2c6",]], [[seeds = {}, --@]] } },
              [[seeds: must be a list of 1 to 16 "host:port" strings]]
              .. [[ (leave it out to use the nodes listed) (got table)]] },
            { "max_active_entities 0",
              { { [[cluster = "demo",]], [[cluster = "demo", max_active_entities = 0, --@]] } },
              "max_active_entities: must be an integer in 1..2147483647, or false (no limit) (got 0)" },
            { "a fractional max_active_entities",
              { { [[cluster = "demo",]], [[cluster = "demo", max_active_entities = 1.5, --@]] } },
              "max_active_entities: must be an integer in 1..2147483647, or false (no limit) (got 1.5)" },
            { "max_active_entities true in a node's entry",
              { { [[listen = "127.0.0.1:7102",]], [[listen = "127.0.0.1:7102", max_active_entities = true, --@]] } },
              "nodes[2].max_active_entities: must be an integer in 1..2147483647, or false (no limit) (got true)" },
            { "a port out of range",
              { { [[listen = "127.0.0.1:7102",]], [[listen = "127.0.0.1:70000", --@]] } },
              [[nodes[2].listen: must be "host:port": port must be an integer in 1..65535 (got "127.0.0.1:70000")]] },
            { "a host name that is not an address",
              { { [[http = "127.0.0.1:7202",]], [[http = "example.com:7202", --@]] } },
              [[nodes[2].http: must be "host:port": host must be an IPv4 address,]]
              .. [[ "localhost" or [IPv6] (got "example.com:7202")]] },
            { "a missing http address",
              { { [[http = "127.0.0.1:7202",]], "" }, { "        {\n", "        { --@\n" } },
              "nodes[2].http: required (got nil)" },
            { "a duplicate node name",
              { { [[name = "n2",]], [[name = "n1", --@]] } },
              [[nodes[2].name: duplicate node name, also used by nodes[1] (got "n1")]] },
            { "a duplicate address",
              { { [[listen = "127.0.0.1:7102",]], [[listen = "127.0.0.1:7201", --@]] } },
              [[nodes[2].listen: duplicate address, also used by nodes[1].http (got "127.0.0.1:7201")]] },
            { "a non-string role",
              { { [[roles = { "backend" } },]], [[roles = { "backend", 7 } }, --@]] } },
              "nodes[1].roles[2]: must be a non-empty string (got 7)" },
            { "an empty node list",
              { { "nodes = {", "nodes = { --@" },
                { [[{ name = "n1", listen = "127.0.0.1:7101", http = "127.0.0.1:7201",
          roles = { "backend" } },
        {
            name = "n2",
            listen = "127.0.0.1:7102",
            http = "127.0.0.1:7202",
        },]], "" } },
              "nodes: must be a non-empty list of node tables (got table)" },
            { "an empty entity map",
              { { "entities = {", "entities = { --@" },
                { [[Counter = {
            module = "counter",
            shard_count = 16,
            on_error = "stop",
        },
        Order = {
            module = "order",
            shard_count = 32,
            idle_timeout = 2.5,
        },]], "" } },
              "entities: must be a non-empty table of entity types (got table)" },
            { "a bad entity type name",
              { { "Order = {", [=[["9lives"] = { --@]=] } },
              [[entities["9lives"]: entity type name must be a letter followed by]]
              .. [[ letters, digits or '_' (got "9lives")]] },
            { "shard_count 0 in the second entity",
              { { "shard_count = 32,", "shard_count = 0, --@" } },
              "entities.Order.shard_count: must be an integer in 1..65536 (got 0)" },
            { "a fractional shard_count",
              { { "shard_count = 16,", "shard_count = 16.5, --@" } },
              "entities.Counter.shard_count: must be an integer in 1..65536 (got 16.5)" },
            { "a missing module (at the entity's line)",
              { { [[module = "order",]], "" }, { "Order = {", "Order = { --@" } },
              "entities.Order.module: required (got nil)" },
            { "a module name with spaces",
              { { [[module = "counter",]], [[module = "my counter", --@]] } },
              [[entities.Counter.module: must be a module name for require() (got "my counter")]] },
            { "idle_timeout = true",
              { { "idle_timeout = 2.5,", "idle_timeout = true, --@" } },
              "entities.Order.idle_timeout: must be a number of seconds > 0 (at most 1e+09), or false (got true)" },
            { "a negative idle_timeout",
              { { "idle_timeout = 2.5,", "idle_timeout = -1, --@" } },
              "entities.Order.idle_timeout: must be a number of seconds > 0 (at most 1e+09), or false (got -1)" },
            { "an unknown on_error policy",
              { { [[on_error = "stop",]], [[on_error = "restart", --@]] } },
              [[entities.Counter.on_error: must be "resume" or "stop" (got "restart")]] },
            { "max_pending above the limit",
              { { "idle_timeout = 2.5,", "max_pending = 1e7, --@" } },
              "entities.Order.max_pending: must be an integer in 1..1000000 (got 10000000)" },
            { "slow_handler_ms 0",
              { { "idle_timeout = 2.5,", "slow_handler_ms = 0, --@" } },
              "entities.Order.slow_handler_ms: must be an integer >= 1 (got 0)" },
            { "a too small max_message_bytes",
              { { "json_max_depth = 16,", "max_message_bytes = 10, --@" } },
              "limits.max_message_bytes: must be an integer in 64..67108864 (got 10)" },
            { "a fractional json_max_depth",
              { { "json_max_depth = 16,", "json_max_depth = 1.5, --@" } },
              "limits.json_max_depth: must be an integer in 1..1000 (got 1.5)" },
            { "limits that are not a table",
              { { "limits = {\n        json_max_depth = 16,\n    },",
                  "limits = 5, --@" } },
              "limits: must be a table (got 5)" },
            { "an admin_token longer than the host keeps",
              { { [[cluster = "demo",]], [[cluster = "demo", admin_token = ("t"):rep(128), --@]] } },
              [[admin_token: must be at most 127 bytes (got "128 bytes")]] },
            { "an empty database",
              { { [[cluster = "demo",]], [[cluster = "demo", database = "", --@]] } },
              [[database: must be a non-empty string (got "")]] },
            { "a database that is not a string (never shown)",
              { { [[cluster = "demo",]], [[cluster = "demo",
    database = { url = "postgresql://u:pw-5c1e9a@h/db" }, --@]] } },
              "database: must be a non-empty string (got a table)" },
            { "a database longer than the host keeps",
              { { [[cluster = "demo",]], [[cluster = "demo",
    database = "password=pw-5c1e9a " .. ("x"):rep(1005), --@]] } },
              [[database: must be at most 1023 bytes (got "1024 bytes")]] },
            { "a database with a NUL byte (never shown)",
              { { [[cluster = "demo",]], [[cluster = "demo",
    database = "password=pw-5c1e9a\0host=h", --@]] } },
              "database: must not contain a NUL byte (got 25 bytes)" },
            { "a misspelt database (its value never shown)",
              { { [[cluster = "demo",]], [[cluster = "demo",
    databse = "postgresql://ms:pw-5c1e9a@127.0.0.1/app", --@]] } },
              [[databse: unknown field, did you mean "database"? (got a string)]] },
            { "an unknown field holding a password (never shown)",
              { { [[cluster = "demo",]], [[cluster = "demo",
    db = "host=127.0.0.1 password=pw-5c1e9a", --@]] } },
              [[db: unknown field (got a string)]] },
            { "an unknown field holding a URI with a password (never shown)",
              { { [[cluster = "demo",]], [[cluster = "demo",
    pg = "postgres://ms:pw-5c1e9a@h/db", --@]] } },
              [[pg: unknown field (got a string)]] },
            { "a persistent type without a database",
              { { "shard_count = 32,", [[shard_count = 32, persistence = "events", --@]] } },
              "entities.Order.persistence: needs a database: set the top-level "
                  .. "'database' to a PostgreSQL connection string (got \"events\")" },
            { "an unknown persistence",
              { { "shard_count = 32,", [[shard_count = 32, persistence = "disk", --@]] } },
              [[entities.Order.persistence: must be "events" or "state" ]]
                  .. [[(leave it out for an in-memory type) (got "disk")]] },
            { "a lease setting on an in-memory type",
              { { "shard_count = 32,", [[shard_count = 32, lease_duration = 5, --@]] } },
              [[entities.Order.lease_duration: applies only to a type with ]]
                  .. [[persistence = "events" or "state" or remember.store = ]]
                  .. [["postgres" (got 5)]] },
            { "a renewal not comfortably shorter than the lease",
              { { [[cluster = "demo",]], [[cluster = "demo", database = "host=127.0.0.1",]] },
                { "shard_count = 32,", [[shard_count = 32, persistence = "state",
            lease_duration = 6, lease_renew_interval = 3, --@]] } },
              "entities.Order.lease_renew_interval: must be a number of seconds from "
                  .. "0.1 to lease_duration / 3 (2), so a lease is renewed well "
                  .. "before it expires (got 3)" },
            { "a lease_duration below a second",
              { { [[cluster = "demo",]], [[cluster = "demo", database = "host=127.0.0.1",]] },
                { "shard_count = 32,", [[shard_count = 32, persistence = "events",
            lease_duration = 0.5, --@]] } },
              "entities.Order.lease_duration: must be a number of seconds from 1 to 3600 (got 0.5)" },
            { "snapshots on a durable-state type",
              { { [[cluster = "demo",]], [[cluster = "demo", database = "host=127.0.0.1",]] },
                { "shard_count = 32,", [[shard_count = 32, persistence = "state",
            snapshot_every = 10, --@]] } },
              [[entities.Order.snapshot_every: applies only to persistence = "events" (got 10)]] },
            { "snapshots rarer than recovery can read",
              { { [[cluster = "demo",]], [[cluster = "demo", database = "host=127.0.0.1",]] },
                { "shard_count = 32,", [[shard_count = 32, persistence = "events",
            snapshot_every = 10001, --@]] } },
              "entities.Order.snapshot_every: must be an integer in 1..10000 (got 10001)" },
            { "an unknown remember store",
              { { "shard_count = 32,", [[shard_count = 32, remember = { store = "disk" }, --@]] } },
              [[entities.Order.remember.store: must be "memory", "file" or "postgres" (got "disk")]] },
            { "a file store without its dir",
              { { "shard_count = 32,", [[shard_count = 32, remember = { store = "file" }, --@]] } },
              "entities.Order.remember.dir: required (got nil)" },
            { "an fsync policy on another store",
              { { "shard_count = 32,", [[shard_count = 32,
            remember = { store = "memory", fsync = "never" }, --@]] } },
              [[entities.Order.remember.fsync: applies only to store = "file" (got "never")]] },
            { "an unknown fsync policy",
              { { "shard_count = 32,", [[shard_count = 32,
            remember = { store = "file", dir = "/tmp/r", fsync = "sometimes" }, --@]] } },
              [[entities.Order.remember.fsync: must be "always", "on_compaction" or "never" ]]
                  .. [[(got "sometimes")]] },
            { "an unknown on_failure",
              { { "shard_count = 32,", [[shard_count = 32,
            remember = { store = "memory", on_failure = "retry" }, --@]] } },
              [[entities.Order.remember.on_failure: must be "fail_open" or "fail_closed" (got "retry")]] },
            { "the postgres store without a database",
              { { "shard_count = 32,", [[shard_count = 32,
            remember = { store = "postgres" }, --@]] } },
              [[entities.Order.remember.store: needs a database: set the top-level ]]
                  .. [['database' to a PostgreSQL connection string (got "postgres")]] },
            { "an unknown remember field",
              { { "shard_count = 32,", [[shard_count = 32,
            remember = { store = "memory", keep_on_idel = true }, --@]] } },
              [[entities.Order.remember.keep_on_idel: unknown field, did you mean "keep_on_idle"? (got true)]] },
            { "a partitioner that is not a function",
              { { "shard_count = 32,", [[shard_count = 32, partitioner = "fnv", --@]] } },
              "entities.Order.partitioner: must be a function(id, shard_count) "
                  .. [[returning a shard in 0..shard_count-1 (got "fnv")]] },
            { "an admin_remote that is not a boolean",
              { { [[cluster = "demo",]], [[cluster = "demo", admin_remote = "yes", --@]] } },
              [[admin_remote: must be true or false (got "yes")]] },
            { "an http_timeout of 0",
              { { "json_max_depth = 16,", "json_max_depth = 16, http_timeout = 0, --@" } },
              "limits.http_timeout: must be a number of seconds from 0.1 to 3600 (got 0)" },
            { "http_connections 0",
              { { "json_max_depth = 16,", "json_max_depth = 16, http_connections = 0, --@" } },
              "limits.http_connections: must be an integer in 1..65536 (got 0)" },
            { "gc_step_kb 0",
              { { [[cluster = "demo",]], [[cluster = "demo", gc_step_kb = 0, --@]] } },
              "gc_step_kb: must be an integer >= 1 (got 0)" },
            { "gc_headroom_mb -1",
              { { [[cluster = "demo",]], [[cluster = "demo", gc_headroom_mb = -1, --@]] } },
              "gc_headroom_mb: must be an integer in 0..1024 (got -1)" },
            { "gc_headroom_mb above 1 GB",
              { { [[cluster = "demo",]], [[cluster = "demo", gc_headroom_mb = 1025, --@]] } },
              "gc_headroom_mb: must be an integer in 0..1024 (got 1025)" },
            { "gc_headroom_mb not an integer",
              { { [[cluster = "demo",]], [[cluster = "demo", gc_headroom_mb = 0.5, --@]] } },
              "gc_headroom_mb: must be an integer in 0..1024 (got 0.5)" },
            { "gc_headroom_mb as a string",
              { { [[cluster = "demo",]], [[cluster = "demo", gc_headroom_mb = "64", --@]] } },
              [[gc_headroom_mb: must be an integer in 0..1024 (got "64")]] },
            { "an unknown top-level field, with a hint",
              { { [[secret = "s3cret-4b7e9d01a2c6",]], [[secret = "s3cret-4b7e9d01a2c6", clustr = "x", --@]] } },
              [[clustr: unknown field, did you mean "cluster"? (got "x")]] },
            { "an unknown entity field, with a hint",
              { { "shard_count = 32,", "shard_cout = 32, --@" } },
              [[entities.Order.shard_cout: unknown field, did you mean "shard_count"? (got 32)]] },
            { "an unknown node field",
              { { [[name = "n2",]], [[name = "n2", colour = 3, --@]] } },
              "nodes[2].colour: unknown field (got 3)" },
            { "an unknown limits field",
              { { "json_max_depth = 16,", "json_max_depth = 16, frame_bytes = 1, --@" } },
              "limits.frame_bytes: unknown field (got 1)" },
            { "a stuck_handler_ms below 10",
              { { [[cluster = "demo",]], [[cluster = "demo", stuck_handler_ms = 5, --@]] } },
              "stuck_handler_ms: must be an integer in 10..86400000 (got 5)" },
            { "a stuck_handler_exit_ms below stuck_handler_ms",
              { { [[cluster = "demo",]], [[cluster = "demo", stuck_handler_ms = 500,
    stuck_handler_exit_ms = 400, --@]] } },
              "stuck_handler_exit_ms: must be an integer of milliseconds in "
                  .. "500..86400000 (from stuck_handler_ms on), or false (got 400)" },
            { "a stuck_handler_exit_ms of true",
              { { [[cluster = "demo",]], [[cluster = "demo", stuck_handler_exit_ms = true, --@]] } },
              "stuck_handler_exit_ms: must be an integer of milliseconds in "
                  .. "5000..86400000 (from stuck_handler_ms on), or false (got true)" },
            { "a heartbeat_interval below 50 ms",
              { { [[cluster = "demo",]], [[cluster = "demo", heartbeat_interval = 0.01, --@]] } },
              "heartbeat_interval: must be a number of seconds from 0.05 to 60 (got 0.01)" },
            { "a heartbeat_interval given as a string",
              { { [[cluster = "demo",]], [[cluster = "demo", heartbeat_interval = "1s", --@]] } },
              [[heartbeat_interval: must be a number of seconds from 0.05 to 60 (got "1s")]] },
            { "an unreachable_after below 2 heartbeat intervals",
              { { [[cluster = "demo",]],
                  [[cluster = "demo", heartbeat_interval = 0.5, unreachable_after = 0.9, --@]] } },
              "unreachable_after: must be at least 2 x heartbeat_interval (1 s), so one"
              .. " late answer does not make a member unreachable (got 0.9)" },
            { "a heartbeat_interval above half the default unreachable_after",
              { { [[cluster = "demo",]], [[cluster = "demo", heartbeat_interval = 3, --@]] } },
              "heartbeat_interval: must be at most unreachable_after / 2 (2.5 s, from"
              .. " the default unreachable_after; set that too) (got 3)" },
            { "an unreachable_after above 600 s",
              { { [[cluster = "demo",]], [[cluster = "demo", unreachable_after = 601, --@]] } },
              "unreachable_after: must be a number of seconds from 0.1 to 600 (got 601)" },
            { "a gossip_interval of 0",
              { { [[cluster = "demo",]], [[cluster = "demo", gossip_interval = 0, --@]] } },
              "gossip_interval: must be a number of seconds from 0.05 to 60 (got 0)" },
            { "a seed_timeout below 2 gossip rounds",
              { { [[cluster = "demo",]], [[cluster = "demo", gossip_interval = 1, seed_timeout = 1.5, --@]] } },
              "seed_timeout: must be at least 2 x gossip_interval (2 s), so the first"
              .. " seed hears from the others before it founds a cluster (got 1.5)" },
            { "a gossip_interval above half the default seed_timeout",
              { { [[cluster = "demo",]], [[cluster = "demo", gossip_interval = 3, --@]] } },
              "gossip_interval: must be at most seed_timeout / 2 (2.5 s, from the"
              .. " default seed_timeout; set that too) (got 3)" },
            { "a gossip_fanout of 0",
              { { [[cluster = "demo",]], [[cluster = "demo", gossip_fanout = 0, --@]] } },
              "gossip_fanout: must be an integer in 1..64 (got 0)" },
            { "a fractional gossip_fanout",
              { { [[cluster = "demo",]], [[cluster = "demo", gossip_fanout = 2.5, --@]] } },
              "gossip_fanout: must be an integer in 1..64 (got 2.5)" },
            { "a lone_leave_timeout of 0",
              { { [[cluster = "demo",]], [[cluster = "demo", lone_leave_timeout = 0, --@]] } },
              "lone_leave_timeout: must be a number of seconds from 0.1 to 600 (got 0)" },
            { "an unknown log_format",
              { { [[cluster = "demo",]], [[cluster = "demo", log_format = "logfmt", --@]] } },
              [[log_format: must be "text" or "json" (got "logfmt")]] },
            { "an on_member_event that is not a function",
              { { [[cluster = "demo",]], [[cluster = "demo", on_member_event = 5, --@]] } },
              "on_member_event: must be a function(ev), called with each"
              .. " membership event (got 5)" },
            { "an on_member_event given as a string",
              { { [[cluster = "demo",]], [[cluster = "demo", on_member_event = "print", --@]] } },
              [[on_member_event: must be a function(ev), called with each membership event (got "print")]] },
            { "a weight of 0",
              { { [[name = "n2",]], [[name = "n2", weight = 0, --@]] } },
              "nodes[2].weight: must be an integer in 1..1000 (got 0)" },
            { "a weight above 1000",
              { { [[name = "n2",]], [[name = "n2", weight = 1001, --@]] } },
              "nodes[2].weight: must be an integer in 1..1000 (got 1001)" },
            { "a fractional weight",
              { { [[name = "n2",]], [[name = "n2", weight = 1.5, --@]] } },
              "nodes[2].weight: must be an integer in 1..1000 (got 1.5)" },
            { "a version with a space",
              { { [[name = "n2",]], [[name = "n2", version = "1.0 beta", --@]] } },
              "nodes[2].version: must contain only letters, digits and"
              .. [[ . - + _ ~ : / @ # % (got "1.0 beta")]] },
            { "a version with a comma",
              { { [[name = "n2",]], [[name = "n2", version = "1,0", --@]] } },
              [[nodes[2].version: must contain only letters, digits and . - + _ ~ : / @ # % (got "1,0")]] },
            { "a version of 33 bytes",
              { { [[name = "n2",]], [[name = "n2", version = ("1"):rep(33), --@]] } },
              [[nodes[2].version: must be at most 32 bytes (got "33 bytes")]] },
            { "an empty version",
              { { [[name = "n2",]], [[name = "n2", version = "", --@]] } },
              [[nodes[2].version: must be a non-empty string (got "")]] },
            { "gc_headroom_mb in a node's entry (a top-level field)",
              { { [[name = "n2",]], [[name = "n2", gc_headroom_mb = 16, --@]] } },
              [[nodes[2].gc_headroom_mb: set only at the top level, for every node (got 16)]] },
            { "gc_step_kb in a node's entry (a top-level field)",
              { { [[name = "n2",]], [[name = "n2", gc_step_kb = 8, --@]] } },
              [[nodes[2].gc_step_kb: set only at the top level, for every node (got 8)]] },
            { "the secret in a node's entry, not shown",
              { { [[name = "n2",]], [[name = "n2", secret = "s3cret-4b7e9d01a2c6", --@]] } },
              [[nodes[2].secret: set only at the top level, for every node (got a string)]] },
            { "a misspelt weight",
              { { [[name = "n2",]], [[name = "n2", wieght = 2, --@]] } },
              [[nodes[2].wieght: unknown field, did you mean "weight"? (got 2)]] },
        }

        for _, case in ipairs(cases) do
            it("reports " .. case[1] .. " with file, line and field", function()
                local src = BASE
                for _, edit in ipairs(case[2]) do
                    src = replace(src, edit[1], edit[2])
                end
                local path = write_temp(src)
                local cfg, err = config.load(path)
                assert.is_nil(cfg)
                assert.equal(path .. ":" .. marked_line(src) .. ": " .. case[3],
                             err)
            end)
        end

        it("reports each error on one line", function()
            local src = replace(BASE, [[cluster = "demo",]],
                                "cluster = 'a\\nb', --@")
            local path = write_temp(src)
            local _, err = config.load(path)
            assert.equal(path .. ":" .. marked_line(src)
                         .. [[: cluster: must contain only letters, digits, '_', '.' and '-' (got "a\nb")]],
                         err)
            assert.is_nil(err:find("\n", 1, true))
        end)

        it("finds the line by text when the table is built in locals", function()
            local src = [[
local entities = {
    Counter = {
        module = "counter",
        shard_count = -3, --@
    },
}
local cfg = {
    cluster = "demo",
    nodes = { { name = "n1", listen = "127.0.0.1:7101", http = "127.0.0.1:7201" } },
    entities = entities,
}
return cfg
]]
            local path = write_temp(src)
            local _, err = config.load(path)
            assert.equal(path .. ":" .. marked_line(src)
                         .. ": entities.Counter.shard_count: must be an integer in 1..65536 (got -3)",
                         err)
        end)

        it("ignores keys inside comments when finding lines", function()
            local src = replace(BASE, "shard_count = 32,",
                "--[[ } shard_count = 1 ]] -- } shard_count = 2\n"
                .. "            shard_count = 0, --@")
            local path = write_temp(src)
            local _, err = config.load(path)
            assert.equal(path .. ":" .. marked_line(src)
                         .. ": entities.Order.shard_count: must be an integer in 1..65536 (got 0)",
                         err)
        end)
    end)

    describe("normalize", function()
        it("validates a table without a source file", function()
            local cfg, err = config.normalize({
                cluster = "x",
                nodes = { { name = "a", listen = "127.0.0.1:1", http = "127.0.0.1:2" } },
                entities = { Counter = { module = "counter", max_pending = 0 } },
            }, "inline")
            assert.is_nil(cfg)
            assert.equal("inline:1: entities.Counter.max_pending: must be an"
                         .. " integer in 1..1000000 (got 0)", err)
        end)
    end)

    describe("find_node", function()
        local cfg

        before_each(function()
            cfg = assert(config.load(write_temp(BASE)))
        end)

        it("returns the node with that name", function()
            assert.equal("127.0.0.1:7202", config.find_node(cfg, "n2").http)
        end)

        it("returns the first node when no name is given", function()
            assert.equal("n1", config.find_node(cfg).name)
        end)

        it("names the file when there is no such node", function()
            local node, err = config.find_node(cfg, "n9")
            assert.is_nil(node)
            assert.equal("no node named n9 in " .. cfg.file, err)
        end)
    end)

    describe("parse_address", function()
        it("splits IPv4, localhost and bracketed IPv6 addresses", function()
            assert.same({ "127.0.0.1", 7201 },
                        { config.parse_address("127.0.0.1:7201") })
            assert.same({ "localhost", 1 }, { config.parse_address("localhost:1") })
            assert.same({ "::1", 65535 }, { config.parse_address("[::1]:65535") })
            assert.same({ "fe80::1:2", 80 },
                        { config.parse_address("[fe80::1:2]:80") })
            assert.same({ "::ffff:10.0.0.1", 80 },
                        { config.parse_address("[::ffff:10.0.0.1]:80") })
        end)

        it("rejects malformed addresses with a reason", function()
            for _, bad in ipairs({
                "127.0.0.1", "127.0.0.1:", ":7101", "127.0.0.1:0",
                "127.0.0.1:65536", "127.0.0.1:07101", "127.0.0.1:http",
                "256.0.0.1:1", "1.2.3:1", "01.2.3.4:1", "example.com:80",
                "::1:80", "[::1]", "[::1]80", "[1::2::3]:80", "[12345::]:80",
                "[1:2:3:4:5:6:7:8:9]:80", "[]:80",
            }) do
                local host, err = config.parse_address(bad)
                assert.is_nil(host, bad)
                assert.equal("string", type(err), bad)
            end
        end)

        it("raises on a non-string argument", function()
            assert.has_error(function() config.parse_address(7101) end)
        end)
    end)
end)
