-- spec/04-postgres/ctx_persistent_spec.lua: the ctx of a durable-state
-- entity (persistence = "state") used by another entity's handler while
-- its own entity waits in an ask. ctx:reply and ctx:delete of a
-- persistent type are kept until the commit (lua/moonshard/host.lua):
-- they must refuse a ctx that is not the running handler's, as the
-- in-memory ctx methods do (spec/03-integration/ctx_spec.lua), or the
-- other entity answers the waiting entity's caller and deletes its state.

local helpers = require "helpers.node"
local pg = require "helpers.pg"

describe("a persistent entity's ctx used by another entity", function()
    local srv, n

    setup(function()
        srv = pg.start()
        local ci = pg.database(srv, "ctx_persistent")
        local c = helpers.cluster_up({
            size = 1,
            entities = {
                PCtx = { module = "pctxprobe", persistence = "state",
                         shard_count = 4 },
            },
            settings = { database = ci },
        })
        n = c.nodes[1]
        pg.wait_migrated(n)
    end)

    teardown(function()
        helpers.stop_all_checked()
        pg.stop_all()
    end)

    it("refuses ctx:reply and ctx:delete, and leaves the waiting entity's "
       .. "answer and saved state alone", function()
        assert.same({ id = "owner-1" },
                    n:call("PCtx", "owner-1", { type = "keep", key = "k" }))
        assert.same({ ok = true },
                    n:call("PCtx", "owner-1", { type = "set", value = 7 }))
        -- owner-1 asks thief-1, which uses owner-1's ctx (owner-1 is live,
        -- its handler waiting in that ask)
        local r = n:call("PCtx", "owner-1", { type = "relay",
                                              to = "thief-1", key = "k" })
        assert.is_nil(r.stolen)
        assert.matches("belongs to another entity", r.reply, 1, true)
        assert.matches("belongs to another entity", r.delete, 1, true)
        -- owner-1 replied itself, and its state (saved) is still there
        local st = n:call("PCtx", "owner-1", { type = "get" })
        assert.equal(7, st.value)
        assert.is_nil(st.own)
        assert.same(r, st.relayed)
        assert.same({ "1" }, pg.query(srv, "ctx_persistent",
            "SELECT count(*) FROM moonshard_states WHERE type = 'PCtx' "
            .. "AND id = 'owner-1'"))
    end)

    it("kept past its entity's passivation, refuses ctx:reply and "
       .. "ctx:delete at the entity's next activation", function()
        n:call("PCtx", "back-1", { type = "keep", key = "back" })
        n:call("PCtx", "back-1", { type = "set", value = 3 })
        local before = n:stats().passivations
        n:stop_entity("PCtx", "back-1")
        helpers.wait_until(function()
            return n:stats().passivations > before
        end, 5, "back-1 to passivate")
        local r = n:call("PCtx", "back-1", { type = "use", key = "back" })
        assert.matches("entity is gone", r.reply, 1, true)
        assert.matches("entity is gone", r.delete, 1, true)
        assert.equal(3, n:call("PCtx", "back-1", { type = "get" }).value)
    end)
end)
