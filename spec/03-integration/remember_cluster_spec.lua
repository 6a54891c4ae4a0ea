-- Remember entities across a cluster (issue 12, "Tests that try to break
-- it"): 40 Keeper entities, started by one message each, run again on the
-- new owner of their shard, with no message after the event, after a node
-- joins, a node leaves, a node is SIGKILLed and downed, the coordinator is
-- killed in the middle of moves, and the whole cluster is stopped and
-- started again. Explicit stops (ctx:stop(), ref:stop()) and an idle
-- passivation without keep_on_idle forget an entity; a handler failure
-- and an idle passivation with keep_on_idle do not.
--
-- The file store: every node of this machine shares its directory (a
-- lock per log), so a shard that moves finds its log. One cluster for
-- the file; the tests run in order and build on it.

local helpers = require "helpers.node"
local rh = require "helpers.remember"

local format = string.format

local SHARDS = 16
local SECRET = "spec-secret-7f3a9c2e41b8"

describe("remember-entities in a cluster (file store)", function()
    local c, out
    local ids = {}
    for i = 1, 40 do ids[i] = "k" .. i end
    local gone = {} -- ids stopped by a test
    local sh      -- { id = shard }
    local where   -- { id = owner } after the latest check

    -- the running nodes among `names`
    local function nodes(names)
        local t = {}
        for i, name in ipairs(names) do t[i] = c:node(name) end
        return t
    end

    -- after an event: every id runs on its owner among `live`, started
    -- again where its owner changed, counted once; a message finds it
    -- active. `before`: init counts taken before the event.
    local function check(live, before)
        where = rh.running({ live = nodes(live), type = "Keeper", ids = ids,
                             shards = sh, path = out, prev = where,
                             before = before })
        rh.answer_once(c:node(live[1]), out, "Keeper", ids, where)
        return where
    end

    local function shards_on(via, name)
        local t = {}
        for shard, o in pairs(rh.owners(via, "Keeper")) do
            if o == name then t[#t + 1] = shard end
        end
        table.sort(t)
        return t
    end

    -- waits until the coordinator `coord` has no move in progress and
    -- `names` each own a share of the shards within one of each other
    local function balanced(coord, names)
        helpers.wait_until(function()
            local hi, lo = 0, math.huge
            for _, name in ipairs(names) do
                local k = #shards_on(coord, name)
                hi, lo = math.max(hi, k), math.min(lo, k)
            end
            return (lo > 0 and hi - lo <= 1
                    and coord:stats().moves.in_progress == 0) or nil,
                format("shares %d..%d", lo, hi)
        end, 30, "the shards to spread over " .. table.concat(names, ","))
    end

    setup(function()
        local dir = helpers.tmpdir()
        out = dir .. "/starts.log"
        -- the store's directory must exist
        assert(os.execute("mkdir " .. dir .. "/rlog") == 0)
        local function keeper(extra)
            local e = { module = "keeper", shard_count = SHARDS,
                        idle_timeout = false, on_error = "stop",
                        remember = { store = "file", dir = dir .. "/rlog" } }
            for k, v in pairs(extra or {}) do e[k] = v end
            return e
        end
        c = helpers.cluster({
            size = 5,
            secret = SECRET,
            entities = {
                Keeper = keeper(),
                -- idle after 1 s: forgotten, and kept with keep_on_idle
                Idler = keeper({ idle_timeout = 1, shard_count = 4 }),
                Sticky = keeper({ idle_timeout = 1, shard_count = 4,
                                  remember = { store = "file",
                                               dir = dir .. "/rlog",
                                               keep_on_idle = true } }),
                -- only to learn that n2 registered (below); not
                -- remembered, never idle
                Witness = { module = "counter", shard_count = 64,
                            idle_timeout = false },
            },
            files = { ["keeper_out.lua"] = format("return %q", out) },
            settings = { handoff_timeout = 2, rebalance_interval = 0.5 },
        })
        c:start({ "n1", "n2" })
        c:wait_converged({ "n1", "n2" })
        -- The coordinator places shards on n2 only once it has n2's
        -- registration, which may come after the converged view; the
        -- first test's ids could then all go to n1. A node registers its
        -- types in name order in one answer, so a Witness shard on n2
        -- says its Keeper registration arrived (Keeper ids placed to
        -- find out would be remembered and counted).
        c:node("n1"):wait_placed_on("Witness", "n2")
        sh = rh.shards(c:node("n1"), "Keeper", ids)
    end)

    teardown(function()
        helpers.stop_all_checked()
        assert.same({}, helpers.leaks())
    end)

    it("starts them by a message, each once, remembered on its owner",
       function()
        local n1, n2 = c:node("n1"), c:node("n2")
        for i, id in ipairs(ids) do
            assert.equal(202, (((i % 2 == 0) and n1 or n2):tell(
                "Keeper", id, { type = "incr" })))
        end
        where = rh.running({ live = { n1, n2 }, type = "Keeper", ids = ids,
                             shards = sh, path = out })
        local n = rh.counts(out, "Keeper")
        for _, id in ipairs(ids) do assert.equal(1, n[id], id) end
        -- both nodes own some of them
        local on = {}
        for _, o in pairs(where) do on[o] = true end
        assert.is_true(on.n1 and on.n2, "the ids are all on one node")
    end)

    it("starts them again on a node that joins and takes their shards",
       function()
        local before = rh.counts(out, "Keeper")
        local prev = where
        c:start({ "n3" })
        c:wait_converged({ "n1", "n2", "n3" })
        balanced(c:node("n1"), { "n1", "n2", "n3" })
        check({ "n1", "n2", "n3" }, before)
        local moved = 0
        for _, id in ipairs(ids) do
            if where[id] == "n3" then
                assert.is_true(prev[id] ~= "n3")
                moved = moved + 1
            end
        end
        assert.is_true(moved > 0, "no id moved to n3")
    end)

    it("starts them again elsewhere when their node leaves", function()
        local before = rh.counts(out, "Keeper")
        local n2 = c:node("n2")
        local had = 0
        for _, o in pairs(where) do if o == "n2" then had = had + 1 end end
        assert.is_true(had > 0, "no id on n2")
        assert.equal(202, (n2:admin("leave")))
        assert.is_truthy(n2.proc:wait(30), "n2 did not leave")
        check({ "n1", "n3" }, before)
    end)

    it("starts them again elsewhere when their node is killed and downed",
       function()
        local before = rh.counts(out, "Keeper")
        local n1, n3 = c:node("n1"), c:node("n3")
        assert.is_true(#shards_on(n1, "n3") > 0, "n3 owns nothing")
        n3:kill()
        local st, _, raw = n1:admin("down", { address = n3.listen,
                                              force = true })
        assert.equal(202, st, raw)
        check({ "n1" }, before)
    end)

    it("starts them again when the coordinator is killed during moves",
       function()
        local n1 = c:node("n1")
        local joined = rh.counts(out, "Keeper")
        c:start({ "n4", "n5" })
        c:wait_converged({ "n1", "n4", "n5" })
        balanced(n1, { "n1", "n4", "n5" })
        check({ "n1", "n4", "n5" }, joined)
        local n4, n5 = c:node("n4"), c:node("n5")
        local before = rh.counts(out, "Keeper")
        -- n4 stopped: the moves of its shards cannot end
        n4:signal(helpers.SIGSTOP)
        local started = n1:stats().moves.started
        for _, shard in ipairs(shards_on(n1, "n4")) do
            local st, _, raw = n1:http("POST",
                format("/v1/move/Keeper/%d", shard), nil,
                { headers = { ["X-Moonshard-Token"] = c.admin_token } })
            assert.equal(202, st, raw)
        end
        helpers.wait_until(function()
            local m = n1:stats().moves
            return (m.started > started and m.in_progress > 0) or nil
        end, 5, "the moves to begin")
        n1:kill()
        n4:signal(helpers.SIGCONT)
        local st, _, raw = n5:admin("down", { address = n1.listen,
                                              force = true })
        assert.equal(202, st, raw)
        check({ "n4", "n5" }, before)
    end)

    it("does not start at the new owner what stopped just before a move; "
       .. "messages during the move start nothing twice", function()
        local n4, n5 = c:node("n4"), c:node("n5")
        -- the coordinator: n4 or n5, once both see n1 gone
        local coord = helpers.wait_until(function()
            local lead = helpers.leader_name(n4:members())
            return (lead == "n4" or lead == "n5")
                and lead == helpers.leader_name(n5:members())
                and c:node(lead) or nil, tostring(lead)
        end, 10, "a coordinator among n4 and n5")
        -- a shard with at least three of our ids (none of k1..k4)
        local by = {}
        for i = 5, #ids do
            local s = sh[ids[i]]
            by[s] = by[s] or {}
            table.insert(by[s], ids[i])
        end
        local shard, on
        for s, list in pairs(by) do
            if #list >= 3 and (not on or #list > #on) then
                shard, on = s, list
            end
        end
        assert.is_truthy(shard, "no shard with three ids")
        local victim = on[1]
        local before = rh.counts(out, "Keeper")
        local fin = coord:stats().moves.finished
        -- the stop is answered, then at once the shard moves
        assert.same({ ok = true },
                    n4:call("Keeper", victim, { type = "stop" }))
        local st, _, raw = coord:http("POST",
            format("/v1/move/Keeper/%d", shard), nil,
            { headers = { ["X-Moonshard-Token"] = c.admin_token } })
        assert.equal(202, st, raw)
        -- messages to the others while it moves
        for k = 2, #on do
            assert.equal(202, (n5:tell("Keeper", on[k], { type = "incr" })))
        end
        helpers.wait_until(function()
            return coord:stats().moves.finished > fin or nil
        end, 20, "the move to finish")
        -- the rebalance evens out what the move unbalanced (it may move
        -- another shard, or this one back)
        balanced(coord, { "n4", "n5" })
        local to = rh.owners(coord, "Keeper")[shard]
        gone[victim] = true
        local rest = {}
        for _, id in ipairs(ids) do
            if not gone[id] then rest[#rest + 1] = id end
        end
        where = rh.running({ live = { n4, n5 }, type = "Keeper", ids = rest,
                             shards = sh, path = out, prev = where,
                             before = before })
        local n = rh.counts(out, "Keeper")
        assert.equal(before[victim], n[victim], victim .. " started again")
        for k = 2, #on do
            assert.is_true(n[on[k]] > before[on[k]], on[k])
            assert.equal(to, where[on[k]], on[k])
        end
        rh.answer_once(n5, out, "Keeper", rest, where)
    end)

    it("forgets what stopped or idled out, keeps the rest, over a "
       .. "restart of the whole cluster", function()
        local n4, n5 = c:node("n4"), c:node("n5")
        -- k1 stops itself, an entity on the other node stops k2 by its
        -- ref, k4 fails (on_error = "stop": a failure, not a passivation)
        local stopper
        for i = 5, #ids do
            local id = ids[i]
            if not gone[id] and where[id] ~= where.k2 then
                stopper = id
                break
            end
        end
        assert.is_truthy(stopper, "every id is on k2's node")
        assert.same({ ok = true }, n4:call("Keeper", "k1", { type = "stop" }))
        assert.same({ ok = true },
                    n5:call("Keeper", stopper, { type = "stop_ref",
                                                 id = "k2" }))
        assert.equal(202, (n4:tell("Keeper", "k4", { type = "fail" })))
        for i = 1, 3 do
            assert.equal(202, (n4:tell("Idler", "i" .. i, { type = "incr" })))
            assert.equal(202, (n5:tell("Sticky", "s" .. i, { type = "incr" })))
        end
        local function remembered(ty)
            local k = 0
            for _, n in ipairs({ n4, n5 }) do
                local s = n:stats().remember
                if s.queued ~= 0 or s.inflight ~= 0 then return -1 end
                k = k + s.types[ty].remembered
            end
            return k
        end
        helpers.wait_until(function()
            return remembered("Sticky") == 3 or nil
        end, 10, "the Sticky ones to be remembered")
        local pass = 0
        for _, n in ipairs({ n4, n5 }) do
            pass = pass + n:stats().passivations
        end
        -- idle passivation (between 1 and 2 s): the Idler ones are
        -- forgotten, the Sticky ones passivate too but stay remembered
        helpers.wait_until(function()
            local p = 0
            for _, n in ipairs({ n4, n5 }) do
                p = p + n:stats().passivations
            end
            return (remembered("Idler") == 0 and p >= pass + 6) or nil,
                format("Idler %d, passivations %d", remembered("Idler"),
                       p - pass)
        end, 10, "the idle ones to passivate")
        helpers.wait_until(function()
            return (remembered("Keeper") == 37 and remembered("Sticky") == 3)
                or nil, format("Keeper %d", remembered("Keeper"))
        end, 10, "the records to be written")
        n4:stop()
        n5:stop()
        os.remove(out)
        c:start({ "n1", "n2", "n3" })
        c:wait_converged({ "n1", "n2", "n3" })
        gone.k1, gone.k2 = true, true
        local keep = {}
        for i = 3, 40 do
            if not gone["k" .. i] then keep[#keep + 1] = "k" .. i end
        end
        local live = nodes({ "n1", "n2", "n3" })
        where = rh.running({ live = live, type = "Keeper", ids = keep,
                             shards = sh, path = out })
        local sticky = { "s1", "s2", "s3" }
        rh.running({ live = live, type = "Sticky", ids = sticky,
                     shards = rh.shards(live[1], "Sticky", sticky),
                     path = out })
        -- each once, and nothing forgotten started
        local n = rh.counts(out, "Keeper")
        for _, id in ipairs(keep) do assert.equal(1, n[id], id) end
        assert.is_nil(n.k1)
        assert.is_nil(n.k2)
        assert.same({}, rh.counts(out, "Idler"))
        for _, nd in ipairs(live) do
            assert.equal(0, nd:stats().remember.types.Idler.remembered)
        end
        rh.answer_once(live[2], out, "Keeper", keep, where)
    end)
end)

describe("remember-entities in a cluster (memory store)", function()
    teardown(function()
        helpers.stop_all_checked()
        assert.same({}, helpers.leaks())
    end)

    it("counts what runs on each node, and keeps nothing over a restart "
       .. "of the cluster", function()
        local out = helpers.tmpdir() .. "/starts.log"
        local c = helpers.cluster_up({
            size = 2,
            secret = SECRET,
            entities = {
                Keeper = { module = "keeper", shard_count = 4,
                           idle_timeout = false,
                           remember = { store = "memory" } },
            },
            files = { ["keeper_out.lua"] = format("return %q", out) },
        })
        local list = {}
        for i = 1, 10 do list[i] = "m" .. i end
        local sh = rh.shards(c:node("n1"), "Keeper", list)
        for _, id in ipairs(list) do
            assert.equal(202, (c:node("n2"):tell("Keeper", id,
                                                 { type = "incr" })))
        end
        local live = { c:node("n1"), (c:node("n2")) }
        rh.running({ live = live, type = "Keeper", ids = list, shards = sh,
                     path = out })
        for _, n in ipairs(live) do n:stop() end
        os.remove(out)
        c:start()
        c:wait_converged()
        -- every shard was listed (the memory store answers at once), and
        -- nothing came back
        helpers.wait_until(function()
            local loads, pending = 0, 0
            for _, n in ipairs(live) do
                local s = n:stats().remember
                loads = loads + s.loads
                pending = pending + s.eager_pending
            end
            return (loads >= 4 and pending == 0) or nil
        end, 10, "the shards to be listed")
        for _, n in ipairs(live) do
            local s = n:stats().remember
            assert.equal(0, s.eager_starts, n.name)
            assert.equal(0, s.types.Keeper.remembered, n.name)
        end
        assert.same({}, rh.inits(out))
    end)
end)

-- The spec holds the lock of a shard's log (as an old owner of this
-- machine does until it has closed the log), so the node's listing of
-- that shard fails and is retried every second; a message meanwhile
-- starts and stops an id of the shard. When the listing comes in, the
-- stopped id must stay stopped.
describe("remember-entities, a stop while the shard's listing waits",
         function()
    local ffi = require "ffi"
    pcall(ffi.cdef, [[
        int open(const char *path, int flags, ...);
        int flock(int fd, int op);
        int close(int fd);
    ]])
    local LOCK_EX, LOCK_NB = 2, 4
    local O_CLOEXEC = 0x80000 -- Linux: the node must not inherit the lock

    teardown(function()
        helpers.stop_all_checked()
        assert.same({}, helpers.leaks())
    end)

    -- Found by this spec (fixed): the listing that arrives after the stop
    -- still held the id, and the eager start activated it again,
    -- recording it as running: an explicit stop was undone. The machine
    -- now skips an id that left the set after the listing.
    it("does not start again an id stopped before the listing came in",
       function()
        local dir = helpers.tmpdir()
        local out = dir .. "/starts.log"
        assert(os.execute("mkdir " .. dir .. "/rlog") == 0)
        local c = helpers.cluster_up({
            size = 1,
            secret = SECRET,
            entities = {
                Keeper = { module = "keeper", shard_count = 2,
                           idle_timeout = false,
                           remember = { store = "file",
                                        dir = dir .. "/rlog" } },
            },
            files = { ["keeper_out.lua"] = format("return %q", out) },
        })
        local n1 = c:node("n1")
        local list = {}
        for i = 1, 8 do list[i] = "f" .. i end
        local sh = rh.shards(n1, "Keeper", list)
        for _, id in ipairs(list) do
            assert.equal(202, (n1:tell("Keeper", id, { type = "incr" })))
        end
        rh.running({ live = { n1 }, type = "Keeper", ids = list,
                     shards = sh, path = out })
        n1:stop()
        local victim = list[1]
        local rest = {}
        for i = 2, #list do rest[#rest + 1] = list[i] end
        -- the log of the victim's shard, locked by the spec
        local fd = ffi.C.open(format("%s/rlog/Keeper.%d.rlog", dir,
                                     sh[victim]), O_CLOEXEC)
        assert.is_true(fd >= 0, "no log for shard " .. sh[victim])
        assert.equal(0, ffi.C.flock(fd, LOCK_EX + LOCK_NB))
        local ok, err = pcall(function()
            os.remove(out)
            c:start({ "n1" })
            c:wait_converged({ "n1" })
            helpers.wait_until(function()
                return n1:stats().remember.load_errors > 0 or nil
            end, 10, "the listing to fail on the locked log")
            -- the victim starts by this message, and stops
            assert.same({ ok = true },
                        n1:call("Keeper", victim, { type = "stop" }))
        end)
        ffi.C.close(fd) -- the lock goes with it
        assert(ok, err)
        -- the listing comes in: the others start, the queue empties
        helpers.wait_until(function()
            local n = rh.counts(out, "Keeper")
            for _, id in ipairs(rest) do
                if not n[id] then return nil, id .. " not started" end
            end
            local s = n1:stats().remember
            return (s.eager_pending == 0 and s.queued == 0
                    and s.inflight == 0) or nil, "still starting"
        end, 20, "the others to start")
        assert.equal(1, rh.counts(out, "Keeper")[victim],
                     victim .. " was started again after its stop")
        rh.running({ live = { n1 }, type = "Keeper", ids = rest,
                     shards = sh, path = out })
        -- and a restart does not start it either
        n1:stop()
        os.remove(out)
        c:start({ "n1" })
        c:wait_converged({ "n1" })
        rh.running({ live = { n1 }, type = "Keeper", ids = rest,
                     shards = sh, path = out })
        assert.is_nil(rh.counts(out, "Keeper")[victim])
    end)
end)

-- A shard that moves between two nodes of this machine: the new owner
-- lists its log while the old owner may still hold the log's lock.
describe("remember-entities, fail_closed, a move on one machine", function()
    teardown(function()
        helpers.stop_all_checked()
        assert.same({}, helpers.leaks())
    end)

    -- Found by this spec (fixed): the old owner closed the log (and its
    -- lock) only at a later tick, so the new owner's listing met the
    -- lock (MS_EBUSY), counted a load error and, with fail_closed,
    -- refused the shard's messages until its retry a second later. The
    -- old owner now unlocks the log before it reports the shard stopped.
    -- A race: it failed in some runs only.
    it("delivers the moved shard's messages at once", function()
        local dir = helpers.tmpdir()
        local out = dir .. "/starts.log"
        assert(os.execute("mkdir " .. dir .. "/rlog") == 0)
        local c = helpers.cluster_up({
            size = 2,
            secret = SECRET,
            entities = {
                Keeper = { module = "keeper", shard_count = 4,
                           idle_timeout = false,
                           remember = { store = "file", dir = dir .. "/rlog",
                                        on_failure = "fail_closed" } },
                -- only to learn that n2 registered (below)
                Witness = { module = "counter", shard_count = 64 },
            },
            files = { ["keeper_out.lua"] = format("return %q", out) },
            settings = { handoff_timeout = 2, rebalance_interval = 60 },
        })
        local n1 = c:node("n1")
        -- the move below needs n2 to take the shard: the coordinator
        -- places shards there only once it has n2's registration, which
        -- may come after the converged view (a Witness shard on n2 says
        -- it came: a node registers its types in name order in one answer)
        n1:wait_placed_on("Witness", "n2")
        local list = {}
        for i = 1, 12 do list[i] = "c" .. i end
        local sh = rh.shards(n1, "Keeper", list)
        for _, id in ipairs(list) do
            assert.equal(202, (n1:tell("Keeper", id, { type = "incr" })))
        end
        local where = rh.running({ live = { n1, (c:node("n2")) },
                                   type = "Keeper", ids = list, shards = sh,
                                   path = out })
        local id = list[1]
        local from = where[id]
        local fin = n1:stats().moves.finished
        local errs = {}
        for _, name in ipairs({ "n1", "n2" }) do
            errs[name] = c:node(name):stats().remember.load_errors
        end
        local st, _, raw = n1:http("POST",
            format("/v1/move/Keeper/%d", sh[id]), nil,
            { headers = { ["X-Moonshard-Token"] = c.admin_token } })
        assert.equal(202, st, raw)
        helpers.wait_until(function()
            return n1:stats().moves.finished > fin or nil
        end, 10, "the move to finish")
        assert.is_true(rh.owners(n1, "Keeper")[sh[id]] ~= from)
        local status, body = n1:ask("Keeper", id, { type = "get" }, 5)
        assert.equal(200, status, helpers.json.encode(body))
        for _, name in ipairs({ "n1", "n2" }) do
            assert.equal(errs[name],
                         c:node(name):stats().remember.load_errors, name)
        end
    end)
end)
