-- The watchdog (runtime/io/watchdog.h) on a real node: LuaJIT cannot
-- preempt a handler stuck in `while true do end`, so the node notices and
-- says which entity holds it, ends itself with status 70 when asked to
-- stop or when stuck past stuck_handler_exit_ms, and leaves a node that is
-- merely busy alone.

local helpers = require "helpers.node"
local logline = require "helpers.logline"
local partition = require "moonshard.partition"

local format = string.format

local EXIT_STUCK = 70 -- MS_EXIT_STUCK (runtime/moonshard.h)
local SHARDS = 8

local function start(settings, entities)
    return helpers.start({
        stderr_apart = true,
        settings = settings,
        entities = entities or {
            Spin = { module = "spin", shard_count = SHARDS },
            Counter = { module = "counter", shard_count = SHARDS },
        },
    })
end

-- The node's log records at `level` whose `key` field is `value`.
local function records(n, level, key, value)
    local found = {}
    for _, rec in ipairs(logline.records(n:stderr())) do
        if rec.level == level and rec[key] == value then
            found[#found + 1] = rec
        end
    end
    return found
end

-- Sends the message that never returns to Spin `id`; returns when the
-- node's loop is taken (a health check gets no answer).
local function hang(n, id)
    local path = helpers.entity_path("Spin", id, "tell")
    local status, _, raw = n:http("POST", path, { type = "hang" })
    assert.equal(202, status, raw)
    helpers.wait_until(function()
        return n:http("GET", "/v1/health", nil, { max_time = 0.2 }) == 0
    end, 5, "the loop to be taken")
end

describe("the watchdog", function()
    after_each(function()
        helpers.stop_all_checked(1)
        assert.same({}, helpers.leaks())
    end)

    it("names the stuck handler's entity, type and shard, then again at "
       .. "doubling intervals", function()
        local n = start({ stuck_handler_ms = 300,
                          stuck_handler_exit_ms = false })
        local id = 'stuck "1"\n'
        local t0 = helpers.now()
        hang(n, id)
        local list
        helpers.wait_until(function()
            list = records(n, "WARN", "id", id)
            return #list >= 1
        end, 3, "the stuck handler in the log")
        assert.is_true(helpers.now() - t0 < 0.3 + 2.5)
        assert.equal("Spin", list[1].type)
        assert.equal(tostring(partition.shard(id, SHARDS)), list[1].shard)
        -- reported at 300, 600, 1200 ms: the third comes at least 900 ms
        -- after the first (a fixed interval would make it 600)
        helpers.wait_until(function()
            list = records(n, "WARN", "id", id)
            return #list >= 3
        end, 5, "three reports")
        assert.is_true(logline.ms(list[3]) - logline.ms(list[1]) >= 850,
                       format("%s then %s", list[1].ts, list[3].ts))
        assert.is_true(n:alive()) -- no exit limit: it waits
    end)

    it("ends the process with status 70 on SIGTERM while a handler is "
       .. "stuck", function()
        local n = start({ stuck_handler_ms = 300,
                          stuck_handler_exit_ms = false })
        hang(n, "s2")
        helpers.wait_until(function()
            return #records(n, "WARN", "id", "s2") >= 1
        end, 3, "the stuck handler in the log")
        n:signal(helpers.SIGTERM)
        assert.is_true(n.proc:wait(3), "the node did not exit")
        assert.equal(EXIT_STUCK, n.proc.code)
        assert.equal(1, #records(n, "ERROR", "id", "s2"))
    end)

    it("ends the process with status 70 on SIGINT that came before the "
       .. "handler counted as stuck", function()
        local n = start({ stuck_handler_ms = 1500,
                          stuck_handler_exit_ms = false })
        hang(n, "s3")
        n:signal(2) -- SIGINT, as Ctrl-C sends it
        assert.is_true(n.proc:wait(5), "the node did not exit")
        assert.equal(EXIT_STUCK, n.proc.code)
    end)

    it("ends the process with status 70 by itself at "
       .. "stuck_handler_exit_ms", function()
        local n = start({ stuck_handler_ms = 200,
                          stuck_handler_exit_ms = 700 })
        local t0 = helpers.now()
        hang(n, "s4")
        assert.is_true(n.proc:wait(5), "the node did not exit")
        assert.equal(EXIT_STUCK, n.proc.code)
        assert.is_true(helpers.now() - t0 >= 0.7)
        local last = records(n, "ERROR", "id", "s4")
        assert.equal(1, #last)
        assert.equal("Spin", last[1].type)
    end)

    it("names a stuck partitioner and its type", function()
        local n = start({ stuck_handler_ms = 200,
                          stuck_handler_exit_ms = false }, {
            Tagged = {
                module = "counter", shard_count = SHARDS,
                partitioner = { __lua = "function(id, n) "
                    .. "if id == 'loop' then while true do end end "
                    .. "return 0 end" },
            },
        })
        assert.equal(202, (n:tell("Tagged", "fine", { type = "incr" })))
        -- the gateway calls the partitioner before it answers: do not wait
        local conn = helpers.tcp_open(n.port)
        conn:send(helpers.format_request(n.port, "POST",
            helpers.entity_path("Tagged", "loop", "tell"),
            { type = "incr" }, true))
        local list
        helpers.wait_until(function()
            list = records(n, "WARN", "id", "loop")
            return #list >= 1
        end, 3, "the stuck partitioner in the log")
        conn:close()
        assert.equal("Tagged", list[1].type)
        assert.is_nil(list[1].shard)
    end)

    it("does not count the time the process stood still (SIGSTOP)",
       function()
        local n = start({ stuck_handler_ms = 200,
                          stuck_handler_exit_ms = 1500 })
        -- a handler of 1 s, and the process stopped for 2.5 s meanwhile:
        -- 3 s of wall-clock time, 1 s of running
        local conn = assert(helpers.tcp_open(n.port))
        conn:send(helpers.format_request(n.port, "POST",
            helpers.entity_path("Spin", "paused", "ask"),
            { type = "spin", ms = 1000 }, true))
        helpers.sleep(0.3)
        n:signal(helpers.SIGSTOP)
        helpers.sleep(2.5)
        n:signal(helpers.SIGCONT)
        local reply = conn:read(5, '{"spun":1000}')
        conn:close()
        assert.matches('{"spun":1000}', reply, 1, true)
        helpers.sleep(0.2)
        assert.is_true(n:alive())
        assert.is_true(n.proc:terminate(5))
        assert.equal(0, n.proc.code)
    end)

    it("never stops a node that is busy with many short handlers",
       function()
        local n = start({ stuck_handler_ms = 100,
                          stuck_handler_exit_ms = 1000 })
        local deadline = helpers.now() + 3
        local sent, round = 0, 0
        while helpers.now() < deadline do
            round = round + 1
            local reqs = {}
            for i = 1, 200 do
                reqs[i] = helpers.format_request(n.port, "POST",
                    helpers.entity_path("Counter", "c" .. (i % 50), "tell"),
                    { type = "incr" }, i == 200)
            end
            local got = helpers.pipeline(n.port, reqs, 10)
            for _, r in ipairs(got) do
                assert.equal(202, r.status)
            end
            sent = sent + #got
            -- and a handler of 20 ms now and then (slow, not stuck)
            assert.same({ spun = 20 }, n:call("Spin", "busy" .. round % 3,
                                              { type = "spin", ms = 20 }))
        end
        assert.is_true(sent > 1000)
        assert.is_true(n:alive())
        assert.equal(200, (n:http("GET", "/v1/health")))
        assert.same({}, records(n, "ERROR", "type", "Counter"))
        assert.is_true(n.proc:terminate(5))
        assert.equal(0, n.proc.code)
    end)
end)
