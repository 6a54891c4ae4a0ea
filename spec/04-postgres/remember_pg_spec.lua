-- Remember entities with the PostgreSQL store (issue 12): the ids land in
-- moonshard_remembered (one row per running id, under its shard), the rows
-- stay through moves, and the entities run again, without a message, on
-- the new owner after a join, a move by hand, a kill and down of their
-- node (once its leases run out) and a restart of the whole cluster;
-- ctx:stop() and ref:stop() delete the row. The type has no persistence:
-- remember.store = "postgres" alone makes its shards leased.
--
-- One cluster and one database for the file; the tests build on each
-- other.

local helpers = require "helpers.node"
local pg = require "helpers.pg"
local rh = require "helpers.remember"

local format = string.format

local SHARDS = 8
local SECRET = "spec-secret-7f3a9c2e41b8"

describe("remember-entities with the postgres store", function()
    local srv, db, c, out
    local ids = {}
    for i = 1, 40 do ids[i] = "p" .. i end
    local sh, where

    -- { id = shard } of the Keeper rows of moonshard_remembered
    local function rows()
        local t = {}
        for _, r in ipairs(pg.query(srv, db, "SELECT id, shard, cluster FROM "
                .. "moonshard_remembered WHERE type = 'Keeper'")) do
            local id, shard, cl = r:match("^([^|]+)|(%d+)|(.*)$")
            assert.equal("spec", cl)
            t[id] = tonumber(shard)
        end
        return t
    end

    -- the rows are exactly `list`, each under its shard
    local function rows_are(list)
        local want = {}
        for _, id in ipairs(list) do want[id] = sh[id] end
        helpers.wait_until(function()
            local got = rows()
            return rh.same(got, want) or nil, helpers.json.encode(got)
        end, 10, "the rows of moonshard_remembered")
    end

    local function nodes(names)
        local t = {}
        for i, name in ipairs(names) do t[i] = c:node(name) end
        return t
    end

    local function check(live, before, list)
        where = rh.running({ live = nodes(live), type = "Keeper",
                             ids = list or ids, shards = sh, path = out,
                             prev = where, before = before })
        rh.answer_once(c:node(live[1]), out, "Keeper", list or ids, where)
    end

    local function shards_on(via, name)
        local t = {}
        for shard, o in pairs(rh.owners(via, "Keeper")) do
            if o == name then t[#t + 1] = shard end
        end
        table.sort(t)
        return t
    end

    -- waits until n1 has no move in progress and n1 and n2 own half of
    -- the shards each (the rebalance evens out a move by hand)
    local function balanced()
        local n1 = c:node("n1")
        helpers.wait_until(function()
            local a, b = #shards_on(n1, "n1"), #shards_on(n1, "n2")
            return (a == SHARDS / 2 and b == SHARDS / 2
                    and n1:stats().moves.in_progress == 0) or nil,
                format("n1 %d, n2 %d", a, b)
        end, 30, "the shards to spread over n1 and n2")
    end

    local function migrated(n)
        helpers.wait_until(function()
            local v = n:stats().database.schema_version
            return (v ~= helpers.json.null and v >= 2) or nil
        end, 30, n.name .. " to migrate the schema")
    end

    setup(function()
        srv = pg.start()
        db = "remember1"
        local ci = pg.database(srv, db)
        local dir = helpers.tmpdir()
        out = dir .. "/starts.log"
        c = helpers.cluster({
            size = 3,
            secret = SECRET,
            entities = {
                Keeper = { module = "keeper", shard_count = SHARDS,
                           idle_timeout = false, lease_duration = 2,
                           lease_renew_interval = 0.5,
                           remember = { store = "postgres" } },
            },
            files = { ["keeper_out.lua"] = format("return %q", out) },
            settings = { database = ci, handoff_timeout = 2,
                         rebalance_interval = 0.5 },
        })
        c:start({ "n1" })
        c:wait_converged({ "n1" }, 15)
        migrated(c:node("n1"))
        sh = rh.shards(c:node("n1"), "Keeper", ids)
    end)

    teardown(function()
        helpers.stop_all_checked()
        pg.stop_all()
    end)

    it("writes a row per started id, under its shard", function()
        local n1 = c:node("n1")
        for _, id in ipairs(ids) do
            assert.equal(202, (n1:tell("Keeper", id, { type = "incr" })))
        end
        where = rh.running({ live = { n1 }, type = "Keeper", ids = ids,
                             shards = sh, path = out })
        rows_are(ids)
        -- leased: n1 holds a lease per shard
        assert.is_true(n1:stats().leases.held >= SHARDS)
    end)

    it("starts them again on a node that joins; the rows stay", function()
        local before = rh.counts(out, "Keeper")
        c:start({ "n2" })
        c:wait_converged({ "n1", "n2" }, 15)
        balanced()
        check({ "n1", "n2" }, before)
        rows_are(ids)
    end)

    it("starts them again after a move by hand; the rows stay", function()
        local n1 = c:node("n1")
        local before = rh.counts(out, "Keeper")
        local shard = assert(shards_on(n1, "n1")[1], "n1 owns nothing")
        local moved = false
        for _, id in ipairs(ids) do
            if sh[id] == shard then moved = true end
        end
        assert.is_true(moved, "no id on shard " .. shard)
        local fin = n1:stats().moves.finished
        local st, _, raw = n1:http("POST", format("/v1/move/Keeper/%d",
            shard), nil, { headers = { ["X-Moonshard-Token"] =
                                           c.admin_token } })
        assert.equal(202, st, raw)
        helpers.wait_until(function()
            return n1:stats().moves.finished > fin or nil
        end, 20, "the move to finish")
        -- to n2, then the rebalance moves one shard back to n1
        balanced()
        check({ "n1", "n2" }, before)
        rows_are(ids)
    end)

    it("starts them again when their node is killed and downed", function()
        local n1, n2 = c:node("n1"), c:node("n2")
        local before = rh.counts(out, "Keeper")
        assert.is_true(#shards_on(n1, "n2") > 0, "n2 owns nothing")
        n2:kill()
        local st, _, raw = n1:admin("down", { address = n2.listen,
                                              force = true })
        assert.equal(202, st, raw)
        -- n2's leases run out (2 s), then n1 takes its shards
        check({ "n1" }, before)
        rows_are(ids)
    end)

    it("forgets what stopped, keeps the rest over a restart of the whole "
       .. "cluster", function()
        local n1 = c:node("n1")
        assert.same({ ok = true }, n1:call("Keeper", "p1", { type = "stop" }))
        assert.same({ ok = true },
                    n1:call("Keeper", "p3", { type = "stop_ref", id = "p2" }))
        local keep = {}
        for i = 3, 40 do keep[#keep + 1] = "p" .. i end
        rows_are(keep)
        n1:stop()
        os.remove(out)
        c:start({ "n1", "n2", "n3" })
        c:wait_converged({ "n1", "n2", "n3" }, 15)
        where = nil
        check({ "n1", "n2", "n3" }, {}, keep)
        local n = rh.counts(out, "Keeper")
        for _, id in ipairs(keep) do assert.equal(1, n[id], id) end
        assert.is_nil(n.p1)
        assert.is_nil(n.p2)
        rows_are(keep)
    end)
end)
