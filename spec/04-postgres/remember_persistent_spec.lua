-- A persistent type that remembers its entities in PostgreSQL (issue 12
-- point 3): after a restart of its node, the entities that ran are
-- started again without a message, and each recovers its state from the
-- journal (its init and recovery run), so the first message finds the
-- state it had.

local helpers = require "helpers.node"
local pg = require "helpers.pg"

describe("a persistent remembered type", function()
    local srv
    setup(function() srv = pg.start() end)
    teardown(function()
        helpers.stop_all_checked()
        pg.stop_all()
    end)

    it("recovers its entities at start, before any message", function()
        local ci = pg.database(srv, "remember_persistent")
        local c = helpers.cluster_up({
            size = 1,
            entities = {
                Ledger = { module = "ledger", persistence = "events",
                           shard_count = 4, lease_duration = 2,
                           remember = { store = "postgres" } },
            },
            settings = { database = ci },
        })
        local n = c.nodes[1]
        pg.wait_migrated(n)
        for i = 1, 6 do
            n:call("Ledger", "acct-" .. i, { type = "deposit", amount = i })
        end
        helpers.wait_until(function()
            local r = n:stats().remember
            return r.types.Ledger.remembered == 6 and r.queued == 0
                and r.inflight == 0
        end, 10, "six ids recorded")
        assert.same({ "6" }, pg.query(srv, "remember_persistent",
            "SELECT count(*) FROM moonshard_remembered WHERE type = 'Ledger'"))
        n:stop()
        n:launch()
        n:wait_healthy()
        helpers.wait_until(function()
            local s = n:stats()
            return s.remember.eager_starts == 6
                and s.persistence and s.persistence.recoveries >= 6
                and s.active_entities == 6,
                "remember " .. tostring(s.remember.eager_starts)
        end, 20, "six entities recovered without a message")
        for i = 1, 6 do
            local r = n:call("Ledger", "acct-" .. i, { type = "get" })
            assert.equal(i, r.balance)
        end
        assert.equal(6, n:stats().persistence.recoveries)
    end)

    it("does not remember an id PostgreSQL cannot hold, and says so",
       function()
        local ci = pg.database(srv, "remember_utf8")
        local c = helpers.cluster_up({
            size = 1,
            entities = {
                Keeper = { module = "keeper", shard_count = 2,
                           lease_duration = 2,
                           remember = { store = "postgres" } },
            },
            settings = { database = ci },
        })
        local n = c.nodes[1]
        pg.wait_migrated(n)
        -- the id's bytes are 0xFF 'x': not UTF-8
        local status = n:http("POST", "/v1/entities/Keeper/%FFx/tell",
                              { type = "incr" })
        assert.equal(202, status)
        n:tell("Keeper", "fine", { type = "incr" })
        helpers.wait_until(function()
            local r = n:stats().remember
            return r.unstorable == 1 and r.types.Keeper.remembered == 1
                and r.queued == 0 and r.inflight == 0
        end, 10, "one id kept, one not storable")
        local r = n:stats().remember
        assert.equal(0, r.errors) -- nothing retried for ever
        assert.same({ "fine" }, pg.query(srv, "remember_utf8",
            "SELECT id FROM moonshard_remembered WHERE type = 'Keeper'"))
    end)
end)
