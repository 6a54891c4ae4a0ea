-- spec/04-postgres/recovery_spec.lua: an event-sourced entity keeps its
-- history wherever its shard goes (issue 11): after a join, a move by
-- hand, a leave, and after its owner is SIGKILLed, downed, and its lease
-- has run out. After each, the entity answers from its recovered state on
-- the new owner, and the journal is one unbroken history whose epochs
-- never go down.

local helpers = require "helpers.node"
local pg = require "helpers.pg"
local format = string.format

local LEDGER = {
    module = "tally", shard_count = 4, persistence = "events",
    lease_duration = 2, lease_renew_interval = 0.5, snapshot_every = 5,
}

describe("a persistent entity", function()
    local srv, db_n = nil, 0

    setup(function() srv = pg.start() end)
    teardown(function()
        helpers.stop_all_checked()
        pg.stop_all()
    end)

    -- a fresh database for one test, and its connection string
    local function fresh_db()
        db_n = db_n + 1
        local name = "recov" .. db_n
        return name, pg.database(srv, name)
    end

    -- {sequence, epoch} of each event of Ledger `id`, in order
    local function journal(db, id)
        local out = {}
        for _, row in ipairs(pg.query(srv, db, format(
                "SELECT sequence, epoch FROM moonshard_events WHERE "
                .. "type = 'Ledger' AND id = '%s' ORDER BY sequence", id))) do
            local s, e = row:match("^(%d+)|(%d+)$")
            out[#out + 1] = { seq = tonumber(s), epoch = tonumber(e) }
        end
        return out
    end

    -- the journal of `id` holds sequences 1..n (or from the first one a
    -- snapshot kept) without a gap, epochs never going down
    local function unbroken(db, id, n)
        local j = journal(db, id)
        assert.equal(n, #j, "events of " .. id)
        for i = 2, #j do
            assert.equal(j[i - 1].seq + 1, j[i].seq, "a gap in " .. id)
            assert.is_true(j[i].epoch >= j[i - 1].epoch,
                           "the epoch went down in " .. id)
        end
        return j
    end

    local function add(n, id, k)
        return n:call("Ledger", id, { type = "add", n = k, sender = "s",
                                     k = k }, 20)
    end

    local function get(n, id)
        return n:call("Ledger", id, { type = "get" }, 20)
    end

    -- the owner's name of Ledger `id` as node `n` sees it
    local function owner(n, id)
        return n:owner("Ledger", id).owner
    end

    -- k adds to each id through node n (k = from..to), then checks counts
    local function fill(n, ids, from, to)
        for _, id in ipairs(ids) do
            for k = from, to do
                assert.equal(k, add(n, id, k).count)
            end
        end
    end

    local function check_state(n, ids, count)
        for _, id in ipairs(ids) do
            local s = get(n, id)
            assert.equal(count, s.count, id)
            assert.equal(count * (count + 1) / 2, s.sum, id)
            assert.equal(count, s.from.s, id)
            assert.is_nil(s.out_of_order, id)
        end
    end

    local IDS = { "a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8" }

    -- the shards of Ledger on member `name`, as n sees them
    local function shards_on(n, name)
        local list = {}
        for _, s in ipairs(n:allocations("Ledger").shards) do
            if s.owner == name then list[#list + 1] = s.shard end
        end
        return list
    end

    it("recovers after a join, a move by hand and a leave", function()
        local db, ci = fresh_db()
        local c = helpers.cluster({ size = 3, entities = { Ledger = LEDGER },
                                    settings = { database = ci,
                                                 rebalance_interval = 1 } })
        c:start({ "n1" })
        c:wait_converged({ "n1" }, 15)
        local n1, n2, n3 = c:node("n1"), c:node("n2"), c:node("n3")
        fill(n1, IDS, 1, 6)

        -- a join: the rebalance gives n2 some of n1's shards
        c:start({ "n2" })
        c:wait_converged({ "n1", "n2" }, 15)
        helpers.wait_until(function()
            return #shards_on(n1, "n2") > 0 or nil
        end, 30, "a shard on n2")
        check_state(n2, IDS, 6)
        fill(n2, IDS, 7, 8)

        -- a move by hand of a shard of n1
        local before = n1:stats().moves.finished
        local sh = assert(shards_on(n1, "n1")[1], "n1 owns no shard")
        local status, _, raw = n1:http("POST", format("/v1/move/Ledger/%d",
            sh), nil, { headers = { ["X-Moonshard-Token"] = c.admin_token } })
        assert.equal(202, status, raw)
        helpers.wait_until(function()
            return n1:stats().moves.finished > before or nil
        end, 20, "the move to finish")
        -- away from n1 (to n2, the only other member), even though n1
        -- would be the least loaded without it
        for _, e in ipairs(n1:allocations("Ledger").shards) do
            if e.shard == sh then assert.equal("n2", e.owner) end
        end
        check_state(n1, IDS, 8)
        fill(n1, IDS, 9, 9)

        -- another join: n3 takes some shards
        c:start({ "n3" })
        c:wait_converged({ "n1", "n2", "n3" }, 15)
        helpers.wait_until(function()
            return #shards_on(n1, "n3") > 0 or nil
        end, 30, "a shard on n3")
        check_state(n3, IDS, 9)
        fill(n3, IDS, 10, 10)

        -- a leave of n2: its shards go to the others
        status, _, raw = n2:admin("leave")
        assert.is_true(status == 202 or status == 200, raw)
        assert.is_true(n2.proc:wait(30) ~= nil, "n2 did not leave")
        helpers.wait_until(function()
            for _, s in ipairs(n1:allocations("Ledger").shards) do
                if s.owner == "n2" or s.owner == helpers.json.null then
                    return nil
                end
            end
            return true
        end, 30, "no shard on n2")
        check_state(n1, IDS, 10)
        fill(n1, IDS, 11, 11)
        local bumped = 0
        for _, id in ipairs(IDS) do
            local j = unbroken(db, id, 11)
            if j[#j].epoch > j[1].epoch then bumped = bumped + 1 end
        end
        assert.is_true(bumped > 0, "no entity changed epoch")
        helpers.stop_all_checked()
    end)

    it("recovers on another node after its owner is killed and downed",
       function()
        local db, ci = fresh_db()
        local c = helpers.cluster_up({ size = 2, entities = { Ledger = LEDGER },
                                       settings = { database = ci } }, 15)
        local n1, n2 = c:node("n1"), c:node("n2")
        fill(n2, IDS, 1, 3)
        local on_n1 = {}
        for _, id in ipairs(IDS) do
            if owner(n2, id) == "n1" then on_n1[#on_n1 + 1] = id end
        end
        assert.is_true(#on_n1 > 0, "no id on n1")
        n1:kill()
        helpers.wait_until(function()
            local m = helpers.member(n2:members(), "n1")
            return m and m.reachable == false
        end, 20, "n2 to see n1 unreachable")
        local status, _, raw = n2:admin("down", n1.listen)
        assert.is_true(status == 202 or status == 200, raw)
        -- n1's leases run out; n2 takes the shards with a higher epoch and
        -- the entities recover there
        check_state(n2, IDS, 3)
        fill(n2, on_n1, 4, 4)
        for _, id in ipairs(on_n1) do
            local j = unbroken(db, id, 4)
            assert.is_true(j[4].epoch > j[3].epoch, id .. ": same epoch")
        end
        helpers.stop_all_checked()
    end)
end)
