-- spec/04-postgres/persist_spec.lua: persistent entities on a real node
-- (issue 11 points 3, 6, 9): event-sourced (persistence = "events") and
-- durable-state (persistence = "state") entities recover after
-- passivation and after a node restart; snapshot_every and
-- delete_events_on_snapshot show in the tables; numbers come back bit for
-- bit; a writer whose lease epoch is no longer current is refused
-- (stale_owner) and a sequence written by someone else is a
-- revision_conflict, both stopping the entity; /v1/stats "persistence"
-- and the moonshard_persist_* metrics count it all.
--
-- Needs the per-shard leases wired into the region (the node acquires
-- them itself before it takes a shard's messages).

local helpers = require "helpers.node"
local pg = require "helpers.pg"
local numbers = require "fixtures.numbers"

local query = pg.query

-- The same double, bit for bit (== alone would take -0 for 0).
local function same(want, got)
    return type(got) == "number" and want == got
        and string.format("%a", want) == string.format("%a", got)
end

local function entities(ledger)
    local l = { module = "ledger", persistence = "events", idle_timeout = 1,
                shard_count = 4, snapshot_every = 3,
                delete_events_on_snapshot = true }
    for k, v in pairs(ledger or {}) do l[k] = v end
    return {
        Ledger = l,
        Keeper = { module = "ledger", persistence = "events",
                   idle_timeout = 1, shard_count = 4, snapshot_every = 2 },
        Profile = { module = "profile", persistence = "state",
                    idle_timeout = 1, shard_count = 4 },
    }
end

local function persistence(n)
    return n:stats().persistence
end

-- waits until the node has no active entity of its own (passivated)
local function wait_passivated(n)
    helpers.wait_until(function()
        local s = n:stats()
        return s.active_entities == 0, "active: "
            .. tostring(s.active_entities)
    end, 20, "every entity passivated")
end

describe("persistent entities", function()
    local srv
    local dbs = 0

    setup(function() srv = pg.start() end)
    teardown(function()
        helpers.stop_all_checked()
        pg.stop_all()
    end)

    -- a fresh database; returns its name and connection string
    local function database()
        dbs = dbs + 1
        local name = "persist_" .. dbs
        return name, pg.database(srv, name)
    end

    -- one node with a database of its own, the schema migrated
    local function node(ledger)
        local db, ci = database()
        local c = helpers.cluster_up({
            size = 1, entities = entities(ledger),
            settings = { database = ci },
        })
        local n = c.nodes[1]
        pg.wait_migrated(n)
        return n, db
    end

    local function sql(db, text)
        return query(srv, db, text)
    end

    it("event-sourced: snapshots, deleted events, recovery after "
       .. "passivation", function()
        local n, db = node()
        for i = 1, 5 do
            local r = n:call("Ledger", "acct-1", { type = "deposit", amount = i })
            assert.equal(i * (i + 1) / 2, r.balance)
            n:call("Keeper", "acct-1", { type = "deposit", amount = i })
        end
        -- Ledger: a snapshot after event 3, the events it covers deleted
        assert.same({ "4", "5" }, sql(db, "SELECT sequence FROM "
            .. "moonshard_events WHERE type = 'Ledger' AND id = 'acct-1' "
            .. "ORDER BY sequence"))
        assert.same({ "3" }, sql(db, "SELECT sequence FROM "
            .. "moonshard_snapshots WHERE type = 'Ledger' AND id = 'acct-1'"))
        assert.same({ "6" }, sql(db, "SELECT (state::json->>'balance') FROM "
            .. "moonshard_snapshots WHERE type = 'Ledger' AND id = 'acct-1'"))
        -- Keeper: a snapshot every 2 events, every event kept
        assert.same({ "1", "2", "3", "4", "5" }, sql(db, "SELECT sequence "
            .. "FROM moonshard_events WHERE type = 'Keeper' AND id = "
            .. "'acct-1' ORDER BY sequence"))
        assert.same({ "4" }, sql(db, "SELECT sequence FROM "
            .. "moonshard_snapshots WHERE type = 'Keeper' AND id = 'acct-1'"))
        -- a command without events writes nothing
        n:call("Ledger", "acct-1", { type = "get" })
        assert.same({ "2" }, sql(db, "SELECT count(*) FROM moonshard_events "
            .. "WHERE type = 'Ledger' AND id = 'acct-1'"))

        local before = persistence(n).recoveries
        wait_passivated(n)
        assert.same({ balance = 15, count = 5 },
                    n:call("Ledger", "acct-1", { type = "get" }))
        assert.same({ balance = 15, count = 5 },
                    n:call("Keeper", "acct-1", { type = "get" }))
        local p = persistence(n)
        assert.is_true(p.recoveries >= before + 2)
        assert.equal(10, p.events_written)
        assert.equal(3, p.snapshots)
        assert.equal(10, p.writes)
        assert.is_true(p.commits >= 1 and p.commits <= 10)
        assert.equal(p.writes, p.commit_latency_count)
        assert.equal(0, p.stale_refused)
        local _, _, metrics = n:http("GET", "/metrics")
        assert.truthy(metrics:find("moonshard_persist_events_written_total 10",
                                   1, true), metrics)
    end)

    it("durable state: saved when changed, recovered, deleted", function()
        local n, db = node()
        n:call("Profile", "u1", { type = "set", key = "a", value = 1 })
        n:call("Profile", "u1", { type = "set", key = "b", value = "x" })
        assert.same({ "2" }, sql(db, "SELECT revision FROM moonshard_states "
            .. "WHERE type = 'Profile' AND id = 'u1'"))
        -- a message that changes nothing saves nothing
        n:call("Profile", "u1", { type = "get" })
        assert.same({ "2" }, sql(db, "SELECT revision FROM moonshard_states "
            .. "WHERE type = 'Profile' AND id = 'u1'"))
        wait_passivated(n)
        assert.same({ fields = { a = 1, b = "x" } },
                    n:call("Profile", "u1", { type = "get" }))
        assert.same({ deleted = true },
                    n:call("Profile", "u1", { type = "delete" }))
        assert.same({ "0" }, sql(db, "SELECT count(*) FROM moonshard_states "
            .. "WHERE type = 'Profile' AND id = 'u1'"))
        -- the entity stopped; it starts again from init
        assert.same({ fields = {} },
                    n:call("Profile", "u1", { type = "get" }))
    end)

    it("recovers after a node restart", function()
        local n = node()
        n:call("Ledger", "acct-2", { type = "deposit", amount = 7 })
        n:call("Ledger", "acct-2", { type = "deposit", amount = 8 })
        n:call("Profile", "u2", { type = "set", key = "k", value = "v" })
        n:stop()
        n:launch()
        n:wait_healthy()
        assert.same({ balance = 15, count = 2 },
                    n:call("Ledger", "acct-2", { type = "get" }))
        assert.same({ fields = { k = "v" } },
                    n:call("Profile", "u2", { type = "get" }))
        -- and goes on from there
        assert.same({ balance = 16 },
                    n:call("Ledger", "acct-2", { type = "deposit", amount = 1 }))
    end)

    it("keeps every number exact through the journal", function()
        local n = node({ snapshot_every = 2 })
        local values = numbers.values()
        local more = { 0.1, 1e-300, 2 ^ 53 - 1 } -- what ledger adds
        local big = "9007199254740993"
        -- numbers made in the handlers (through the node's encoder)
        n:call("Ledger", "num-1", { type = "put_numbers" })
        n:call("Profile", "num-1", { type = "set_numbers" })
        -- an event only (num-1: 1 event), and a snapshot (num-2: 2)
        n:call("Ledger", "num-2", { type = "put", value = 0 })
        n:call("Ledger", "num-2", { type = "put_numbers" })
        wait_passivated(n)
        for _, id in ipairs({ "num-1", "num-2" }) do
            local got = n:call("Ledger", id, { type = "get" }).value
            assert.equal(big, got.big)
            local want = {}
            for _, v in ipairs(values) do want[#want + 1] = v end
            for _, v in ipairs(more) do want[#want + 1] = v end
            assert.equal(#want, #got.values)
            for i = 1, #want do
                assert.is_true(same(want[i], got.values[i]),
                               string.format("%s value %d: %.17g, got %s", id,
                                             i, want[i],
                                             tostring(got.values[i])))
            end
        end
        local got = n:call("Profile", "num-1", { type = "get" }).fields.values
        for i = 1, #values do
            assert.is_true(same(values[i], got[i]), "state value " .. i)
        end
    end)

    it("fences a stale writer: stale_owner, the entity stops", function()
        local n, db = node()
        n:call("Ledger", "acct-3", { type = "deposit", amount = 1 })
        -- another owner took the lease: the epoch moved on
        sql(db, "UPDATE moonshard_leases SET epoch = epoch + 1 "
            .. "WHERE type = 'Ledger'")
        local status, body, raw = n:ask("Ledger", "acct-3",
                                        { type = "deposit", amount = 2 })
        assert.equal(503, status, raw)
        assert.equal("stale_owner", body.error.code, raw)
        assert.same({ "1" }, sql(db, "SELECT count(*) FROM moonshard_events "
            .. "WHERE type = 'Ledger' AND id = 'acct-3'"))
        assert.is_true(persistence(n).stale_refused >= 1)
        assert.truthy(n:log():find("stale_owner", 1, true))
    end)

    it("recovers from the database after a write whose outcome is "
       .. "unknown", function()
        local n, db = node()
        n:call("Ledger", "acct-5", { type = "deposit", amount = 1 })
        srv:pause() -- the write below cannot reach the database
        local status, _, raw = n:ask("Ledger", "acct-5",
                                     { type = "deposit", amount = 50 }, 30)
        assert.are_not.equal(200, status, raw)
        srv:resume()
        -- the deposit was applied in memory before the write: the entity
        -- must forget it and read the database again
        local got = helpers.wait_until(function()
            local st, body = n:ask("Ledger", "acct-5", { type = "get" })
            return st == 200 and body, tostring(st)
        end, 60, "the entity answers again")
        assert.same({ balance = 1, count = 1 }, got)
        assert.same({ "1" }, sql(db, "SELECT count(*) FROM moonshard_events "
            .. "WHERE type = 'Ledger' AND id = 'acct-5'"))
        assert.is_true(persistence(n).db_errors >= 1)
    end)

    it("refuses a module without what its persistence needs", function()
        local _, ci = database()
        local c = helpers.cluster_up({
            size = 1,
            entities = {
                -- counter has receive but no command/apply
                Bad = { module = "counter", persistence = "events" },
                -- ledger has command/apply but no receive
                Worse = { module = "ledger", persistence = "state" },
                Good = { module = "profile", persistence = "state" },
            },
            settings = { database = ci },
        })
        local n = c.nodes[1]
        for _, t in ipairs({ "Bad", "Worse" }) do
            local status, body, raw = n:ask(t, "x", { type = "get" })
            assert.are_not.equal(200, status)
            assert.equal("unavailable", body and body.error.code, raw)
        end
        local log = n:log()
        assert.truthy(log:find("has no command(state, cmd, ctx) function",
                               1, true), log)
        assert.truthy(log:find("has no receive(state, msg, ctx) function",
                               1, true), log)
    end)

    it("a sequence written by another writer is a revision_conflict",
       function()
        local n, db = node()
        n:call("Ledger", "acct-4", { type = "deposit", amount = 1 })
        sql(db, "INSERT INTO moonshard_events (cluster, type, id, sequence, "
            .. "epoch, payload) SELECT cluster, type, id, 2, epoch, "
            .. "'{\"type\":\"deposited\",\"amount\":100}' FROM "
            .. "moonshard_events WHERE type = 'Ledger' AND id = 'acct-4'")
        local status, body, raw = n:ask("Ledger", "acct-4",
                                        { type = "deposit", amount = 2 })
        assert.equal(409, status, raw)
        assert.equal("revision_conflict", body.error.code, raw)
        assert.same({ "2" }, sql(db, "SELECT count(*) FROM moonshard_events "
            .. "WHERE type = 'Ledger' AND id = 'acct-4'"))
        assert.equal(1, persistence(n).conflicts)
        -- the entity stopped; activated again, it recovers both events
        helpers.wait_until(function()
            return n:stats().active_entities == 0
        end, 10, "the entity stopped")
        assert.same({ balance = 101, count = 2 },
                    n:call("Ledger", "acct-4", { type = "get" }))
    end)
end)
