-- The active-entity limit (max_active_entities, issue 16 item 3) on a
-- real node: past it the least recently used idle entities are
-- passivated as an idle passivation would (`stopped` runs, in-memory
-- state is gone: a Counter starts again from 0), counted in /v1/stats
-- and /metrics; recently used entities stay, an entity with a pending
-- ctx:after timer stays, and a bad value stops the start.

local helpers = require "helpers.node"
local prom = require "helpers.prom"

-- Waits until the node's stats satisfy `ok(s)`; returns them.
local function wait_stats(n, ok, what)
    return helpers.wait_until(function()
        local s = n:stats()
        if s.pending == 0 and ok(s) then
            return s
        end
        return nil, string.format("active %d, limit_passivations %d",
                                  s.active_entities, s.limit_passivations)
    end, 10, what)
end

-- Tells `msg` to (t, id) and waits until the node handled it (and the
-- passivations its activation caused), so that entities activate in
-- the order of the calls.
local function tell_handled(n, t, id, msg)
    local base = n:stats().delivered
    assert.equal(202, (n:tell(t, id, msg)))
    wait_stats(n, function(s)
        return s.delivered > base
    end, id .. " handled")
end

-- The lines "<id> <value>" the Evictee fixture wrote, as a set and a
-- list of ids in order.
local function stopped_log(path)
    local set, list = {}, {}
    for id, value in (helpers.read_file(path) or ""):gmatch("(%S+) (%d+)\n")
    do
        set[id] = tonumber(value)
        list[#list + 1] = id
    end
    return set, list
end

describe("a node with max_active_entities = 100", function()
    local n

    setup(function()
        n = helpers.start({
            entities = { Counter = { module = "counter", shard_count = 16,
                                     idle_timeout = false } },
            settings = { max_active_entities = 100 },
        })
    end)

    teardown(function()
        helpers.stop_all_checked()
        assert.same({}, helpers.leaks())
    end)

    it("holds 100 of 300 Counters; the 200 oldest were passivated and "
       .. "start again from 0", function()
        for i = 1, 300 do
            tell_handled(n, "Counter", "c" .. i, { type = "incr", by = i })
        end
        local s = wait_stats(n, function(st)
            return st.delivered >= 300 and st.limit_passivations >= 200
        end, "300 tells handled")
        assert.equal(100, s.max_active_entities)
        assert.equal(300, s.activations)
        assert.equal(100, s.active_entities)
        assert.equal(200, s.limit_passivations)
        assert.equal(200, s.passivations)
        -- the last 100 stay, with their state (no activation: nothing
        -- more is passivated)
        for i = 201, 300 do
            assert.same({ value = i },
                        n:call("Counter", "c" .. i, { type = "get" }))
        end
        s = n:stats()
        assert.equal(300, s.activations)
        assert.equal(200, s.limit_passivations)
        -- a passivated one starts again from 0; its activation passivates
        -- one more, and the node stays at 100
        for i = 1, 5 do
            assert.same({ value = 0 },
                        n:call("Counter", "c" .. i, { type = "get" }))
        end
        s = wait_stats(n, function(st)
            return st.limit_passivations >= 205
        end, "5 more passivations")
        assert.equal(305, s.activations)
        assert.equal(205, s.limit_passivations)
        assert.equal(100, s.active_entities)
        -- and it counts again from there
        assert.equal(202, (n:tell("Counter", "c1", { type = "incr" })))
        assert.same({ value = 1 }, n:call("Counter", "c1", { type = "get" }))
    end)

    it("shows the limit and its passivations in /metrics", function()
        local s = n:stats()
        local status, _, raw = n:http("GET", "/metrics")
        assert.equal(200, status)
        local fams = prom.parse(raw)
        local lp = fams.moonshard_limit_passivations_total
        assert.equal("counter", lp.kind)
        assert.equal(s.limit_passivations, lp.samples[1].value)
        assert.is_true(lp.samples[1].value >= 205)
        local m = fams.moonshard_max_active_entities
        assert.equal("gauge", m.kind)
        assert.equal(100, m.samples[1].value)
        assert.equal(s.active_entities,
                     fams.moonshard_active_entities.samples[1].value)
    end)
end)

describe("a node with max_active_entities = 10", function()
    local n, log

    setup(function()
        log = helpers.tmpdir() .. "/stopped.log"
        n = helpers.start({
            entities = { Evictee = { module = "evictee", shard_count = 4,
                                     idle_timeout = false } },
            settings = { max_active_entities = 10 },
            files = { ["evictee_out.lua"] = string.format("return %q", log) },
        })
    end)

    teardown(function()
        helpers.stop_all_checked()
        assert.same({}, helpers.leaks())
    end)

    -- Tells incr to each id, one after the other, each handled (and the
    -- passivations it caused done) before the next.
    local function tell_each(ids, passivations)
        for _, id in ipairs(ids) do
            tell_handled(n, "Evictee", id, { type = "incr" })
        end
        return wait_stats(n, function(s)
            return s.limit_passivations >= passivations
        end, passivations .. " passivations")
    end

    it("passivates the least recently used; `stopped` runs for each",
       function()
        tell_each({ "e1", "e2", "e3", "e4", "e5", "e6", "e7", "e8", "e9",
                    "e10" }, 0)
        assert.is_nil(helpers.read_file(log))
        -- e1..e3 are used again: the next activations pass them over
        tell_each({ "e1", "e2", "e3" }, 0)
        local s = tell_each({ "f1", "f2", "f3", "f4", "f5" }, 5)
        assert.equal(5, s.limit_passivations)
        assert.equal(10, s.active_entities)
        local set, list = stopped_log(log)
        assert.same({ "e4", "e5", "e6", "e7", "e8" }, list)
        for _, id in ipairs(list) do
            assert.equal(1, set[id])
        end
        -- the recently used ones kept their state
        for _, id in ipairs({ "e1", "e2", "e3" }) do
            assert.same({ value = 2 }, n:call("Evictee", id,
                                              { type = "get" }))
        end
        for _, id in ipairs({ "e9", "e10", "f1", "f5" }) do
            assert.same({ value = 1 }, n:call("Evictee", id,
                                              { type = "get" }))
        end
        assert.equal(5, n:stats().limit_passivations)
    end)

    it("keeps an entity with a pending timer, as idle passivation does",
       function()
        assert.same({ ok = true }, n:call("Evictee", "e9", { type = "pin" }))
        -- ten new ids push out every other entity, e9 stays
        local before = n:stats().limit_passivations
        local ids = {}
        for i = 1, 10 do ids[i] = "g" .. i end
        local s = tell_each(ids, before + 10)
        assert.equal(before + 10, s.limit_passivations)
        assert.equal(10, s.active_entities)
        local set = stopped_log(log)
        assert.is_nil(set.e9)
        assert.equal(1, set.e10)
        assert.same({ value = 1 }, n:call("Evictee", "e9", { type = "get" }))
    end)
end)

describe("a remembered type under the limit", function()
    teardown(function()
        helpers.stop_all_checked()
        assert.same({}, helpers.leaks())
    end)

    -- Tells m1..m5 of Keeper (remembered in memory, `keep_on_idle` as
    -- given) on a node with max_active_entities = 3, and waits until the
    -- node remembers `want` ids with nothing left to write (the shards'
    -- listings load first: records wait for them).
    local function remembers(keep_on_idle, want)
        local n = helpers.start({
            entities = { Keeper = { module = "keeper", shard_count = 4,
                                    remember = { store = "memory",
                                                 keep_on_idle = keep_on_idle },
                                    idle_timeout = false } },
            settings = { max_active_entities = 3 },
        })
        for i = 1, 5 do
            tell_handled(n, "Keeper", "m" .. i, { type = "incr" })
        end
        local s = wait_stats(n, function(st)
            local r = st.remember
            return r.loads >= 4 and r.queued == 0 and r.inflight == 0
                and r.types.Keeper.remembered == want
        end, want .. " ids remembered")
        assert.equal(3, s.active_entities)
        assert.equal(2, s.limit_passivations)
    end

    it("forgets the ids it passivates, as an idle passivation does",
       function()
        remembers(false, 3)
    end)

    it("keeps them with keep_on_idle = true", function()
        remembers(true, 5)
    end)
end)

describe("max_active_entities in the config", function()
    teardown(function()
        helpers.stop_all_checked()
    end)

    -- Starts a node of `opts`, which must exit by itself; returns its
    -- exit code, its output and the config's path.
    local function start_fails(opts)
        local path = helpers.write_config(opts)
        local out = path .. ".out"
        local p = helpers.spawn({ helpers.bin, "node", path },
                                { stdout = out, stderr = "stdout" })
        local exited = p:wait(10)
        if not exited then
            p:terminate(1)
        end
        assert.is_true(exited, "the node kept running")
        return p.code, helpers.read_file(out) or "", path
    end

    -- The line of `path` that holds `text`.
    local function line_of(path, text)
        local i = 0
        for line in io.lines(path) do
            i = i + 1
            if line:find(text, 1, true) then
                return i
            end
        end
    end

    local ENTITIES = { Counter = { module = "counter" } }
    local REASON = "must be an integer in 1..2147483647, or false (no limit)"

    for _, case in ipairs({ { 0, "0" }, { -1, "-1" }, { 1.5, "1.5" },
                            { "x", "\"x\"" }, { 2 ^ 31, "2147483648" } }) do
        it("refuses " .. case[2] .. " with the file and line", function()
            local code, out, path = start_fails({
                entities = ENTITIES,
                settings = { max_active_entities = case[1] },
            })
            assert.is_not.equal(0, code)
            local want = string.format("%s:%d: max_active_entities: %s "
                                       .. "(got %s)", path,
                                       line_of(path, "max_active_entities"),
                                       REASON, case[2])
            assert.is_truthy(out:find(want, 1, true), out)
        end)
    end

    it("refuses a bad value in a node's entry", function()
        local code, out, path = start_fails({
            entities = ENTITIES,
            node_fields = "max_active_entities = 0",
        })
        assert.is_not.equal(0, code)
        local want = string.format("%s:%d: nodes[1].max_active_entities: %s "
                                   .. "(got 0)", path,
                                   line_of(path, "max_active_entities"),
                                   REASON)
        assert.is_truthy(out:find(want, 1, true), out)
    end)

    it("takes false as no limit, and a node's own value over the top's",
       function()
        local n = helpers.start({ entities = ENTITIES,
                                  settings = { max_active_entities = false } })
        assert.equal(0, n:stats().max_active_entities)
        local m = helpers.start({ entities = ENTITIES,
                                  settings = { max_active_entities = 100 },
                                  node_fields = "max_active_entities = 7" })
        assert.equal(7, m:stats().max_active_entities)
        local o = helpers.start({ entities = ENTITIES,
                                  settings = { max_active_entities = 100 },
                                  node_fields = "max_active_entities = false" })
        assert.equal(0, o:stats().max_active_entities)
    end)
end)
