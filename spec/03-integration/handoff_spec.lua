-- Handoff (issue 5): shards move between real nodes while several callers
-- on several nodes send numbered tells (spec/helpers/loader.lua) to Seq
-- entities (spec/fixtures/seqcheck.lua), which count gaps, reorders and double
-- activations. Moves come from a node joining (the rebalance rounds of
-- least_loaded), a node leaving, and the admin move endpoint; an old owner
-- that is slow to stop, or SIGSTOPped, makes the move roll back at its
-- deadline; a coordinator killed mid-handoff is replaced and every shard
-- ends with one owner.
--
-- One cluster for the file; the tests run in order and build on it.

local helpers = require "helpers.node"
local seqload = require "helpers.seqload"

local format = string.format

local SHARDS = 32
local IDS = 48

describe("handoff", function()
    local c
    local ids = {}
    for i = 1, IDS do
        ids[i] = "s" .. i
    end

    local function start_load(list, id_list)
        return seqload.start(c, list, id_list or ids)
    end
    local finish = seqload.finish

    -- Every id has seen every accepted number of every sender, in order,
    -- without gaps, and was never active twice. Returns the total of
    -- accepted tells.
    local function verify(results, via, id_list)
        local total = 0
        for _, r in pairs(results) do
            total = total + r.accepted
        end
        for _, id in ipairs(id_list or ids) do
            local state = seqload.arrived(results, via, id)
            if state.gaps ~= 0 or state.reorders ~= 0 or state.double ~= 0 then
                -- say what the nodes counted and logged, for the diagnosis
                local lines = {}
                for _, n in ipairs(c.nodes) do
                    if n.runs > 0 then
                        local log = n:log() or ""
                        for line in log:gmatch("[^\n]*WARN[^\n]*") do
                            if not line:find("connection closed", 1, true) then
                                lines[#lines + 1] = n.name .. ": " .. line
                            end
                        end
                        if n:alive() then
                            local ok, st = pcall(n.stats, n)
                            if ok then
                                lines[#lines + 1] = format(
                                    "%s: expired %d, handoff_drops %d, "
                                    .. "overflows %d, moves %s", n.name,
                                    st.route_expired, st.handoff_drops,
                                    st.overflows,
                                    helpers.json.encode(st.moves))
                            end
                        end
                    end
                end
                print(id .. ": " .. helpers.json.encode(state) .. "\n"
                      .. table.concat(lines, "\n"))
            end
            assert.are.equal(0, state.gaps, id .. " saw gaps")
            assert.are.equal(0, state.reorders, id .. " saw reorders")
            assert.are.equal(0, state.double, id .. " was active twice")
        end
        return total
    end

    local owned = seqload.owned

    local function stats(n)
        return n:stats()
    end

    -- Waits until the running nodes of `nodes` together delivered `k`
    -- (2,000) more messages than when called: the load flows through
    -- them (what a fixed sleep stood for before).
    local function flows(nodes, k)
        local function sum()
            local t = 0
            for _, n in ipairs(nodes) do
                if n:alive() then t = t + stats(n).delivered end
            end
            return t
        end
        local want = sum() + (k or 2000)
        helpers.wait_until(function()
            local now = sum()
            return now >= want or nil, now .. " delivered, waiting for "
                .. want
        end, 20, "the load to flow", 0.05)
    end

    -- An id (prefix .. k) whose shard `owner` owns, and that shard.
    local function id_on(owner, prefix)
        for k = 1, 500 do
            local o = c:node("n1"):owner("Seq", prefix .. k)
            if o.owner == owner then return prefix .. k, o.shard end
        end
        error("no id on " .. owner)
    end

    -- Moves a shard by hand through the coordinator n1; the status.
    local function move(shard)
        local st, _, raw = c:node("n1"):http(
            "POST", format("/v1/move/Seq/%d", shard), nil,
            { headers = { ["X-Moonshard-Token"] = c.admin_token } })
        return st, raw
    end

    -- Waits until the coordinator's moves.`field` went past `before`.
    local function moves_past(field, before, what)
        helpers.wait_until(function()
            return stats(c:node("n1")).moves[field] > before[field] or nil
        end, 10, what)
    end

    -- Only explicit refusals may happen: overflow, a timeout, or no owner
    -- for the moving shard, each counted by the loader.
    local function only_explicit(results)
        for sender, r in pairs(results) do
            for code in pairs(r.errors) do
                assert.is_truthy(code == "overflow" or code == "timeout"
                                 or code == "no_owner",
                                 sender .. " got error " .. code)
            end
        end
    end

    setup(function()
        c = seqload.cluster(4, SHARDS, { handoff_timeout = 2,
                                         rebalance_interval = 0.5 })
    end)

    teardown(function()
        helpers.stop_all_checked()
        assert.same({}, helpers.leaks()) -- nodes and loaders, by PID
    end)

    it("moves shards to a node that joins, losing and reordering nothing",
       function()
        local n1, n2 = c:node("n1"), c:node("n2")
        local run = start_load({ { n1, "a" }, { n2, "b" } })
        flows({ n1, n2 })
        c:start({ "n3" })
        c:wait_converged({ "n1", "n2", "n3" })
        -- least_loaded evens out the allocated shards to within one
        helpers.wait_until(function()
            local k, a = owned(n1, "n3")
            local k1, k2 = owned(n1, "n1"), owned(n1, "n2")
            local hi, lo = math.max(k, k1, k2), math.min(k, k1, k2)
            return (k >= 5 and hi - lo <= 1 and a) or nil,
                format("n1 %d, n2 %d, n3 %d", k1, k2, k)
        end, 30, "n3 to receive its share of the shards")
        flows({ (c:node("n3")) }) -- and serves its shards under the load
        local results = finish(run)
        only_explicit(results)
        local total = verify(results, n1)
        assert.is_true(total > 1000, "only " .. total .. " tells accepted")
        local st = stats(n1)
        assert.is_true(st.moves.finished >= 5,
                       "moves finished: " .. st.moves.finished)
        assert.are.equal(0, st.moves.in_progress)
        for _, n in ipairs({ n1, n2, (c:node("n3")) }) do
            local s = stats(n)
            assert.are.equal(0, s.handoffs_in_progress, n.name)
            assert.are.equal(0, s.route_expired, n.name .. " expired")
            assert.are.equal(0, s.handoff_drops, n.name .. " handoff drops")
        end
    end)

    it("moves every shard of a leaving node away before it exits", function()
        local n1, n2, n3 = c:node("n1"), c:node("n2"), c:node("n3")
        local run = start_load({ { n1, "c" }, { n3, "d" } })
        flows({ n1, n2, n3 })
        local had = owned(n1, "n2")
        local before = stats(n1).moves
        local status = n2:admin("leave")
        assert.are.equal(202, status)
        helpers.wait_until(function()
            return not n2:alive() or nil, "n2 still runs"
        end, 20, "n2 to exit")
        flows({ n1, n3 })
        local results = finish(run)
        only_explicit(results)
        verify(results, n3)
        assert.are.equal(0, (owned(n1, "n2")))
        -- every shard of n2 left it by a finished handoff before it
        -- exited, none by its leave deadline (which stops the node with
        -- its shards unmoved)
        local after = stats(n1).moves
        assert.is_true(had > 0, "n2 owned no shard")
        assert.is_true(after.finished - before.finished >= had,
                       format("%d moves finished for %d shards",
                              after.finished - before.finished, had))
        assert.are.equal(before.aborted, after.aborted)
    end)

    it("rolls a move back when the old owner is slow to stop", function()
        local n1, n3 = c:node("n1"), c:node("n3")
        -- an id on n3, made busy for 4 s (the deadline is 2 s)
        local id, shard = id_on("n3", "slow")
        local before = stats(n1).moves
        assert.are.equal(202, (n3:tell("Seq", id, { type = "slow",
                                                    seconds = 4 })))
        helpers.sleep(0.2)
        assert.are.equal(202, move(shard))
        moves_past("aborted", before, "the move to be rolled back")
        assert.are.equal(before.finished, stats(n1).moves.finished)
        -- one owner, and the entity answers with its state intact
        helpers.wait_until(function()
            local s = n1:ask("Seq", id, { type = "get" }, 5)
            return s == 200 or nil
        end, 10, id .. " to answer")
        local body = n1:call("Seq", id, { type = "get" })
        assert.are.equal(0, body.double)
        -- the coordinator keeps working: a next move completes
        local after = stats(n1).moves
        assert.are.equal(202, move(shard))
        moves_past("finished", after, "a next move to finish")
    end)

    it("rolls a move back when the old owner is SIGSTOPped, then works",
       function()
        local n1, n3 = c:node("n1"), c:node("n3")
        local id, shard = id_on("n3", "stop")
        assert.are.equal(202, (n1:tell("Seq", id, { type = "n", sender = "z",
                                                    n = 1 })))
        local before = stats(n1).moves
        n3:signal(helpers.SIGSTOP)
        assert.are.equal(202, move(shard))
        -- sends meanwhile wait (the shard is moving), within the bound
        assert.are.equal(202, (n1:tell("Seq", id, { type = "n", sender = "z",
                                                    n = 2 })))
        moves_past("aborted", before, "the move to be rolled back")
        n3:signal(helpers.SIGCONT)
        assert.are.equal("n3", n1:owner("Seq", id).owner)
        local body = helpers.wait_until(function()
            local s, b = n1:ask("Seq", id, { type = "get" }, 5)
            return s == 200 and b.last.z == 2 and b or nil
        end, 10, id .. " to see both tells")
        assert.are.equal(0, body.gaps)
        assert.are.equal(0, body.reorders)
        assert.are.equal(0, body.double)
        local after = stats(n1).moves
        assert.are.equal(202, move(shard))
        moves_past("finished", after, "a next move to finish")
    end)

    it("holds at most 1,024 messages for a moving shard, refuses the "
       .. "next ones with 503 overflow (G3), then delivers the accepted "
       .. "ones in order", function()
        local n1, n3 = c:node("n1"), c:node("n3")
        local id, shard = id_on("n3", "bound")
        local before = stats(n1)
        n3:signal(helpers.SIGSTOP) -- the move cannot end: n1 buffers
        assert.are.equal(202, move(shard))
        helpers.wait_until(function()
            return stats(n1).handoffs_in_progress > 0 or nil
        end, 5, "n1 to buffer the shard")
        local reqs = {}
        for k = 1, 1030 do
            reqs[k] = helpers.format_request(n1.port, "POST",
                helpers.entity_path("Seq", id, "tell"),
                { type = "n", sender = "bound", n = k }, k == 1030)
        end
        local answers, why = helpers.pipeline(n1.port, reqs)
        assert.are.equal(1030, #answers, why)
        local accepted = 0
        for k, a in ipairs(answers) do
            if a.status == 202 then
                -- what is accepted is a prefix: nothing after a refusal
                assert.are.equal(k, accepted + 1, "accepted after a refusal")
                accepted = k
            else
                assert.are.equal(503, a.status, a.raw)
                assert.are.equal("overflow", a.body.error.code)
            end
        end
        local after = stats(n1)
        assert.are.equal(1024, accepted)
        assert.are.equal(6, after.handoff_overflows
                         - before.handoff_overflows)
        -- an ask that meets the full buffer ends at once, explicitly (G5)
        local t0 = helpers.now()
        local ast, ab = n1:ask("Seq", id, { type = "get" }, 0.5)
        assert.are.equal(503, ast)
        assert.are.equal("overflow", ab.error.code)
        assert.is_true(helpers.now() - t0 < 1)
        n3:signal(helpers.SIGCONT)
        -- the move rolls back at its deadline; the 1,024 arrive, in order
        local body = helpers.wait_until(function()
            local st, b = n1:ask("Seq", id, { type = "get" }, 5)
            return st == 200 and b.last.bound == 1024 and b or nil,
                st == 200 and b.last.bound
        end, 15, "the accepted tells to arrive")
        assert.are.equal(0, body.gaps)
        assert.are.equal(0, body.reorders)
        assert.are.equal(0, body.double)
    end)

    it("moves a shard by hand only with the admin token, on the "
       .. "coordinator (G8)", function()
        local _, shard = id_on("n3", "token")
        local st = c:node("n1"):http("POST",
                                     format("/v1/move/Seq/%d", shard))
        assert.are.equal(403, st)
        st = c:node("n1"):http("POST", format("/v1/move/Seq/%d", shard), nil,
                               { headers = { ["X-Moonshard-Token"] = "no" } })
        assert.are.equal(403, st)
        -- n3 is not the coordinator: refused, nothing moves
        local before = stats(c:node("n1")).moves.started
        st = c:node("n3"):http("POST", format("/v1/move/Seq/%d", shard), nil,
                               { headers = { ["X-Moonshard-Token"] =
                                                 c.admin_token } })
        assert.are.equal(409, st)
        assert.are.equal(before, stats(c:node("n1")).moves.started)
    end)

    it("survives the coordinator's death in the middle of a handoff",
       function()
        local n1, n3 = c:node("n1"), c:node("n3")
        c:start({ "n4" })
        c:wait_converged({ "n1", "n3", "n4" })
        local n4 = c:node("n4")
        local run = start_load({ { n3, "e" }, { n4, "f" } })
        flows({ n1, n3, n4 })
        -- hold every move of n3's shards: n3 stopped, then moves begun
        local _, a = owned(n1, "n3")
        n3:signal(helpers.SIGSTOP)
        for _, s in ipairs(a.shards) do
            if s.owner == "n3" then
                assert.are.equal(202, move(s.shard))
            end
        end
        local gen_before = n4:allocations("Seq").generation
        -- ids on n1 lose their state with it (SIGKILL): only the others
        -- must have everything
        local keep = {}
        for _, id in ipairs(ids) do
            if n4:owner("Seq", id).owner ~= "n1" then keep[#keep + 1] = id end
        end
        n1:kill()
        n3:signal(helpers.SIGCONT)
        -- just killed, not yet unreachable: force
        local status = n4:admin("down", { address = n1.listen, force = true })
        assert.are.equal(202, status)
        -- the next coordinator rolls back or finishes; every shard has one
        -- owner among the live nodes, and generations went up
        helpers.wait_until(function()
            local a3, a4 = n3:allocations("Seq"), n4:allocations("Seq")
            if helpers.json.encode(a3.shards) ~= helpers.json.encode(a4.shards)
            then
                return nil, "n3 and n4 differ"
            end
            for _, s in ipairs(a4.shards) do
                if s.owner ~= helpers.json.null and s.owner == "n1" then
                    return nil, "shard " .. s.shard .. " still on n1"
                end
            end
            return a4.generation > gen_before or nil, "generation"
        end, 20, "one plan without n1")
        flows({ n3, n4 })
        local results = finish(run)
        only_explicit(results)
        verify(results, n4, keep)
        for _, n in ipairs({ n3, n4 }) do
            helpers.wait_until(function()
                return stats(n).handoffs_in_progress == 0 or nil
            end, 10, n.name .. " to end its handoffs")
        end
    end)

    describe("in rounds of rate_limited", function()
        local rc

        setup(function()
            helpers.stop_all_checked()
            rc = helpers.cluster({
                size = 3,
                entities = {
                    Seq = {
                        module = "seqcheck", shard_count = SHARDS,
                        idle_timeout = 600,
                        rebalance = { __lua = "require(\"moonshard.strategy\")"
                            .. ".rate_limited{ threshold = 1,"
                            .. " max_concurrent = 2 }" },
                    },
                },
                settings = { handoff_timeout = 2, rebalance_interval = 0.2 },
            })
            c = rc
            seqload.use(rc)
            rc:start({ "n1", "n2" })
            rc:wait_converged({ "n1", "n2" })
        end)

        it("never runs more moves than max_concurrent, and loses nothing",
           function()
            local n1, n2 = rc:node("n1"), rc:node("n2")
            local run = start_load({ { n1, "g" }, { n2, "h" } })
            flows({ n1, n2 })
            rc:start({ "n3" })
            rc:wait_converged({ "n1", "n2", "n3" })
            local most = 0
            helpers.wait_until(function()
                local st = n1:stats()
                if st.moves.in_progress > most then
                    most = st.moves.in_progress
                end
                local k3, k1, k2 = owned(n1, "n3"), owned(n1, "n1"),
                    owned(n1, "n2")
                local hi = math.max(k1, k2, k3)
                local lo = math.min(k1, k2, k3)
                return (k3 >= 5 and hi - lo <= 1) or nil,
                    format("n1 %d, n2 %d, n3 %d", k1, k2, k3)
            end, 30, "the shards to even out", 0.01)
            local results = finish(run)
            only_explicit(results)
            verify(results, n1)
            -- the coordinator's own watermark, and what polling saw
            local peak = n1:stats().moves.peak
            assert.is_true(peak >= 1 and peak <= 2,
                           peak .. " moves under way at once")
            assert.is_true(most <= 2, most .. " moves seen under way")
            assert.is_true(n1:stats().moves.finished >= 5)
        end)
    end)

    describe("after a strategy edit (--watch)", function()
        local wc, path

        -- A strategy pinning every shard to `target`, whose rebalance
        -- proposes every shard that lives elsewhere.
        local function pin(target)
            return require("helpers.pin").source(target, true)
        end

        setup(function()
            helpers.stop_all_checked()
            wc = helpers.cluster({
                size = 2,
                watch = true,
                entities = {
                    Seq = { module = "seqcheck", shard_count = SHARDS,
                            idle_timeout = 600,
                            allocation = { __lua = "require(\"pinhandoff\")"
                                .. ".new()" } },
                },
                settings = { handoff_timeout = 3, rebalance_interval = 1 },
            })
            c = wc
            path = wc.dir .. "/pinhandoff.lua"
            helpers.write_file(path, pin("n1"))
            seqload.use(wc)
            wc:start({ "n1" })
            wc:start({ "n2" })
            wc:wait_converged({ "n1", "n2" })
        end)

        it("moves every shard the new strategy wants elsewhere, at once, "
           .. "losing and reordering nothing", function()
            local n1, n2 = wc:node("n1"), wc:node("n2")
            local run = start_load({ { n1, "i" }, { n2, "j" } })
            helpers.wait_until(function()
                local k = owned(n1, "n1")
                return k >= 20 or nil, k .. " shards on n1"
            end, 10, "the load to place shards on n1")
            assert.are.equal(0, (owned(n1, "n2")))
            helpers.sleep(0.02)
            helpers.write_file(path, pin("n2"))
            helpers.wait_until(function()
                local k1, k2 = owned(n1, "n1"), owned(n1, "n2")
                return (k1 == 0 and k2 >= 20) or nil,
                    format("n1 %d, n2 %d", k1, k2)
            end, 20, "every shard to move to n2")
            flows({ n2 }) -- and serves them under the load
            local results = finish(run)
            only_explicit(results)
            verify(results, n2)
            local st = n1:stats()
            assert.is_true(st.moves.peak >= 10,
                           "at most " .. st.moves.peak .. " moves at once")
            assert.are.equal(0, st.moves.aborted)
            -- (that the edited strategy replaced the old one shows in the
            -- moves: the old one pinned every shard to n1)
        end)
    end)
end)
