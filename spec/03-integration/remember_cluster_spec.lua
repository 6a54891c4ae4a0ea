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
            },
            files = { ["keeper_out.lua"] = format("return %q", out) },
            settings = { handoff_timeout = 2, rebalance_interval = 0.5 },
        })
        c:start({ "n1", "n2" })
        c:wait_converged({ "n1", "n2" })
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

    it("forgets what stopped or idled out, keeps the rest, over a "
       .. "restart of the whole cluster", function()
        local n4, n5 = c:node("n4"), c:node("n5")
        -- k1 stops itself, k3 stops k2 by its ref, k4 fails (on_error =
        -- "stop": a failure, not a passivation)
        assert.same({ ok = true }, n4:call("Keeper", "k1", { type = "stop" }))
        assert.same({ ok = true },
                    n5:call("Keeper", "k3", { type = "stop_ref", id = "k2" }))
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
            return (remembered("Keeper") == 38 and remembered("Sticky") == 3)
                or nil, format("Keeper %d", remembered("Keeper"))
        end, 10, "the records to be written")
        n4:stop()
        n5:stop()
        os.remove(out)
        c:start({ "n1", "n2", "n3" })
        c:wait_converged({ "n1", "n2", "n3" })
        local keep = {}
        for i = 3, 40 do keep[#keep + 1] = "k" .. i end
        local live = nodes({ "n1", "n2", "n3" })
        where = rh.running({ live = live, type = "Keeper", ids = keep,
                             shards = sh, path = out, want = 38 })
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
