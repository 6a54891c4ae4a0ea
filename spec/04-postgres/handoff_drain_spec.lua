-- spec/04-postgres/handoff_drain_spec.lua: a node leaves while an entity
-- of its shard still has a long queue of accepted tells (here ~2,000
-- writes, some seconds of drain, against a 1 s lease). The old owner's
-- entities finish that queue before the lease is released (DESIGN G2: a
-- handoff loses nothing), and the lease stays theirs meanwhile: it is
-- renewed while they stop, so a drain longer than the lease does not run
-- it out and fail the rest with stale_owner. Every tell is applied once and
-- the journal holds them all.

local helpers = require "helpers.node"
local pg = require "helpers.pg"

local format = string.format

local N = 2000 -- tells queued at the move: a drain well over the 1 s lease

describe("a shard moved while an entity drains its queue", function()
    local srv

    setup(function() srv = pg.start() end)
    teardown(function()
        helpers.stop_all_checked()
        pg.stop_all()
    end)

    it("applies every accepted tell; the lease does not run out", function()
        local db = "drain"
        local c = helpers.cluster({
            size = 2,
            entities = {
                Rogue = { module = "rogue", persistence = "events",
                          shard_count = 1, snapshot_every = 500,
                          lease_duration = 1, lease_renew_interval = 0.3 },
            },
            settings = { database = pg.database(srv, db),
                         handoff_timeout = 60 },
        })
        c:start({ "n1", "n2" })
        c:wait_converged({ "n1", "n2" }, 15)
        local n1, n2 = c:node("n1"), c:node("n2")
        -- the entity lives on the shard's owner (`from`); `to` takes it
        n1:call("Rogue", "d1", { type = "add", n = 1 }, 20)
        local from = n1:owner("Rogue", "d1").owner == "n1" and n1 or n2
        local to = from == n1 and n2 or n1
        local reqs = {}
        local path = helpers.entity_path("Rogue", "d1", "tell")
        for i = 1, N do
            reqs[i] = helpers.format_request(from.port, "POST", path,
                                             { type = "add", n = 1 },
                                             i == N)
        end
        local res = helpers.pipeline(from.port, reqs, 60)
        assert.equal(N, #res)
        for _, r in ipairs(res) do
            assert.equal(202, r.status, r.raw)
        end
        -- the owner leaves: its shard moves through handoff
        local status, _, raw = from:admin("leave")
        assert.is_true(status == 202 or status == 200, raw)
        assert.is_true(from.proc:wait(60) ~= nil, "the owner did not leave")
        local got = to:call("Rogue", "d1", { type = "get" }, 30)
        assert.same({ total = N + 1, count = N + 1 }, got)
        local rows = pg.query(srv, db, "SELECT max(sequence) FROM "
            .. "moonshard_events WHERE type = 'Rogue' AND id = 'd1'")
        assert.equal(tostring(N + 1), rows[1])
        local log = from:log()
        assert.is_nil(log:find("stale_owner", 1, true),
                      format("stale writes on %s", from.name))
        helpers.stop_all_checked()
    end)
end)
