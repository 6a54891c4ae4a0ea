-- spec/04-postgres/remember_fail_spec.lua: the postgres store of
-- remember-entities when PostgreSQL stops (issue 12, "Store failure ...
-- PostgreSQL stopped"). fail_open: the node keeps delivering, the failed
-- writes are counted (remember.errors) and written once the database is
-- back; fail_closed: the shard of a failed write answers
-- remember_store_failed (503) until the operator clears it (endpoint,
-- then CLI), also after the database came back, and it is counted
-- (failed_shards, the type's "failed" list).
--
-- lease_duration is long (60 s) so that the shards' leases outlive the
-- time the database is stopped: what is measured is the remember store,
-- not a lost lease.

local helpers = require "helpers.node"
local pg = require "helpers.pg"

describe("remember postgres store failures", function()
    local srv
    local dbs = 0

    setup(function() srv = pg.start() end)
    teardown(function()
        helpers.stop_all_checked()
        pg.stop_all()
    end)
    after_each(function()
        -- a failed spec may leave the server stopped
        if not pg.alive(srv.pid) then srv:resume() end
        helpers.stop_all_checked()
    end)

    local function node(on_failure)
        dbs = dbs + 1
        local ci = pg.database(srv, "remember_fail_" .. dbs)
        local c = helpers.cluster_up({
            size = 1,
            entities = {
                Keeper = { module = "keeper", shard_count = 8,
                           lease_duration = 60,
                           remember = { store = "postgres",
                                        on_failure = on_failure } },
            },
            settings = { database = ci },
        })
        local n = c.nodes[1]
        -- migrated (schema 2 holds the remember table; pg.wait_migrated
        -- waits for version 1 exactly)
        helpers.wait_until(function()
            local v = n:stats().database.schema_version
            return type(v) == "number" and v >= 2, tostring(v)
        end, 30, "the schema migrated")
        -- every shard listed (its lease taken)
        helpers.wait_until(function()
            local r = n:stats().remember
            return r.loads >= 8 and r.load_errors == 0, r.loads
        end, 30, "the shards listed")
        return n
    end

    local function rem(n) return n:stats().remember end

    local function wait_idle(n)
        helpers.wait_until(function()
            local r = rem(n)
            return r.queued == 0 and r.inflight == 0,
                r.queued .. "/" .. r.inflight
        end, 30, "the remember queue drained")
    end

    local function shard_of(n, id)
        return n:owner("Keeper", id).shard
    end

    local function id_in_shard(n, s, prefix)
        for i = 1, 1000 do
            local id = prefix .. i
            if shard_of(n, id) == s then return id end
        end
        error("no id in shard " .. s)
    end

    local function refused(n, id)
        local status, body, raw = n:ask("Keeper", id, { type = "get" })
        return status == 503 and body.error.code == "remember_store_failed",
            tostring(status) .. " " .. tostring(raw)
    end

    local function clear(n, shard)
        return n:http("POST", "/v1/remember/clear/Keeper/" .. shard, nil,
                      { headers = { ["X-Moonshard-Token"] =
                                        helpers.ADMIN_TOKEN } })
    end

    it("fail_open: delivers while PostgreSQL is stopped, counts the "
       .. "errors, writes once it is back", function()
        local n = node("fail_open")
        n:call("Keeper", "before", { type = "get" })
        wait_idle(n)
        srv:pause()
        for i = 1, 10 do
            assert.equal(202, n:tell("Keeper", "w" .. i, { type = "incr" }))
        end
        helpers.wait_until(function() return rem(n).errors > 0 end, 20,
                           "failed writes")
        for i = 1, 10 do
            assert.equal(1, n:call("Keeper", "w" .. i, { type = "get" }).seen)
        end
        local r = rem(n)
        assert.equal(0, r.failed_shards)
        assert.same({}, r.types.Keeper.failed)
        srv:resume()
        wait_idle(n)
        assert.equal(11, rem(n).types.Keeper.remembered)
        assert.is_true(n:alive())
    end)

    it("fail_closed: refuses the shard until cleared, by the endpoint "
       .. "and by the CLI", function()
        local n = node("fail_closed")
        local x1, x6 = id_in_shard(n, 1, "a"), id_in_shard(n, 6, "b")
        local y4 = id_in_shard(n, 4, "c")
        srv:pause()
        assert.equal(202, n:tell("Keeper", x1, { type = "incr" }))
        helpers.wait_until(function() return refused(n, x1) end, 20,
                           "shard 1 refused")
        local r = rem(n)
        assert.equal(1, r.failed_shards)
        assert.same({ 1 }, r.types.Keeper.failed)
        assert.is_true(r.errors > 0)
        srv:resume()
        -- the write goes through once the database is back, the shard
        -- stays refused until the operator clears it
        wait_idle(n)
        assert.is_true((refused(n, x1)))
        local status, body, raw = clear(n, 1)
        assert.equal(200, status, raw)
        assert.is_true(body.cleared)
        assert.equal(1, n:call("Keeper", x1, { type = "get" }).seen)
        assert.equal(0, rem(n).failed_shards)
        -- a shard without a failed write was served all along
        assert.equal(0, n:call("Keeper", y4, { type = "get" }).seen)
        wait_idle(n)
        -- again on shard 6, cleared with the CLI
        srv:pause()
        assert.equal(202, n:tell("Keeper", x6, { type = "incr" }))
        helpers.wait_until(function() return refused(n, x6) end, 20,
                           "shard 6 refused")
        assert.same({ 6 }, rem(n).types.Keeper.failed)
        srv:resume()
        local code, o, e = helpers.run({ helpers.bin, "remember", "clear",
            "--node", n.address, "--token", helpers.ADMIN_TOKEN, "Keeper",
            "6" })
        assert.equal(0, code, o .. e)
        assert.is_true(helpers.json.decode(o).cleared)
        assert.equal(1, n:call("Keeper", x6, { type = "get" }).seen)
        assert.same({}, rem(n).types.Keeper.failed)
        wait_idle(n)
        assert.equal(3, rem(n).types.Keeper.remembered)
    end)
end)
