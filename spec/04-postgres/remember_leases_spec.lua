-- spec/04-postgres/remember_leases_spec.lua: a single node whose only
-- type is remembered in the postgres store, 256 shards, no traffic:
-- every shard is allocated and its lease taken at start, all at once, and
-- those leases must be renewed for as long as the node runs. This found
-- (issue 12) that the PostgreSQL pool started a queued job only when
-- another was queued or at its 50 ms tick, not when a connection became
-- free: a burst of 256 renewals ran at about 80 a second, slower than
-- they came due, and leases expired (67 in 22 s) with the database idle.
-- A free connection now takes the next job on the next loop turn.

local helpers = require "helpers.node"
local pg = require "helpers.pg"

describe("remember postgres store, 256 shards, no traffic", function()
    local srv

    setup(function() srv = pg.start() end)
    teardown(function()
        helpers.stop_all_checked()
        pg.stop_all()
    end)

    it("keeps every lease while the database is up", function()
        local ci = pg.database(srv, "remember_lease_1")
        local c = helpers.cluster_up({
            size = 1,
            entities = {
                Keeper = { module = "keeper", shard_count = 256,
                           remember = { store = "postgres" } },
            },
            settings = { database = ci },
        })
        local n = c.nodes[1]
        helpers.wait_until(function()
            local d = n:stats()
            return d.leases.held == 256 and d.remember.loads == 256,
                d.leases.held
        end, 30, "every lease held, every shard listed")
        -- a little more than two lease durations (10 s each)
        local deadline = helpers.now() + 22
        while helpers.now() < deadline do
            local d = n:stats()
            assert.equal(0, d.leases.expired, "a lease expired")
            assert.equal(0, d.leases.lost, "a lease was lost")
            assert.equal(256, d.remember.loads, "a shard started again")
            helpers.sleep(0.5)
        end
        assert.equal(256, n:stats().leases.held)
    end)
end)
