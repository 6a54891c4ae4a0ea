-- spec/04-postgres/fencing_spec.lua: a stale writer is fenced (issue 11,
-- DESIGN G1). An owner with writes in flight is SIGSTOPped, downed by the
-- operator, its shards taken over by another node once its leases ran
-- out, and then SIGCONTed. Nothing it commits may land after the takeover:
-- every entity's journal is one unbroken history, no event of the old
-- epoch follows one of the new, the new owner's state holds every event
-- of the journal, and every write the old owner acknowledged is in it.

local helpers = require "helpers.node"
local pg = require "helpers.pg"
local cjson = require "cjson.safe"
local format = string.format

local LEDGER = {
    module = "tally", shard_count = 4, persistence = "events",
    lease_duration = 2, lease_renew_interval = 0.5, lease_window = 40,
}

describe("a paused owner", function()
    local srv

    setup(function() srv = pg.start() end)
    teardown(function()
        helpers.stop_all_checked()
        pg.stop_all()
    end)

    it("cannot commit after its shards were taken over", function()
        local ci = pg.database(srv, "fence")
        -- no voluntary moves: only the takeover changes owners
        local c = helpers.cluster_up({ size = 2,
            entities = { Ledger = LEDGER,
                         -- only to learn that n2 registered (below)
                         Witness = { module = "counter", shard_count = 64 } },
            settings = { database = ci, rebalance_interval = 600 } }, 15)
        local n1, n2 = c:node("n1"), c:node("n2")
        -- Shards go to n2 only once the coordinator has its registration,
        -- which may come after the converged view: until then every
        -- shard goes to n1 (and a rebalance would move some to n2 in the
        -- middle of the test, while n1 is paused, say). A node registers
        -- its types in name order in one answer, so a Witness shard on n2
        -- says Ledger's arrived (Ledger's 4 shards could all be used up
        -- on n1 finding that out, with nothing to move one later).
        n1:wait_placed_on("Witness", "n2")
        -- each id's first write (through n2) places its shard
        local on_n1 = {}
        for i = 1, 16 do
            local id = "f" .. i
            assert.equal(1, n2:call("Ledger", id, { type = "add", n = 0,
                sender = "warm", k = 1 }, 20).count)
            if n2:owner("Ledger", id).owner == "n1" then
                on_n1[#on_n1 + 1] = id
            end
        end
        assert.is_true(#on_n1 > 0, "no id on n1")

        -- writes in flight on n1, then n1 paused
        local stop = helpers.tmpdir() .. "/stop"
        local out = c.dir .. "/load.json"
        local loader = helpers.spawn({
            "luajit", helpers.home .. "/spec/helpers/loader.lua",
            tostring(n1.port), "w", table.concat(on_n1, ","), stop, out,
            "ledger",
        }, { stderr = c.dir .. "/load.err" })
        helpers.sleep(1.0)
        n1:signal(helpers.SIGSTOP)

        -- the operator downs it once n2 sees it unreachable
        helpers.wait_until(function()
            local m = helpers.member(n2:members(), "n1")
            return m and m.reachable == false
        end, 30, "n2 to see n1 unreachable")
        local status, _, raw = n2:admin("down", n1.listen)
        assert.is_true(status == 200 or status == 202, raw)
        -- the next write of each id places its shard on n2, which takes
        -- the lease once n1's ran out (a higher epoch) and recovers it
        local taken = {}
        for _, id in ipairs(on_n1) do
            taken[id] = n2:call("Ledger", id, { type = "add", n = 0,
                sender = "t", k = 1 }, 30).count
        end
        local held = pg.query(srv, "fence", "SELECT count(*) FROM "
            .. "moonshard_leases WHERE type = 'Ledger' AND owner = 'n1'"
            .. " AND expires_at > now()")
        assert.equal("0", held[1], "n1 still holds a lease")

        -- n1 resumes with whatever it had in flight
        n1:signal(helpers.SIGCONT)
        helpers.sleep(3)
        helpers.write_file(stop, "")
        assert.is_true(loader:wait(40) ~= nil, "the loader did not end")
        local load = assert(cjson.decode(helpers.read_file(out)))
        helpers.sleep(1)

        for _, id in ipairs(on_n1) do
            local rows = pg.query(srv, "fence", format(
                "SELECT sequence, epoch, payload FROM moonshard_events "
                .. "WHERE type = 'Ledger' AND id = '%s' ORDER BY sequence",
                id))
            local seen, new_epoch, t_at = {}, nil, nil
            local prev_epoch = 0
            for i, row in ipairs(rows) do
                local s, e, p = row:match("^(%d+)|(%d+)|(.*)$")
                s, e = tonumber(s), tonumber(e)
                assert.equal(i, s, id .. ": sequences must be 1..N")
                assert.is_true(e >= prev_epoch, format(
                    "%s: event %d of epoch %d after epoch %d", id, s, e,
                    prev_epoch))
                prev_epoch = e
                local ev = assert(cjson.decode(p))
                if ev.sender == "w" then seen[ev.k] = true end
                if ev.sender == "t" then
                    new_epoch, t_at = e, s
                end
            end
            assert.is_number(new_epoch, id .. ": the takeover's write")
            assert.equal(taken[id], t_at, id .. ": n2 recovered every "
                .. "event committed before it took over")
            for j = t_at + 1, #rows do
                local e = tonumber(rows[j]:match("^%d+|(%d+)|"))
                assert.equal(new_epoch, e, id .. ": an old epoch after "
                    .. "the takeover")
            end
            -- n2's state holds the whole journal: nothing landed behind
            -- its back
            assert.equal(#rows, n2:call("Ledger", id, { type = "get" },
                                        20).count, id)
            -- every write n1 acknowledged is in the journal
            local acked = load.acked and load.acked[id] or {}
            for _, k in ipairs(acked) do
                assert.is_true(seen[k] == true, format(
                    "%s: acknowledged k=%d is not in the journal", id, k))
            end
        end
        helpers.stop_all_checked()
    end)
end)
