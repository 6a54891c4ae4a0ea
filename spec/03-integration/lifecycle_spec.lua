-- Entity lifecycle on a real node: activation on the first message, idle
-- and explicit passivation (HTTP stop and ctx:stop()), the `stopped`
-- callback, re-activation with fresh state, and ctx:after/ctx:cancel
-- timers. Lifecycle events are observed through the Journal fixture entity
-- (the probe's init and stopped tell it) and the node's stats.

local helpers = require "helpers.node"

local IDLE = 0.3 -- idle_timeout of type Probe, seconds

describe("entity lifecycle", function()
    local n

    -- The events the Journal recorded for `id`, as tables.
    local function journal(id)
        return n:call("Journal", "main", { type = "events", id = id }).events
    end

    -- Their names, e.g. { "init", "tick:t1", "stopped" }.
    local function events(id)
        local list = {}
        for _, e in ipairs(journal(id)) do
            list[#list + 1] = e.event .. (e.tag and (":" .. e.tag) or "")
        end
        return list
    end

    local function count_event(id, name)
        local c = 0
        for _, e in ipairs(events(id)) do
            if e == name then
                c = c + 1
            end
        end
        return c
    end

    -- Waits until the Journal has `times` (1) events `name` for `id`.
    local function wait_event(id, name, timeout, times)
        helpers.wait_until(function()
            return count_event(id, name) >= (times or 1),
                table.concat(events(id), ",")
        end, timeout or 5, name .. " of " .. id)
    end

    setup(function()
        n = helpers.start({
            entities = {
                -- passivates after IDLE seconds without messages
                Probe = { module = "probe", idle_timeout = IDLE },
                -- the same behavior, only passivated on request
                Sticky = { module = "probe", idle_timeout = 60 },
                Journal = { module = "journal", idle_timeout = false },
            },
        })
        -- activate the Journal first, so it does not count below
        n:call("Journal", "main", { type = "events" })
    end)

    teardown(function()
        helpers.stop_all_checked()
        assert.same({}, helpers.leaks())
    end)

    describe("activation", function()
        it("activates an entity on its first message and runs init",
           function()
            local before = n:stats()
            assert.same({}, events("act-1"))
            local reply = n:call("Sticky", "act-1", { type = "get" })
            assert.equal("act-1", reply.id)
            assert.equal("Sticky", reply.type)
            assert.is_number(reply.born)
            local after = n:stats()
            assert.equal(before.activations + 1, after.activations)
            assert.equal(before.active_entities + 1, after.active_entities)
            wait_event("act-1", "init")
        end)

        it("keeps one activation for later messages", function()
            local first = n:call("Sticky", "act-2", { type = "get" })
            local before = n:stats()
            n:call("Sticky", "act-2", { type = "set", value = 1 })
            local again = n:call("Sticky", "act-2", { type = "get" })
            assert.equal(first.born, again.born)
            assert.equal(1, again.value)
            assert.equal(before.activations, n:stats().activations)
            assert.same({ "init" }, events("act-2"))
        end)

        it("gives the entity the shard the partitioner computes", function()
            local partition = require "moonshard.partition"
            local reply = n:call("Sticky", "act-3", { type = "get" })
            assert.equal(partition.shard("act-3", 64), reply.shard)
            assert.equal("n1", reply.node)
        end)
    end)

    describe("passivation", function()
        it("passivates an entity on POST .../stop and calls stopped",
           function()
            n:call("Sticky", "stop-1", { type = "set", value = 7 })
            local before = n:stats()
            local status, body = n:stop_entity("Sticky", "stop-1")
            assert.equal(202, status)
            assert.same({ ok = true }, body)
            wait_event("stop-1", "stopped")
            local after = n:stats()
            assert.equal(before.passivations + 1, after.passivations)
            assert.equal(before.active_entities - 1, after.active_entities)
        end)

        it("passivates an entity that calls ctx:stop() after its message",
           function()
            n:call("Sticky", "stop-2", { type = "set", value = 1 })
            local before = n:stats()
            assert.same({ ok = true },
                        n:call("Sticky", "stop-2", { type = "stop" }))
            wait_event("stop-2", "stopped")
            assert.equal(before.passivations + 1, n:stats().passivations)
            assert.same({ "init", "stopped" }, events("stop-2"))
        end)

        it("re-activates a passivated id with fresh state", function()
            n:call("Sticky", "stop-3", { type = "set", value = 42 })
            local old = n:call("Sticky", "stop-3", { type = "get" })
            n:stop_entity("Sticky", "stop-3")
            wait_event("stop-3", "stopped")
            local new = n:call("Sticky", "stop-3", { type = "get" })
            assert.is_nil(new.value)
            assert.are_not.equal(old.born, new.born)
            assert.same({ "init", "stopped", "init" }, events("stop-3"))
        end)

        it("handles the messages sent before a stop, then passivates",
           function()
            for i = 1, 5 do
                n:tell("Sticky", "stop-4", { type = "set", value = i })
            end
            n:stop_entity("Sticky", "stop-4")
            -- the ask arrives after the stop: it re-activates the entity
            local reply = n:call("Sticky", "stop-4", { type = "get" })
            assert.is_nil(reply.value)
            assert.same({ "init", "stopped", "init" }, events("stop-4"))
            -- stopped saw the state the five tells left
            assert.equal(5, journal("stop-4")[2].value)
        end)

        it("ignores a stop for an entity that is not active", function()
            local before = n:stats()
            local status = n:stop_entity("Sticky", "never-started")
            assert.equal(202, status)
            n:settle()
            local after = n:stats()
            assert.equal(before.passivations, after.passivations)
            assert.equal(before.activations, after.activations)
            assert.same({}, events("never-started"))
        end)

        it("passivates an entity idle for idle_timeout", function()
            local t0 = helpers.now()
            n:call("Probe", "idle-1", { type = "set", value = 1 })
            wait_event("idle-1", "stopped", 5)
            local waited = helpers.now() - t0
            assert.is_true(waited >= IDLE * 0.9,
                           "passivated after only " .. waited .. " s")
            local fresh = n:call("Probe", "idle-1", { type = "get" })
            assert.is_nil(fresh.value)
            -- leave nothing behind that could passivate during later tests
            wait_event("idle-1", "stopped", 5, 2)
        end)

        it("keeps an entity active while messages arrive within "
           .. "idle_timeout", function()
            local first = n:call("Probe", "idle-2", { type = "get" })
            for _ = 1, 8 do
                helpers.sleep(IDLE / 4)
                local again = n:call("Probe", "idle-2", { type = "get" })
                assert.equal(first.born, again.born)
            end
            assert.same({ "init" }, events("idle-2"))
            wait_event("idle-2", "stopped", 5) -- cleanup
        end)
    end)

    describe("timers", function()
        it("delivers a ctx:after message to its entity", function()
            local before = n:stats()
            local t0 = helpers.now()
            local reply = n:call("Sticky", "timer-1",
                                 { type = "after", seconds = 0.1,
                                   tag = "t1" })
            assert.is_number(reply.timer)
            wait_event("timer-1", "tick:t1")
            assert.is_true(helpers.now() - t0 >= 0.09)
            assert.same({ "t1" },
                        n:call("Sticky", "timer-1", { type = "get" }).ticks)
            assert.equal(before.timers_fired + 1, n:stats().timers_fired)
        end)

        it("does not deliver a timer cancelled with ctx:cancel", function()
            n:call("Sticky", "timer-2",
                   { type = "after", seconds = 0.15, tag = "cancelled" })
            n:call("Sticky", "timer-2",
                   { type = "after", seconds = 0.3, tag = "control" })
            assert.same({ cancelled = true }, n:call("Sticky", "timer-2",
                        { type = "cancel", tag = "cancelled" }))
            -- the later control timer fires: the cancelled one is past due
            wait_event("timer-2", "tick:control")
            assert.same({ "control" },
                        n:call("Sticky", "timer-2", { type = "get" }).ticks)
        end)

        it("reports a second cancel of the same timer as false", function()
            n:call("Sticky", "timer-3",
                   { type = "after", seconds = 5, tag = "x" })
            assert.same({ cancelled = true }, n:call("Sticky", "timer-3",
                        { type = "cancel", tag = "x" }))
            assert.same({ cancelled = false }, n:call("Sticky", "timer-3",
                        { type = "cancel", tag = "x" }))
        end)

        it("drops an entity's pending timers when it passivates", function()
            local before = n:stats()
            n:call("Sticky", "timer-4",
                   { type = "after", seconds = 0.2, tag = "doomed" })
            n:stop_entity("Sticky", "timer-4")
            wait_event("timer-4", "stopped")
            -- a timer of another entity, due later, shows the time passed
            n:call("Sticky", "timer-5",
                   { type = "after", seconds = 0.3, tag = "control" })
            wait_event("timer-5", "tick:control")
            assert.same({ "init", "stopped" }, events("timer-4"))
            assert.equal(before.timers_fired + 1, n:stats().timers_fired)
        end)
    end)
end)
