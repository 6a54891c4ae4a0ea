-- Bad input on a real node (G6, G7): unknown types, malformed and
-- oversized bodies, bad ask timeouts, a handler misusing the ctx API, slow
-- handlers, behavior modules that fail to load, and config errors. Each
-- gets a clear error while the node serves on.

local helpers = require "helpers.node"

local MAX_BYTES = 256 -- limits.max_message_bytes of the node under test

describe("bad input", function()
    local n

    -- The node still answers a Counter: the usual "serves on" check.
    local function serves_on()
        n:tell("Counter", "alive", { type = "incr" })
        local status, body = n:ask("Counter", "alive", { type = "get" })
        assert.equal(200, status)
        assert.is_number(body.value)
    end

    local function assert_error(want_status, want_code, status, body, raw)
        assert.equal(want_status, status, raw)
        assert.is_table(body, raw)
        assert.equal(want_code, body.error.code, raw)
        assert.is_string(body.error.message)
    end

    setup(function()
        n = helpers.start({
            entities = {
                Asker = { module = "asker" },
                Counter = { module = "counter" },
                Spin = { module = "spin", slow_handler_ms = 50 },
                Tiny = { module = "counter", max_pending = 5 },
                -- modules written beside the config, see files below
                Broken = { module = "broken_syntax" },
                Hollow = { module = "no_receive" },
                Missing = { module = "no_such_module" },
                -- missing too, and its partitioner refuses every id: the
                -- answer names the type's state, not the partitioner
                MissingPart = { module = "no_such_module",
                                partitioner = { __lua = [[function(id, n)
                                    error("no id is placed here")
                                end]] } },
            },
            limits = { max_message_bytes = MAX_BYTES },
            files = {
                ["broken_syntax.lua"] =
                    "local M = {}\nfunction M.receive(state, msg\nreturn M\n",
                ["no_receive.lua"] =
                    "return { init = function() return {} end }\n",
            },
        })
    end)

    teardown(function()
        helpers.stop_all_checked()
        assert.same({}, helpers.leaks())
    end)

    describe("requests", function()
        it("answers 404 unknown_type for an unknown entity type", function()
            for _, action in ipairs({ "tell", "ask", "stop" }) do
                local status, body, raw = n:http("POST",
                    "/v1/entities/Nope/x/" .. action, { type = "get" })
                assert_error(404, "unknown_type", status, body, raw)
            end
            serves_on()
        end)

        it("answers 400 bad_json for a body that is not JSON", function()
            for _, bad in ipairs({ "{", "{\"type\":}", "nope", "" }) do
                local status, body, raw = n:tell("Counter", "c1", bad)
                assert_error(400, "bad_json", status, body, raw)
                status, body, raw = n:ask("Counter", "c1", bad)
                assert_error(400, "bad_json", status, body, raw)
            end
            serves_on()
        end)

        it("answers 400 not_object for JSON that is not an object",
           function()
            for _, bad in ipairs({ "[1]", "3", "\"s\"", "true", "null",
                                   "[]" }) do
                local status, body, raw = n:tell("Counter", "c1", bad)
                assert_error(400, "not_object", status, body, raw)
            end
            serves_on()
        end)

        it("answers 413 too_large for a body over max_message_bytes",
           function()
            local before = n:stats()
            local pad = string.rep("x", MAX_BYTES)
            local status, body, raw = n:tell("Counter", "c1",
                                             { type = "incr", pad = pad })
            assert_error(413, "too_large", status, body, raw)
            assert.equal(before.routed, n:stats().routed)
            serves_on()
        end)

        it("accepts a body of exactly max_message_bytes", function()
            local msg = '{"type":"incr","pad":"'
            msg = msg .. string.rep("x", MAX_BYTES - #msg - 2) .. '"}'
            assert.equal(MAX_BYTES, #msg)
            assert.equal(202, (n:tell("Counter", "c1", msg)))
        end)

        it("answers 400 bad_timeout for an ask timeout that is not a "
           .. "positive number", function()
            for _, t in ipairs({ "0", "-1", "abc", "", "inf", "nan", "1e9",
                                 "0x10" }) do
                local status, body, raw = n:ask("Counter", "c1",
                                                { type = "get" }, t)
                assert_error(400, "bad_timeout", status, body,
                             "timeout=" .. t .. ": " .. raw)
            end
            serves_on()
        end)

        it("answers 404 for an unknown endpoint and 405 for a wrong method",
           function()
            local status, body, raw = n:http("POST",
                "/v1/entities/Counter/c1/poke", { type = "get" })
            assert_error(404, "not_found", status, body, raw)
            status, body, raw = n:http("GET", "/v1/entities/Counter/c1/ask")
            assert_error(405, "method_not_allowed", status, body, raw)
        end)

        it("answers 400 for an empty or too long entity id", function()
            local status, body, raw = n:http("POST",
                "/v1/entities/Counter//tell", { type = "incr" })
            assert_error(400, "bad_request", status, body, raw)
            status, body, raw = n:tell("Counter", string.rep("i", 513),
                                       { type = "incr" })
            assert_error(400, "bad_request", status, body, raw)
            assert.equal(202, (n:tell("Counter", string.rep("i", 512),
                                      { type = "incr" })))
        end)
    end)

    describe("handlers", function()
        it("fails the outer ask with handler_error when a handler asks "
           .. "with a timeout of 0", function()
            local before = n:stats()
            local status, body, raw = n:ask("Asker", "a1", {
                type = "ask", target = { type = "Counter", id = "c2" },
                msg = { type = "get" }, timeout = 0,
            })
            assert_error(500, "handler_error", status, body, raw)
            assert.matches("seconds", body.error.message, 1, true)
            local after = n:stats()
            assert.equal(before.handler_errors + 1, after.handler_errors)
            -- the inner ask never started
            assert.equal(before.asks_started + 1, after.asks_started)
            serves_on()
        end)

        it("counts a handler slower than slow_handler_ms and serves on",
           function()
            local before = n:stats()
            assert.same({ spun = 120 },
                        n:call("Spin", "slow", { type = "spin", ms = 120 }))
            assert.equal(before.slow_handlers + 1, n:stats().slow_handlers)
            serves_on()
        end)

        it("does not count a handler faster than slow_handler_ms",
           function()
            local before = n:stats()
            n:call("Spin", "fast", { type = "spin", ms = 1 })
            assert.equal(before.slow_handlers, n:stats().slow_handlers)
        end)
    end)

    describe("bounds", function()
        it("refuses tells past a shard's max_pending with an overflow "
           .. "error and delivers every accepted one", function()
            -- the shard gets its owner first; before that, messages wait
            -- in the routing buffer (1,024 per shard) instead
            assert.same({ value = 0 }, n:call("Tiny", "t1", { type = "get" }))
            local before = n:stats()
            local r = n:call("Asker", "flood", {
                type = "flood", target = { type = "Tiny", id = "t1" },
                msg = { type = "incr" }, count = 20,
            })
            assert.same({ accepted = 5, errors = { overflow = 15 } }, r)
            assert.equal(before.overflows + 15, n:stats().overflows)
            assert.same({ value = 5 }, n:call("Tiny", "t1", { type = "get" }))
        end)
    end)

    describe("behavior modules", function()
        it("answers 503 unavailable for a type whose module has a syntax "
           .. "error", function()
            local status, body, raw = n:tell("Broken", "b1",
                                             { type = "x" })
            assert_error(503, "unavailable", status, body, raw)
            status, body, raw = n:ask("Broken", "b1", { type = "x" })
            assert_error(503, "unavailable", status, body, raw)
            serves_on()
        end)

        it("answers 503 unavailable for a type whose module has no receive",
           function()
            local status, body, raw = n:ask("Hollow", "h1", { type = "x" })
            assert_error(503, "unavailable", status, body, raw)
            serves_on()
        end)

        it("answers 503 unavailable for a type whose module is missing",
           function()
            local status, body, raw = n:ask("Missing", "m1", { type = "x" })
            assert_error(503, "unavailable", status, body, raw)
        end)

        it("answers 503 unavailable before it runs such a type's "
           .. "partitioner", function()
            local status, body, raw = n:ask("MissingPart", "m1",
                                            { type = "x" })
            assert_error(503, "unavailable", status, body, raw)
            status, body, raw = n:tell("MissingPart", "m1", { type = "x" })
            assert_error(503, "unavailable", status, body, raw)
            local r = n:call("Asker", "a3", {
                type = "ask", target = { type = "MissingPart", id = "m2" },
                msg = { type = "x" }, timeout = 1,
            })
            assert.equal("unavailable", r.err.code)
        end)

        it("gives an entity err.code unavailable when it asks such a type",
           function()
            local r = n:call("Asker", "a2", {
                type = "ask", target = { type = "Broken", id = "b2" },
                msg = { type = "x" }, timeout = 1,
            })
            assert.equal("unavailable", r.err.code)
        end)
    end)
end)

describe("a config error", function()
    teardown(function()
        helpers.cleanup()
        assert.same({}, helpers.leaks())
    end)

    -- Runs `moonshard node` on `source` (a config script); returns the exit
    -- code, the output, the config path and the HTTP port it names.
    local function run_node(source)
        local port = helpers.free_port()
        local dir = helpers.tmpdir()
        local path = dir .. "/bad.lua"
        helpers.write_file(path, (source:gsub("HTTP_PORT", port)))
        local p = helpers.spawn({ helpers.bin, "node", path },
                                { stdout = dir .. "/out",
                                  stderr = dir .. "/err" })
        -- exits by itself: never killed here
        local exited = p:wait(10)
        if not exited then
            p:terminate(1)
        end
        assert.is_true(exited, "moonshard node kept running")
        return p.code, helpers.read_file(dir .. "/err"), path, port, p.pid
    end

    local HEAD = table.concat({
        "return {",
        "    cluster = \"bad\",",
        "    nodes = { { name = \"n1\", listen = \"127.0.0.1:1\",",
        "                http = \"127.0.0.1:HTTP_PORT\" } },",
        "    entities = {",
    }, "\n") .. "\n"

    it("stops the node before it starts, naming the field and file:line",
       function()
        local code, err, path, port, pid = run_node(HEAD .. table.concat({
            "        Counter = { module = \"counter\" },",
            "        Bad = {",
            "            module = \"counter\",",
            "            shard_count = -1,", -- line 9
            "        },",
            "    },",
            "}",
        }, "\n") .. "\n")
        assert.is_not.equal(0, code)
        assert.matches(path .. ":9: entities.Bad.shard_count: ", err, 1,
                       true)
        assert.matches("(got -1)", err, 1, true)
        assert.is_false(helpers.pid_alive(pid))
        -- nothing listens on the node's HTTP port
        assert.equal(0, (helpers.request(port, "GET", "/v1/health")))
    end)

    it("names a misspelt field and its line", function()
        local code, err, path = run_node(HEAD .. table.concat({
            "        Counter = { module = \"counter\", idle_timout = 5 },",
            "    },",
            "}",
        }, "\n") .. "\n")
        assert.is_not.equal(0, code)
        assert.matches(path .. ":6: entities.Counter.idle_timout: unknown "
                       .. "field, did you mean \"idle_timeout\"?", err, 1,
                       true)
    end)

    it("exits non-zero when the config script raises", function()
        local code, err, path = run_node("error('no config today')\n")
        assert.is_not.equal(0, code)
        assert.matches(path, err, 1, true)
        assert.matches("no config today", err, 1, true)
    end)
end)
