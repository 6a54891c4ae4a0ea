-- The Lua control API (require "moonshard") inside a handler, on a real
-- node: owner_for, allocations, activate, local_entity_count, stats.

local helpers = require "helpers.node"

describe("the Lua control API", function()
    local n

    setup(function()
        n = helpers.start({
            entities = {
                Control = { module = "control" },
                Counter = { module = "counter", shard_count = 16 },
            },
        })
    end)

    teardown(function()
        helpers.stop_all_checked()
        assert.same({}, helpers.leaks())
    end)

    it("activates an entity once and says whether this call created it",
       function()
        local r = n:call("Control", "c1", { type = "activate",
                                            target = { type = "Counter", id = "k1" } })
        assert.same({ created = true }, r)
        r = n:call("Control", "c1", { type = "activate",
                                      target = { type = "Counter", id = "k1" } })
        assert.same({ created = false }, r)
    end)

    it("gives the owner of an activated entity and its shard", function()
        local r = n:call("Control", "c1", { type = "owner",
                                            target = { type = "Counter", id = "k1" } })
        local status, http = n:http("GET", "/v1/entities/Counter/k1/owner")
        assert.equal(200, status)
        assert.equal(http.owner, r.owner)
        assert.equal(http.shard, r.shard)
        assert.is_string(r.owner)
    end)

    it("returns a copy of the plan with its generation", function()
        local r = n:call("Control", "c1", { type = "allocations", of = "Counter" })
        assert.equal(16, r.shard_count)
        assert.is_true(r.generation > 0)
        assert.is_true(r.assigned >= 1)
    end)

    it("counts the entities active on this node", function()
        local r = n:call("Control", "c1", { type = "count" })
        assert.equal(n:stats().active_entities, r.n)
        assert.is_true(r.n >= 2) -- c1 and k1
    end)

    it("raises for an unknown entity type", function()
        local status, body = n:ask("Control", "c1", { type = "owner",
                                   target = { type = "Nope", id = "x" } })
        assert.equal(500, status)
        assert.matches("unknown entity type", body.error.message, 1, true)
    end)
end)
