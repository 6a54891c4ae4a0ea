-- A handoff's quiet stop on real nodes: when every shard leaves a node at
-- once, the idle entities of a type whose behavior runs nothing at a stop
-- (Counter) are passivated without a delivery each, their states
-- forgotten and their handles given to later entities; a type with a
-- `stopped` (Probe) still runs it for every entity. Both come back fresh
-- on their next message, wherever they live.

local cjson = require "cjson"
local helpers = require "helpers.node"
local pin = require "helpers.pin"

local SHARDS = 16
local COUNTERS, PROBES = 300, 20

describe("a handoff's stop of idle entities", function()
    local c, dir, stopfile

    local function pin_to(target)
        helpers.write_file(dir .. "/pinall.lua", pin.source(target, true))
    end

    local function all_on(node, target, types)
        helpers.wait_until(function()
            for _, t in ipairs(types) do
                for _, s in ipairs(node:allocations(t).shards) do
                    -- a shard no id has reached has no owner
                    if s.owner ~= cjson.null and s.owner ~= target then
                        return nil, t .. " shard " .. s.shard .. " on "
                            .. tostring(s.owner)
                    end
                end
            end
            for _, n in ipairs({ c:node("n1"), (c:node("n2")) }) do
                if n:stats().handoffs_in_progress ~= 0 then
                    return nil, n.name .. " still moving"
                end
            end
            return true
        end, 30, "every shard on " .. target)
    end

    local function stopped_lines()
        local f = io.open(stopfile, "r")
        if not f then return {} end
        local seen = {}
        for l in f:lines() do seen[l] = (seen[l] or 0) + 1 end
        f:close()
        return seen
    end

    setup(function()
        helpers.stop_all_checked()
        local alloc = { __lua = "require(\"pinall\").new()" }
        c = helpers.cluster({
            size = 2,
            watch = true,
            entities = {
                Counter = { module = "counter", shard_count = SHARDS,
                            idle_timeout = 600, allocation = alloc },
                Probe = { module = "probe", shard_count = SHARDS,
                          idle_timeout = 600, allocation = alloc },
                Journal = { module = "journal", shard_count = 1,
                            idle_timeout = 600, allocation = alloc },
            },
            settings = { handoff_timeout = 5, rebalance_interval = 0.2 },
        })
        dir = c.dir
        stopfile = dir .. "/stopped.txt"
        pin_to("n2")
        c:start({ "n1", "n2" })
        c:wait_converged({ "n1", "n2" })
    end)

    teardown(function()
        helpers.stop_all_checked()
    end)

    it("passivates them all, runs every stopped, and loses no state it "
       .. "should keep", function()
        local n1, n2 = c:node("n1"), c:node("n2")
        for i = 1, COUNTERS do
            assert.are.equal(202, (n1:tell("Counter", "c" .. i,
                                           { type = "incr", by = i })))
        end
        for i = 1, PROBES do
            n1:call("Probe", "p" .. i, { type = "watch", file = stopfile })
            n1:call("Probe", "p" .. i, { type = "set", value = i })
        end
        for i = 1, COUNTERS, 37 do
            assert.are.equal(i, n1:call("Counter", "c" .. i,
                                        { type = "get" }).value)
        end
        all_on(n1, "n2", { "Counter", "Probe", "Journal" })
        local before = n2:stats()
        -- and the Journal, which the probes told
        assert.are.equal(COUNTERS + PROBES + 1, before.active_entities)

        -- every shard to n1 at once
        pin_to("n1")
        all_on(n1, "n1", { "Counter", "Probe", "Journal" })
        helpers.wait_until(function()
            local st = n2:stats()
            return st.active_entities == 0 or nil,
                "n2 still has " .. st.active_entities .. " active"
        end, 10, "n2 to hold no entity")
        local after = n2:stats()
        assert.are.equal(COUNTERS + PROBES + 1,
                         after.passivations - before.passivations)
        -- the Counters and the Journal without a delivery each (no
        -- stopped); the Probes through their stopped
        assert.are.equal(COUNTERS + 1, after.quiet_passivations
                         - before.quiet_passivations)
        local seen = stopped_lines()
        for i = 1, PROBES do
            assert.are.equal(1, seen["stopped Probe p" .. i], "p" .. i)
        end
        -- a handoff keeps no in-memory state: fresh on n1
        for i = 1, COUNTERS, 23 do
            assert.are.equal(0, n1:call("Counter", "c" .. i,
                                        { type = "get" }).value)
        end

        -- and back: n2 makes new entities on the handles it gave up
        pin_to("n2")
        all_on(n1, "n2", { "Counter", "Probe", "Journal" })
        for i = 1, COUNTERS do
            assert.are.equal(202, (n1:tell("Counter", "c" .. i,
                                           { type = "incr", by = 2 * i })))
        end
        for i = 1, COUNTERS do
            assert.are.equal(2 * i, n1:call("Counter", "c" .. i,
                                            { type = "get" }).value)
        end
        for i = 1, PROBES do
            local r = n1:call("Probe", "p" .. i, { type = "get" })
            assert.is_nil(r.value) -- init's state, not the one set before
        end
        local st = n2:stats()
        assert.are.equal(0, st.handler_errors)
        assert.is_true(n2:alive() and n1:alive())
    end)
end)
