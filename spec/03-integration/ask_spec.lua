-- Asks on a real node (G5, G7): entity-to-entity asks and their replies,
-- asks that time out, handler errors that reach the asker, and a node
-- that keeps serving after all of these.

local helpers = require "helpers.node"

describe("asks", function()
    local n

    -- Asker `asker` asks target (type, id) `msg` with `timeout`; returns the
    -- asker's report: {reply = r} or {err = {code, message}}, elapsed.
    local function ask_via(asker, ttype, tid, msg, timeout)
        return n:call("Asker", asker, {
            type = "ask", target = { type = ttype, id = tid }, msg = msg,
            timeout = timeout,
        })
    end

    setup(function()
        n = helpers.start({
            entities = {
                Asker = { module = "asker" },
                Counter = { module = "counter" },
                Inventory = { module = "inventory" },
                Journal = { module = "journal", idle_timeout = false },
                Order = { module = "order" },
                Sleeper = { module = "sleeper" },
                Spin = { module = "spin", slow_handler_ms = 5000 },
                Sticky = { module = "probe", idle_timeout = 60 },
            },
        })
    end)

    teardown(function()
        helpers.stop_all_checked()
        assert.same({}, helpers.leaks())
    end)

    describe("between entities", function()
        it("returns the reply of the entity asked", function()
            n:call("Sticky", "p1", { type = "set", value = 42 })
            local r = ask_via("a1", "Sticky", "p1", { type = "get" }, 2)
            assert.is_nil(r.err)
            assert.equal(42, r.reply.value)
            assert.equal("p1", r.reply.id)
        end)

        it("places an order that reserves stock through Inventory asks",
           function()
            assert.same({ ok = true, available = 5 },
                        n:call("Inventory", "sku-a",
                               { type = "restock", qty = 5 }))
            assert.same({ ok = true, available = 1 },
                        n:call("Inventory", "sku-b",
                               { type = "restock", qty = 1 }))
            local placed = n:call("Order", "o1", {
                type = "place",
                items = { { sku = "sku-a", qty = 2 },
                          { sku = "sku-b", qty = 1 } },
            })
            assert.same({ ok = true, state = "reserved" }, placed)
            local a = n:call("Inventory", "sku-a", { type = "get" })
            assert.same({ sku = "sku-a", available = 3, reserved = 2,
                          sold = 0 }, a)
            local b = n:call("Inventory", "sku-b", { type = "get" })
            assert.same({ sku = "sku-b", available = 0, reserved = 1,
                          sold = 0 }, b)
        end)

        it("rejects an order Inventory cannot serve and releases what it "
           .. "reserved", function()
            n:call("Inventory", "sku-c", { type = "restock", qty = 4 })
            n:call("Inventory", "sku-d", { type = "restock", qty = 1 })
            local placed = n:call("Order", "o2", {
                type = "place",
                items = { { sku = "sku-c", qty = 3 },
                          { sku = "sku-d", qty = 2 } },
            })
            assert.same({ ok = false, state = "rejected", sku = "sku-d",
                          reason = "insufficient", available = 1 }, placed)
            -- the release is a tell from the order: wait for it
            helpers.wait_until(function()
                local c = n:call("Inventory", "sku-c", { type = "get" })
                return c.available == 4 and c.reserved == 0
            end, 5, "sku-c to be released")
        end)

        it("gives the asker nil, err with code timeout when the reply is "
           .. "late", function()
            local before = n:stats()
            local r = ask_via("a2", "Sleeper", "s1",
                              { type = "nap", seconds = 1.5 }, 0.2)
            assert.is_nil(r.reply)
            assert.equal("timeout", r.err.code)
            assert.is_true(r.elapsed >= 0.15 and r.elapsed < 1.2,
                           "elapsed " .. r.elapsed)
            assert.is_true(n:stats().asks_timed_out > before.asks_timed_out)
        end)

        it("gives the asker nil, err with code timeout when the handler "
           .. "asked busy-loops past the timeout", function()
            local r = ask_via("a3", "Spin", "spin-1",
                              { type = "spin", ms = 400 }, 0.1)
            assert.is_nil(r.reply)
            assert.equal("timeout", r.err and r.err.code)
        end)

        it("gives the asker err.code handler_error when the handler asked "
           .. "raises", function()
            local r = ask_via("a4", "Spin", "boom-1",
                              { type = "boom", reason = "kaput" }, 2)
            assert.is_nil(r.reply)
            assert.equal("handler_error", r.err.code)
            assert.matches("boom: kaput", r.err.message, 1, true)
        end)

        it("gives the asker err.code no_reply when the handler asked does "
           .. "not reply", function()
            local r = ask_via("a5", "Counter", "c-noreply",
                              { type = "incr" }, 2)
            assert.equal("no_reply", r.err.code)
        end)

        it("gives an entity that asks itself err.code ask_self", function()
            local r = ask_via("a6", "Asker", "a6", { type = "noop" }, 1)
            assert.equal("ask_self", r.err.code)
        end)
    end)

    describe("over HTTP", function()
        it("answers 504 timeout to an ask whose reply is later than "
           .. "?timeout", function()
            local t0 = helpers.now()
            local status, body = n:ask("Sleeper", "s2",
                                       { type = "nap", seconds = 1.5 }, 0.2)
            assert.equal(504, status)
            assert.equal("timeout", body.error.code)
            assert.is_true(helpers.now() - t0 < 1.2)
        end)

        it("answers 504 timeout to an ask whose handler busy-loops past "
           .. "?timeout", function()
            local status, body = n:ask("Spin", "spin-2",
                                       { type = "spin", ms = 400 }, 0.1)
            assert.equal(504, status)
            assert.equal("timeout", body and body.error.code)
        end)

        it("answers 500 handler_error with the error message when the "
           .. "handler raises", function()
            local before = n:stats()
            local status, body = n:ask("Spin", "boom-2",
                                       { type = "boom", reason = "bang" })
            assert.equal(500, status)
            assert.equal("handler_error", body.error.code)
            assert.matches("boom: bang", body.error.message, 1, true)
            assert.equal(before.handler_errors + 1,
                         n:stats().handler_errors)
        end)

        it("answers 502 no_reply when the handler does not reply", function()
            local status, body = n:ask("Counter", "c-noreply-2",
                                       { type = "incr" })
            assert.equal(502, status)
            assert.equal("no_reply", body.error.code)
        end)
    end)

    describe("isolation", function()
        it("keeps serving other entities after handler errors", function()
            for i = 1, 5 do
                n:ask("Spin", "boom-3", { type = "boom", reason = i })
            end
            n:tell("Counter", "iso-1", { type = "incr", by = 3 })
            assert.same({ value = 3 },
                        n:call("Counter", "iso-1", { type = "get" }))
            assert.same({ pong = true },
                        n:call("Spin", "other", { type = "ping" }))
        end)

        it("keeps an entity serving after its handler raised", function()
            n:call("Counter", "iso-2", { type = "reset" })
            n:tell("Counter", "iso-2", { type = "incr", by = 2 })
            local status = n:ask("Counter", "iso-2", { type = "bogus" })
            assert.equal(500, status)
            n:tell("Counter", "iso-2", { type = "incr", by = 1 })
            assert.same({ value = 3 },
                        n:call("Counter", "iso-2", { type = "get" }))
        end)
    end)
end)
