-- spec/04-postgres/big_snapshot_spec.lua: an event-sourced entity whose
-- state grew above what one statement may carry (1 MiB,
-- MS_PG_STATEMENT_MAX) can no longer be snapshotted. Its commands still
-- commit: the snapshot is skipped (logged) and tried again at the next
-- snapshot_every boundary, instead of failing every command that crosses
-- the boundary with too_large (the entity could never write again).
-- Recovery then reads the events after the last snapshot that fit.

local helpers = require "helpers.node"
local pg = require "helpers.pg"

local query = pg.query

describe("an entity whose state outgrew a snapshot", function()
    local srv

    setup(function() srv = pg.start() end)
    teardown(function()
        helpers.stop_all_checked()
        pg.stop_all()
    end)

    local n, db

    local function node()
        db = "big_snapshot"
        local c = helpers.cluster_up({
            size = 1,
            entities = {
                Rogue = { module = "rogue", persistence = "events",
                          shard_count = 2, idle_timeout = 1,
                          snapshot_every = 2 },
                Profile = { module = "profile", persistence = "state",
                            shard_count = 2 },
            },
            settings = { database = pg.database(srv, db) },
        })
        n = c.nodes[1]
        pg.wait_migrated(n)
    end

    it("keeps writing its events; recovery reads them all", function()
        node()
        local K = 400000
        -- the snapshot at 2 holds 800 kB; the one due at 4 would be 1.6 MB
        for i = 1, 6 do
            local status, body, raw = n:ask("Rogue", "g1",
                                            { type = "keep", bytes = K }, 30)
            assert.equal(200, status, raw and raw:sub(1, 300))
            assert.equal(i, body.count)
        end
        assert.same({ "2" }, query(srv, db, "SELECT sequence FROM "
            .. "moonshard_snapshots WHERE type = 'Rogue' AND id = 'g1'"))
        assert.same({ "6" }, query(srv, db, "SELECT max(sequence) FROM "
            .. "moonshard_events WHERE type = 'Rogue' AND id = 'g1'"))
        helpers.wait_until(function()
            return n:stats().active_entities == 0
        end, 20, "passivated")
        assert.same({ count = 6, total = 0, kept = 6 * K },
                    n:call("Rogue", "g1", { type = "stat" }, 30))
        -- a state that fits again is snapshotted again
        local st = n:ask("Rogue", "g2", { type = "keep", bytes = 10 })
        assert.equal(200, st)
        n:call("Rogue", "g2", { type = "keep", bytes = 10 })
        assert.same({ "2" }, query(srv, db, "SELECT sequence FROM "
            .. "moonshard_snapshots WHERE type = 'Rogue' AND id = 'g2'"))
    end)

    -- a durable state or one command's events above it: too_large,
    -- saying which, not "id or message above its size limit"
    it("refuses a state or events above it, saying so", function()
        if not n then node() end
        local big = string.rep("z", 600000)
        n:call("Profile", "p1", { type = "set", key = "a", value = big })
        local status, body, raw = n:ask("Profile", "p1",
            { type = "set", key = "b", value = big })
        assert.equal(413, status, raw)
        assert.equal("too_large", body.error.code, raw)
        assert.truthy(body.error.message:find("the state takes 1200", 1,
                                              true), raw)
        assert.same({ "1" }, query(srv, db, "SELECT revision FROM "
            .. "moonshard_states WHERE type = 'Profile' AND id = 'p1'"))
        -- a big command whose events are small is fine
        assert.same({ count = 3 }, n:call("Rogue", "g3",
            { type = "many", k = 3, n = 1, pad = string.rep("w", 400000) }))
        status, body, raw = n:ask("Rogue", "g3",
                                  { type = "keep", bytes = 1000000 })
        assert.equal(413, status, raw)
        assert.equal("too_large", body.error.code, raw)
        assert.truthy(body.error.message:find(
            "the events of this command take 1000", 1, true), raw)
        assert.same({ count = 3, total = 3, kept = 0 },
                    n:call("Rogue", "g3", { type = "stat" }))
    end)
end)
