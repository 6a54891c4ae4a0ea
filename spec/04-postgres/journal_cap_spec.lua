-- spec/04-postgres/journal_cap_spec.lua: recovery reads at most 10,000
-- events after an entity's snapshot (MS_JOURNAL_MAX_RECOVERY). With
-- snapshot_every at its largest (10,000) an entity never has more than
-- 9,999 events after its snapshot and always recovers; without snapshots
-- (snapshot_every = false) recovery beyond 10,000 events is refused with
-- too_large saying so, every time, and the node keeps serving.

local helpers = require "helpers.node"
local pg = require "helpers.pg"

local query = pg.query

describe("a journal near recovery's 10,000 events", function()
    local srv, n, db

    setup(function()
        srv = pg.start()
        db = "journal_cap"
        local c = helpers.cluster_up({
            size = 1,
            entities = {
                Rare = { module = "rogue", persistence = "events",
                         shard_count = 2, idle_timeout = 1,
                         snapshot_every = 10000 },
                Never = { module = "rogue", persistence = "events",
                          shard_count = 2, idle_timeout = 1,
                          snapshot_every = false },
            },
            settings = { database = pg.database(srv, db) },
        })
        n = c.nodes[1]
        pg.wait_migrated(n)
    end)
    teardown(function()
        helpers.stop_all_checked()
        pg.stop_all()
    end)

    local function passivated()
        helpers.wait_until(function()
            return n:stats().active_entities == 0
        end, 20, "every entity passivated")
    end

    -- k events in commands of at most 1,000
    local function write(t, id, k)
        while k > 0 do
            local m = math.min(k, 1000)
            n:call(t, id, { type = "many", k = m, n = 1 }, 30)
            k = k - m
        end
    end

    it("recovers 9,999 events after a snapshot at the largest "
       .. "snapshot_every", function()
        write("Rare", "r1", 10000 + 9999) -- the snapshot at 10,000
        assert.same({ "10000" }, query(srv, db, "SELECT sequence FROM "
            .. "moonshard_snapshots WHERE type = 'Rare' AND id = 'r1'"))
        passivated()
        assert.same({ total = 19999, count = 19999 },
                    n:call("Rare", "r1", { type = "get" }, 30))
    end)

    it("refuses to recover more than 10,000 events without a snapshot, "
       .. "clearly and every time", function()
        write("Never", "v1", 10001)
        passivated()
        for _ = 1, 2 do
            local status, body, raw = n:ask("Never", "v1", { type = "get" },
                                            30)
            assert.equal(413, status, raw)
            assert.equal("too_large", body.error.code, raw)
            assert.truthy(body.error.message:find("more than 10000 events",
                                                  1, true), raw)
            assert.truthy(body.error.message:find("snapshot_every", 1, true),
                          raw)
        end
        -- the node serves the others
        assert.same({ total = 1, count = 1 },
                    n:call("Never", "v2", { type = "add", n = 1 }))
    end)
end)
