-- Robustness on a real node: a behavior that misuses Refs, ctxs and asks
-- (shares them between entities, asks from a coroutine of its own or from
-- a C callback, asks or sets timers with absurd durations, replies above
-- the size limit) gets a clear handler_error while every entity serves
-- on; mailboxes and stop requests are bounded by max_pending; pending
-- timers keep an entity active; and SIGTERM handles the messages an
-- entity already accepted before its `stopped` runs.

local helpers = require "helpers.node"

local MAX_BYTES = 256 -- limits.max_message_bytes of the shared node
local BOUND = 20      -- max_pending of type Bounded
local IDLE = 0.2      -- idle_timeout of type Idle, seconds
local YEAR = 365 * 86400
local DAY = 86400

local function assert_error(want_status, want_code, status, body, raw)
    assert.equal(want_status, status, raw)
    assert.is_table(body, raw)
    assert.equal(want_code, body.error.code, raw)
    assert.is_string(body.error.message)
end

local function target(ttype, id)
    return { type = ttype, id = id }
end

describe("robustness", function()
    local n

    -- The node still answers a Stash ping for `id`.
    local function answers(id)
        local status, body, raw = n:ask("Stash", id, { type = "ping" }, 1)
        assert.equal(200, status, raw)
        assert.same({ pong = true, id = id }, body)
    end

    -- Waits until the Bounded entity `id` is suspended in an ask to a
    -- Sleeper napping `seconds` (the ask is started by a tell, so no
    -- client waits for it).
    local function suspend(id, seconds)
        local before = n:stats().asks_started
        assert.equal(202, (n:tell("Bounded", id, {
            type = "ask", target = target("Sleeper", id .. "-nap"),
            msg = { type = "nap", seconds = seconds }, timeout = 5,
        })))
        helpers.wait_until(function()
            return n:stats().asks_started > before
        end, 5, id .. " to ask")
    end

    -- Journal events of `id`, as "event" or "event:tag".
    local function events(id)
        local list = {}
        local all = n:call("Journal", "main", { type = "events", id = id })
        for _, e in ipairs(all.events) do
            list[#list + 1] = e.event .. (e.tag and (":" .. e.tag) or "")
        end
        return list, all.events
    end

    local function wait_event(id, name, timeout)
        helpers.wait_until(function()
            local list = events(id)
            for _, e in ipairs(list) do
                if e == name then
                    return true
                end
            end
            return false, table.concat(list, ",")
        end, timeout or 5, name .. " of " .. id)
    end

    setup(function()
        n = helpers.start({
            entities = {
                Stash = { module = "stash" },
                Sleeper = { module = "sleeper" },
                Bounded = { module = "scribe", max_pending = BOUND,
                            shard_count = 1 },
                Idle = { module = "probe", idle_timeout = IDLE },
                Journal = { module = "journal", idle_timeout = false },
            },
            limits = { max_message_bytes = MAX_BYTES },
        })
    end)

    teardown(function()
        helpers.stop_all_checked()
        assert.same({}, helpers.leaks())
    end)

    describe("a Ref shared between entities", function()
        it("gives the entity that asks through another entity's Ref the "
           .. "reply", function()
            n:call("Stash", "ref-a1", { type = "keep_ref", key = "r1",
                                        target = target("Stash", "ref-t1") })
            local status, body, raw = n:ask("Stash", "ref-b1", {
                type = "use_ref", key = "r1", msg = { type = "ping" },
                timeout = 2 }, 3)
            assert.equal(200, status, raw)
            assert.same({ reply = { pong = true, id = "ref-t1" } }, body)
        end)

        it("keeps the entity that asked through another entity's Ref "
           .. "answering", function()
            n:call("Stash", "ref-a2", { type = "keep_ref", key = "r2",
                                        target = target("Stash", "ref-t2") })
            n:ask("Stash", "ref-b2", { type = "use_ref", key = "r2",
                                       msg = { type = "ping" },
                                       timeout = 1 }, 2)
            answers("ref-b2")
            answers("ref-a2")
        end)
    end)

    describe("asks outside the handler's own coroutine", function()
        it("raises handler_error for an ask from a coroutine the handler "
           .. "created", function()
            local status, body, raw = n:ask("Stash", "wrap-1", {
                type = "wrap_ask", target = target("Stash", "wrap-t"),
                msg = { type = "ping" } }, 3)
            assert_error(500, "handler_error", status, body, raw)
            assert.matches("ask must be called by a handler itself",
                           body.error.message, 1, true)
        end)

        it("gives an entity whose ask from its own coroutine raised its "
           .. "next ask's reply", function()
            -- were that ask sent, its reply {slept = 0.3} would come while
            -- the next ask waits for {slept = 0.8}
            n:ask("Stash", "wrap-2", {
                type = "wrap_ask", target = target("Sleeper", "wrap-s1"),
                msg = { type = "nap", seconds = 0.3 }, timeout = 5 }, 3)
            local status, body, raw = n:ask("Stash", "wrap-2", {
                type = "ask", target = target("Sleeper", "wrap-s2"),
                msg = { type = "nap", seconds = 0.8 }, timeout = 5 }, 5)
            assert.equal(200, status, raw)
            assert.equal(0.8, body.reply and body.reply.slept, raw)
            answers("wrap-2")
        end)

        it("raises handler_error for an ask from a string.gsub callback",
           function()
            local status, body, raw = n:ask("Stash", "gsub-1", {
                type = "gsub_ask", target = target("Stash", "gsub-t"),
                msg = { type = "ping" }, timeout = 1 }, 3)
            assert_error(500, "handler_error", status, body, raw)
            assert.matches("yield across", body.error.message, 1, true)
            answers("gsub-1")
        end)

        it("gives a later ask its own reply, not the late reply of an ask "
           .. "abandoned in a string.gsub callback", function()
            -- the abandoned ask: its reply {slept = 0.3} comes in ~0.3 s
            local status, body, raw = n:ask("Stash", "gsub-2", {
                type = "gsub_ask", target = target("Sleeper", "gsub-s1"),
                msg = { type = "nap", seconds = 0.3 }, timeout = 5 }, 3)
            assert_error(500, "handler_error", status, body, raw)
            -- the legitimate ask waits for {slept = 0.8} meanwhile
            local t0 = helpers.now()
            status, body, raw = n:ask("Stash", "gsub-2", {
                type = "ask", target = target("Sleeper", "gsub-s2"),
                msg = { type = "nap", seconds = 0.8 }, timeout = 5 }, 5)
            local waited = helpers.now() - t0
            assert.equal(200, status, raw)
            assert.equal(0.8, body.reply and body.reply.slept, raw)
            assert.is_true(waited >= 0.7, "answered after " .. waited .. " s")
        end)
    end)

    describe("a ctx used by another entity's handler", function()
        it("refuses every ctx method that acts for its entity with "
           .. "handler_error", function()
            n:call("Stash", "ctx-a1", { type = "keep_ctx", key = "c1" })
            for _, op in ipairs({ "reply", "after", "cancel", "stop" }) do
                local status, body, raw = n:ask("Stash", "ctx-b1", {
                    type = "use_ctx", key = "c1", op = op }, 2)
                assert_error(500, "handler_error", status, body, raw)
                assert.matches("this ctx belongs to another entity's "
                               .. "handler", body.error.message, 1, true)
            end
        end)

        it("refuses a ctx kept past its entity's passivation, even when "
           .. "the handle went to another entity", function()
            n:call("Stash", "ctx-a3", { type = "keep_ctx", key = "c3" })
            assert.equal(202, (n:stop_entity("Stash", "ctx-a3")))
            helpers.wait_until(function()
                return n:stats().passivations > 0
            end, 5, "ctx-a3 to passivate")
            for _, op in ipairs({ "reply", "after" }) do
                local status, body, raw = n:ask("Stash", "ctx-x3", {
                    type = "use_ctx", key = "c3", op = op }, 2)
                assert_error(500, "handler_error", status, body, raw)
            end
            helpers.sleep(0.15) -- past the 0.05 s of a stolen after
            local st = n:call("Stash", "ctx-x3", { type = "get" })
            assert.is_true((st.ticks or 0) == 0)
        end)

        it("leaves the entity that owns the ctx untouched", function()
            n:call("Stash", "ctx-a2", { type = "keep_ctx", key = "c2" })
            local before = n:call("Stash", "ctx-a2", { type = "get" })
            for _, op in ipairs({ "reply", "after", "stop" }) do
                n:ask("Stash", "ctx-b2", { type = "use_ctx", key = "c2",
                                           op = op }, 2)
            end
            helpers.sleep(0.15) -- past the 0.05 s of a stolen after
            answers("ctx-a2")
            assert.same(before, n:call("Stash", "ctx-a2", { type = "get" }))
        end)
    end)

    describe("an entity's ctx", function()
        -- a ctx is a small FFI struct whose id is read from the
        -- dispatcher's record, one for each message (README "Writing an
        -- entity")
        it("works for its entity while a handler keeps it across messages "
           .. "and collections (each message has a ctx of its own)",
           function()
            n:call("Stash", "own-1", { type = "keep_own" })
            for _ = 1, 3 do
                assert.same({ same = false, id = "own-1" },
                            n:call("Stash", "own-1", { type = "check_own" }))
            end
        end)

        it("gives the same id, type, shard and node at every message, "
           .. "across collections", function()
            local a = n:call("Stash", "desc-1", { type = "describe" })
            assert.equal("desc-1", a.id)
            assert.equal("Stash", a.type)
            assert.equal("n1", a.node)
            assert.is_number(a.shard)
            for _ = 1, 3 do
                assert.same(a, n:call("Stash", "desc-1", { type = "describe" }))
            end
        end)

        it("refuses a field of its own with a clear error", function()
            local r = n:call("Stash", "field-1", { type = "set_field" })
            assert.is_false(r.ok)
            assert.matches("ctx.note: a ctx takes no fields of its own",
                           r.err, 1, true)
            -- its own fields (handle, generation, shard, type) are read-only
            assert.is_false(r.ok_shard)
            assert.is_true(r.const)
            assert.equal(r.was, r.shard)
            answers("field-1")
        end)
    end)

    describe("bounded mailboxes", function()
        -- Bounded "mb-1" is suspended in a 2 s ask while 30 tells arrive.
        local statuses, codes, overflows

        lazy_setup(function()
            local before = n:stats().overflows
            suspend("mb-1", 2)
            statuses, codes = {}, {}
            for i = 1, BOUND + 10 do
                local status, body = n:tell("Bounded", "mb-1",
                                            { type = "line",
                                              text = tostring(i) })
                statuses[i] = status
                codes[i] = body and body.error and body.error.code
            end
            overflows = n:stats().overflows - before
            n:settle(nil, 5)
        end)

        it("accepts tells to an entity suspended in an ask up to "
           .. "max_pending", function()
            for i = 1, BOUND do
                assert.equal(202, statuses[i], "tell " .. i)
            end
        end)

        it("refuses tells beyond max_pending with 503 overflow", function()
            for i = BOUND + 1, BOUND + 10 do
                assert.equal(503, statuses[i], "tell " .. i)
                assert.equal("overflow", codes[i], "tell " .. i)
            end
        end)

        it("counts the refused tells in stats overflows", function()
            assert.equal(10, overflows)
        end)

        it("handles every accepted tell in order once the ask ends",
           function()
            local want = {}
            for i = 1, BOUND do
                want[i] = tostring(i)
            end
            assert.same({ lines = want },
                        n:call("Bounded", "mb-1", { type = "lines" }))
        end)
    end)

    describe("bounded stop requests", function()
        -- Bounded "stop-1" is suspended in a 2 s ask while 30 stops arrive.
        local statuses, codes, passivations

        lazy_setup(function()
            local before = n:stats().passivations
            suspend("stop-1", 2)
            statuses, codes = {}, {}
            for i = 1, BOUND + 10 do
                local status, body = n:stop_entity("Bounded", "stop-1")
                statuses[i] = status
                codes[i] = body and body.error and body.error.code
            end
            n:settle(nil, 5)
            passivations = n:stats().passivations - before
        end)

        it("accepts stop requests for a busy entity up to max_pending",
           function()
            for i = 1, BOUND do
                assert.equal(202, statuses[i], "stop " .. i)
            end
        end)

        it("refuses stop requests beyond max_pending with 503 overflow",
           function()
            for i = BOUND + 1, BOUND + 10 do
                assert.equal(503, statuses[i], "stop " .. i)
                assert.equal("overflow", codes[i], "stop " .. i)
            end
        end)

        it("passivates the entity once, after its ask ends", function()
            assert.equal(1, passivations)
            assert.same({ lines = {} },
                        n:call("Bounded", "stop-1", { type = "lines" }))
        end)
    end)

    describe("message size", function()
        it("fails an ask whose reply is above max_message_bytes with 500 "
           .. "handler_error", function()
            local status, body, raw = n:ask("Stash", "big-1", {
                type = "big", bytes = MAX_BYTES + 10 }, 2)
            assert_error(500, "handler_error", status, body, raw)
            assert.matches("size limit", body.error.message, 1, true)
        end)

        it("serves on after a reply above max_message_bytes", function()
            n:ask("Stash", "big-2", { type = "big", bytes = MAX_BYTES * 4 },
                  2)
            local status, body, raw = n:ask("Stash", "big-2", {
                type = "big", bytes = 100 }, 2)
            assert.equal(200, status, raw)
            assert.equal(string.rep("x", 100), body.data)
            answers("big-3")
        end)
    end)

    describe("timers and idleness", function()
        setup(function()
            -- activate the Journal first, so its own idleness is moot
            n:call("Journal", "main", { type = "events" })
        end)

        it("keeps an entity with a pending ctx:after timer active past "
           .. "idle_timeout", function()
            local t0 = helpers.now()
            n:call("Idle", "tm-1", { type = "set", value = 5 })
            n:call("Idle", "tm-1", { type = "after", seconds = 1,
                                     tag = "late" })
            wait_event("tm-1", "stopped", 5)
            assert.is_true(helpers.now() - t0 >= 1, "stopped too early")
            local list, all = events("tm-1")
            -- one activation: it handled the timer with the state it had
            assert.same({ "init", "tick:late", "stopped" }, list)
            assert.equal(5, all[3].value)
        end)

        it("passivates an entity with no pending timer after idle_timeout",
           function()
            n:call("Idle", "tm-2", { type = "set", value = 1 })
            wait_event("tm-2", "stopped", 3)
            assert.same({ "init", "stopped" }, (events("tm-2")))
        end)

        it("passivates an entity whose only timer was cancelled after "
           .. "idle_timeout", function()
            local t0 = helpers.now()
            n:call("Idle", "tm-3", { type = "after", seconds = 5,
                                     tag = "never" })
            assert.same({ cancelled = true },
                        n:call("Idle", "tm-3", { type = "cancel",
                                                 tag = "never" }))
            wait_event("tm-3", "stopped", 3)
            assert.is_true(helpers.now() - t0 < 2)
            assert.same({ "init", "stopped" }, (events("tm-3")))
        end)
    end)

    describe("durations", function()
        it("raises handler_error for a ctx:after delay outside [0, one "
           .. "year]", function()
            for _, s in ipairs({ YEAR + 1, 1e300, -1, "nan", "inf",
                                 "-inf" }) do
                local status, body, raw = n:ask("Stash", "dur-1", {
                    type = "after", seconds = s }, 2)
                assert_error(500, "handler_error", status, body, raw)
                assert.matches("bad 'seconds' argument", body.error.message,
                               1, true)
            end
            answers("dur-1")
        end)

        it("accepts a ctx:after delay of one year", function()
            local status, body, raw = n:ask("Stash", "dur-2", {
                type = "after", seconds = YEAR }, 2)
            assert.equal(200, status, raw)
            assert.is_number(body.timer)
        end)

        it("raises handler_error for a ref:ask timeout above one day",
           function()
            local status, body, raw = n:ask("Stash", "dur-3", {
                type = "ask", target = target("Stash", "dur-t"),
                msg = { type = "ping" }, timeout = DAY + 1 }, 2)
            assert_error(500, "handler_error", status, body, raw)
            assert.matches("bad 'seconds' argument", body.error.message,
                           1, true)
            answers("dur-3")
        end)

        it("accepts a ref:ask timeout of one day", function()
            local status, body, raw = n:ask("Stash", "dur-4", {
                type = "ask", target = target("Stash", "dur-t"),
                msg = { type = "ping" }, timeout = DAY }, 2)
            assert.equal(200, status, raw)
            assert.same({ reply = { pong = true, id = "dur-t" } }, body)
        end)
    end)

    describe("stats", function()
        it("reports shutdown_drops, 0 while the node runs", function()
            assert.equal(0, n:stats().shutdown_drops)
        end)
    end)
end)

describe("SIGTERM with accepted messages", function()
    local ENTITIES = {
        Scribe = { module = "scribe", idle_timeout = false },
        Sleeper = { module = "sleeper" },
    }

    -- The lines of a file, in order ({} when it does not exist).
    local function lines(path)
        local list = {}
        for line in (helpers.read_file(path) or ""):gmatch("[^\n]+") do
            list[#list + 1] = line
        end
        return list
    end

    -- "tell 1" .. "tell COUNT", then "stopped".
    local function want_lines(count)
        local want = {}
        for i = 1, count do
            want[i] = "tell " .. i
        end
        want[count + 1] = "stopped"
        return want
    end

    -- The request of the i-th tell to Scribe `id`.
    local function tell_request(n, id, file, i, close)
        return helpers.format_request(n.port, "POST",
            helpers.entity_path("Scribe", id, "tell"),
            { type = "line", text = "tell " .. i, file = file }, close)
    end

    after_each(function()
        helpers.stop_all_checked()
        assert.same({}, helpers.leaks())
    end)

    it("handles the tells accepted for an active entity before its "
       .. "stopped runs", function()
        local count = 50
        local n = helpers.start({ entities = ENTITIES })
        local file = helpers.tmpdir() .. "/lines.txt"
        n:call("Scribe", "sd-1", { type = "lines" }) -- active
        for i = 1, count do
            assert.equal(202, (n:tell("Scribe", "sd-1", {
                type = "line", text = "tell " .. i, file = file })))
        end
        local code, signal = n:stop(10)
        assert.is_nil(signal)
        assert.equal(0, code, n:log())
        assert.same(want_lines(count), lines(file))
    end)

    it("handles every tell queued behind an entity suspended in an ask "
       .. "before its stopped runs", function()
        -- more tells than one dispatch round handles (ROUND_BUDGET, 4096,
        -- runtime/node/node.c), so the stop has rounds to overtake them in
        local count = 5000
        local n = helpers.start({ entities = ENTITIES })
        local file = helpers.tmpdir() .. "/lines.txt"
        local before = n:stats().asks_started
        n:tell("Scribe", "sd-2", {
            type = "ask", target = target("Sleeper", "sd-2-nap"),
            msg = { type = "nap", seconds = 30 }, timeout = 30 })
        helpers.wait_until(function()
            return n:stats().asks_started > before
        end, 5, "sd-2 to ask")
        local reqs = {}
        for i = 1, count do
            reqs[i] = tell_request(n, "sd-2", file, i, i == count)
        end
        local responses, why = helpers.pipeline(n.port, reqs)
        assert.equal(count, #responses, why)
        for i, r in ipairs(responses) do
            assert.equal(202, r.status, "tell " .. i .. ": " .. r.raw)
        end
        assert.same({}, lines(file)) -- all of them wait in its mailbox
        local t0 = helpers.now()
        local code, signal = n:stop(10)
        assert.is_nil(signal)
        assert.equal(0, code, n:log())
        assert.is_true(helpers.now() - t0 < 5, "the stop waited for the nap")
        assert.same(want_lines(count), lines(file))
    end)
end)
