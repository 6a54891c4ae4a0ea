-- spec/04-postgres/lease_spec.lua: the per-shard leases of a persistent
-- type with real nodes and a throwaway PostgreSQL (issue 11 points 3-5):
-- every owned shard holds a row (owner, epoch); a join moves shards and
-- their rows change owner with a higher epoch; with PostgreSQL gone past
-- the lease, messages wait and are delivered in order once it is back, or
-- are rejected with lease_unavailable once the lease window ran out (and
-- never replayed); a member that stops answering makes the others stop
-- renewing (their entities stop, the rows run out).
--
-- Until persistent behaviors exist, a type with persistence = "state"
-- runs an ordinary `receive` module (seq): what is tested is the lease,
-- not what entities write.

local helpers = require "helpers.node"
local pg = require "helpers.pg"
local cjson = require "cjson.safe"

local query = pg.query
local format = string.format

local SECRET = "spec-secret-7f3a9c2e41b8"
local SHARDS = 4

local function seq_type(extra)
    local t = { module = "seq", shard_count = SHARDS, persistence = "state",
                lease_duration = 2, lease_renew_interval = 0.5 }
    for k, v in pairs(extra or {}) do
        t[k] = v
    end
    return t
end

local fresh_db = pg.database

-- rows of moonshard_leases as { [shard] = { owner, epoch, live } }
local function rows(srv, db)
    local out = {}
    local list = query(srv, db, "SELECT shard || ' ' || owner || ' ' || "
        .. "epoch || ' ' || (expires_at > now()) FROM moonshard_leases "
        .. "WHERE type = 'Seq' ORDER BY shard")
    for _, line in ipairs(list) do
        local shard, owner, epoch, live =
            line:match("^(%d+) (%S+) (%d+) (%S+)$")
        out[tonumber(shard)] = { owner = owner, epoch = tonumber(epoch),
                                 live = live == "true" }
    end
    return out
end

local function leases(n)
    return n:stats().leases
end

-- one id per shard of the type, as the node places them
local function ids_per_shard(n)
    local ids, found, i = {}, 0, 0
    while found < SHARDS and i < 1000 do
        local id = "e" .. i
        local shard = n:owner("Seq", id).shard
        if not ids[shard] then
            ids[shard] = id
            found = found + 1
        end
        i = i + 1
    end
    return ids
end

-- asks every shard once: each gets an owner, and a lease
local function touch_all(n, ids)
    for shard = 0, SHARDS - 1 do
        local st, _, raw = n:ask("Seq", ids[shard], { type = "report" }, 20)
        assert.equal(200, st, raw)
    end
end

local function seq(n, id, g)
    local status = n:tell("Seq", id, { type = "seq", sender = "s", g = g,
                                       n = g })
    return status
end

describe("leases of a persistent type", function()
    local srv

    setup(function() srv = pg.start() end)
    teardown(function()
        helpers.stop_all_checked()
        pg.stop_all()
    end)

    it("a row per owned shard; a join moves rows to a higher epoch",
       function()
        local db = "lease_join"
        local ci = fresh_db(srv, db)
        local c = helpers.cluster({
            size = 2, secret = SECRET,
            entities = { Seq = seq_type() },
            settings = { database = ci, handoff_timeout = 3,
                         rebalance_interval = 0.5 },
        })
        c:start({ "n1" })
        c:wait_converged({ "n1" })
        local n1 = c:node("n1")
        local ids = ids_per_shard(n1)
        touch_all(n1, ids)
        local r = helpers.wait_until(function()
            local got = rows(srv, db)
            for shard = 0, SHARDS - 1 do
                if not got[shard] or got[shard].owner ~= "n1" then
                    return nil, cjson.encode(got)
                end
            end
            return got
        end, 20, "a lease row held by n1 for every shard")
        for shard = 0, SHARDS - 1 do
            assert.equal(1, r[shard].epoch)
            assert.is_true(r[shard].live)
        end
        local l = leases(n1)
        assert.equal(SHARDS, l.held)
        assert.equal(SHARDS, l.epochs_count)
        assert.equal(SHARDS, #l.epochs)
        for _, e in ipairs(l.epochs) do
            assert.equal("Seq", e.type)
            assert.equal(1, e.epoch)
        end
        -- the figures as Prometheus metrics
        local mst, _, text = n1:http("GET", "/metrics")
        assert.equal(200, mst)
        assert.matches("\n# TYPE moonshard_leases_held gauge\n"
                       .. "moonshard_leases_held " .. SHARDS .. "\n", text,
                       1, true)
        assert.matches("\nmoonshard_leases_acquired_total " .. SHARDS
                       .. "\n", text, 1, true)

        c:start({ "n2" })
        c:wait_converged({ "n1", "n2" })
        -- rebalancing gives n2 some shards: their rows follow the plan
        local moved = helpers.wait_until(function()
            local alloc = n1:allocations("Seq")
            local got = rows(srv, db)
            local count = 0
            for _, s in ipairs(alloc.shards) do
                local row = got[s.shard]
                if not row or row.owner ~= s.owner then
                    return nil, cjson.encode(got) .. " "
                        .. cjson.encode(alloc)
                end
                if s.owner == "n2" then
                    if row.epoch ~= 2 then
                        return nil, "epoch " .. row.epoch
                    end
                    count = count + 1
                elseif row.epoch ~= 1 then
                    return nil, "n1 epoch " .. row.epoch
                end
            end
            return count > 0 and count, "no shard moved yet"
        end, 30, "shards on n2 with their rows at epoch 2")
        assert.is_true(moved >= 1)
        -- the moved shards take messages on their new owner
        for shard = 0, SHARDS - 1 do
            local st, _, raw = n1:ask("Seq", ids[shard], { type = "report" })
            assert.equal(200, st, raw)
        end
        -- n2 holds a lease for each shard the plan gives it (the
        -- rebalance may go on meanwhile: compare with the plan of now)
        local n2 = c:node("n2")
        helpers.wait_until(function()
            local on_n2 = 0
            for _, s in ipairs(n1:allocations("Seq").shards) do
                if s.owner == "n2" then on_n2 = on_n2 + 1 end
            end
            local held = leases(n2).held
            return held == on_n2 and held >= moved or nil,
                   held .. " held, " .. on_n2 .. " in the plan"
        end, 20, "n2 to hold the leases of its shards")
        assert.is_true(leases(n1).released >= moved)
        helpers.stop_all_checked()
    end)

    it("messages wait for the lease and are delivered in order", function()
        local db = "lease_wait"
        local ci = fresh_db(srv, db)
        -- a long window: everything waits for the database
        local c = helpers.cluster({
            size = 1, secret = SECRET,
            entities = { Seq = seq_type({ lease_window = 60 }) },
            settings = { database = ci },
        })
        c:start()
        c:wait_converged()
        local n = c:node("n1")
        local ids = ids_per_shard(n)
        local id = ids[0]
        touch_all(n, ids)
        for g = 1, 3 do
            assert.equal(202, seq(n, id, g))
        end
        helpers.wait_until(function()
            return leases(n).held == SHARDS or nil
        end, 20, "leases held")
        srv:pause()
        helpers.wait_until(function()
            local l = leases(n)
            return l.held == 0 and (l.lost + l.expired) > 0 or nil,
                   cjson.encode(l)
        end, 20, "the leases lost")
        for g = 4, 8 do
            assert.equal(202, seq(n, id, g))
        end
        local l = leases(n)
        assert.equal(5, l.waiting)
        assert.equal(0, l.rejected)
        srv:resume()
        local j = helpers.wait_until(function()
            local st, body = n:ask("Seq", id, { type = "journal",
                                               sender = "s" }, 30)
            if st == 200 and body.count == 8 then
                return body
            end
            return nil, tostring(st) .. " " .. cjson.encode(body)
        end, 40, "the 8 messages handled")
        assert.equal(0, j.breaks, j.first_break)
        assert.equal(0, leases(n).waiting)
        helpers.wait_until(function()
            return leases(n).held == SHARDS or nil
        end, 20, "every lease held again")
        helpers.stop_all_checked()
    end)

    it("rejects with lease_unavailable once the window ran out, and never "
       .. "replays", function()
        local db = "lease_window"
        local ci = fresh_db(srv, db)
        local c = helpers.cluster({
            size = 1, secret = SECRET,
            entities = { Seq = seq_type({ lease_window = 3 }) },
            settings = { database = ci },
        })
        c:start()
        c:wait_converged()
        local n = c:node("n1")
        local ids = ids_per_shard(n)
        local id = ids[1]
        touch_all(n, ids)
        assert.equal(202, seq(n, id, 1))
        helpers.wait_until(function()
            return leases(n).held == SHARDS or nil
        end, 20, "leases held")
        srv:pause()
        helpers.wait_until(function()
            return leases(n).held == 0 or nil
        end, 20, "the leases lost")
        -- waits, then is rejected when the window runs out
        assert.equal(202, seq(n, id, 2))
        local st, body, raw = n:ask("Seq", id, { type = "report" }, 30)
        assert.equal(503, st, raw)
        assert.equal("lease_unavailable", body.error.code)
        -- new messages are refused at once
        st, body = n:tell("Seq", id, { type = "seq", sender = "s", g = 3,
                                       n = 3 })
        assert.equal(503, st)
        assert.equal("lease_unavailable", body.error.code)
        assert.is_true(leases(n).rejected >= 3)
        srv:resume()
        helpers.wait_until(function()
            return leases(n).held == SHARDS or nil
        end, 40, "leases held again")
        -- the same node took its rows back after they ran out: a new
        -- epoch, so nothing written before can pass for it
        for shard = 0, SHARDS - 1 do
            local row = rows(srv, db)[shard]
            assert.equal("n1", row.owner)
            assert.equal(2, row.epoch)
        end
        assert.equal(202, seq(n, id, 4))
        local j = n:call("Seq", id, { type = "journal", sender = "s" }, 10)
        -- 1 before, 4 after; 2 and 3 were rejected and never replayed
        assert.equal(2, j.count)
        assert.equal(1, j.breaks)
        assert.equal("g=4 after g=1", j.first_break)
        helpers.stop_all_checked()
    end)

    it("stops renewing while a member is unreachable", function()
        local db = "lease_fence"
        local ci = fresh_db(srv, db)
        local c = helpers.cluster({
            size = 2, secret = SECRET,
            entities = { Seq = seq_type() },
            settings = { database = ci, rebalance_interval = 0.5 },
        })
        c:start()
        c:wait_converged()
        local n1, n2 = c:node("n1"), c:node("n2")
        local ids = ids_per_shard(n1)
        for shard = 0, SHARDS - 1 do
            assert.equal(202, seq(n1, ids[shard], shard + 1))
        end
        -- and two on each node, where least_loaded moves nothing: shards
        -- go to n2 only once the coordinator has its registration (it
        -- may follow the converged view), and a rebalance after `mine`
        -- is read would change what n1 has to fence
        helpers.wait_until(function()
            local h1, h2 = leases(n1).held, leases(n2).held
            return (h1 == SHARDS / 2 and h2 == SHARDS / 2
                    and n1:stats().moves.in_progress == 0) or nil,
                format("n1 holds %d, n2 %d", h1, h2)
        end, 30, "every shard's lease held, two on each node")
        local mine = leases(n1).held
        assert.is_true(mine > 0 and n1:stats().active_entities > 0)
        n2:signal(helpers.SIGSTOP)
        local ok, err = pcall(function()
            local l = helpers.wait_until(function()
                local x = leases(n1)
                return x.held == 0 and x or nil, cjson.encode(x)
            end, 30, "n1 fences its leases")
            assert.equal(mine, l.fenced)
            -- its entities stopped (Seq entities were active on it)
            helpers.wait_until(function()
                local a = n1:stats().active_entities
                return a == 0 or nil, "active " .. tostring(a)
            end, 10, "n1's entities stopped")
            -- nothing renews: every row has run out in the database
            helpers.wait_until(function()
                for _, row in pairs(rows(srv, db)) do
                    if row.live then
                        return nil, cjson.encode(rows(srv, db))
                    end
                end
                return true
            end, 10, "the rows run out")
            local renewed = leases(n1).renewed
            helpers.sleep(1)
            assert.equal(renewed, leases(n1).renewed)
        end)
        n2:signal(helpers.SIGCONT)
        assert(ok, err)
        helpers.wait_until(function()
            return leases(n1).held == mine or nil
        end, 30, "n1 holds its leases again")
        helpers.stop_all_checked()
    end)
end)
