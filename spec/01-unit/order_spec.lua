local fake_ctx = require "helpers.fake_ctx"
local errors = require "moonshard.error"
local order = require "order"
local inventory = require "inventory"

describe("entities/order", function()
    local stock   -- sku -> fake Inventory entity
    local failing -- sku -> error returned instead of asking it
    local e

    local function available(sku)
        return stock[sku]:send({ type = "get" }).available
    end

    before_each(function()
        stock, failing = {}, {}
        for sku, qty in pairs({ ["sku-a"] = 5, ["sku-b"] = 1, ["sku-c"] = 9 }) do
            stock[sku] = fake_ctx.entity(inventory, { type = "Inventory", id = sku })
            stock[sku]:send({ type = "restock", qty = qty })
        end
        -- Asks and tells go to the fake Inventory entities.
        e = fake_ctx.entity(order, {
            type = "Order", id = "o1", now = 1000,
            responder = function(entity_type, id, msg)
                assert.equal("Inventory", entity_type)
                if failing[id] then
                    return nil, failing[id]
                end
                return stock[id]:send(msg)
            end,
            teller = function(entity_type, id, msg)
                assert.equal("Inventory", entity_type)
                stock[id]:send(msg)
                return true
            end,
        })
    end)

    local function place(items, payment_timeout)
        return e:send({ type = "place", items = items,
                        payment_timeout = payment_timeout })
    end

    local function state_of()
        return e:send({ type = "get" }).state
    end

    local function tells(msg_type)
        local list = {}
        for _, t in ipairs(e.ctx.tells) do
            if t.msg.type == msg_type then
                list[#list + 1] = t.id
            end
        end
        return list
    end

    describe("place", function()
        it("reserves every item and replies reserved", function()
            local reply = place({ { sku = "sku-a", qty = 2 }, { sku = "sku-c", qty = 3 } })
            assert.same({ ok = true, state = "reserved" }, reply)
            assert.equal(3, available("sku-a"))
            assert.equal(6, available("sku-c"))
            assert.equal("reserved", state_of())
        end)

        it("asks each SKU to reserve with a 2 s timeout", function()
            place({ { sku = "sku-a", qty = 2 }, { sku = "sku-c", qty = 3 } })
            assert.same({
                { type = "Inventory", id = "sku-a", timeout = 2,
                  msg = { type = "reserve", order = "o1", qty = 2 } },
                { type = "Inventory", id = "sku-c", timeout = 2,
                  msg = { type = "reserve", order = "o1", qty = 3 } },
            }, e.ctx.asks)
        end)

        it("starts a payment timer with the given timeout", function()
            place({ { sku = "sku-a", qty = 1 } }, 45)
            local timers = e.ctx:pending_timers()
            assert.equal(1, #timers)
            assert.equal(45, timers[1].seconds)
            assert.same({ type = "payment_timeout" }, timers[1].msg)
        end)

        it("waits 30 s for payment by default", function()
            place({ { sku = "sku-a", qty = 1 } })
            assert.equal(30, e.ctx:pending_timers()[1].seconds)
        end)

        it("merges repeated SKUs into one reservation", function()
            place({ { sku = "sku-a", qty = 1 }, { sku = "sku-a", qty = 2 } })
            assert.equal(1, #e.ctx.asks)
            assert.equal(3, e.ctx.asks[1].msg.qty)
            assert.equal(2, available("sku-a"))
        end)

        it("rejects when a SKU is short and names it", function()
            local reply = place({ { sku = "sku-a", qty = 2 }, { sku = "sku-b", qty = 4 } })
            assert.same({ ok = false, state = "rejected", reason = "insufficient",
                          sku = "sku-b", available = 1 }, reply)
            assert.equal("rejected", state_of())
        end)

        it("releases what it reserved when rejected", function()
            place({ { sku = "sku-a", qty = 2 }, { sku = "sku-b", qty = 4 } })
            assert.same({ "sku-a" }, tells("release"))
            assert.equal(5, available("sku-a"))
            assert.equal(1, available("sku-b"))
        end)

        it("stops asking after the first refusal", function()
            place({ { sku = "sku-b", qty = 4 }, { sku = "sku-c", qty = 1 } })
            assert.equal(1, #e.ctx.asks)
            assert.equal(9, available("sku-c"))
        end)

        it("starts no payment timer when rejected", function()
            place({ { sku = "sku-b", qty = 4 } })
            assert.same({}, e.ctx:pending_timers())
        end)

        it("rejects with the error code when an ask fails", function()
            failing["sku-c"] = errors.new("timeout", "no reply in 2 s")
            local reply = place({ { sku = "sku-a", qty = 1 }, { sku = "sku-c", qty = 1 } })
            assert.same({ ok = false, state = "rejected", reason = "timeout",
                          sku = "sku-c" }, reply)
        end)

        it("also releases the SKU whose ask failed, as it may have reserved", function()
            failing["sku-c"] = errors.new("timeout", "no reply in 2 s")
            place({ { sku = "sku-a", qty = 1 }, { sku = "sku-c", qty = 1 } })
            assert.same({ "sku-a", "sku-c" }, tells("release"))
            assert.equal(5, available("sku-a"))
        end)

        it("raises on malformed items and stays new", function()
            assert.has_error(function() place({}) end)
            assert.has_error(function() place({ { sku = "sku-a", qty = 0 } }) end)
            assert.has_error(function() place({ { qty = 1 } }) end)
            assert.has_error(function() place({ { sku = "sku-a", qty = 1 } }, -5) end)
            assert.equal("new", state_of())
            assert.same({}, e.ctx.asks)
        end)
    end)

    describe("payment", function()
        before_each(function()
            place({ { sku = "sku-a", qty = 2 }, { sku = "sku-c", qty = 3 } }, 60)
        end)

        it("moves to paid and commits each reservation", function()
            assert.same({ ok = true, state = "paid" }, e:send({ type = "pay", amount = 42 }))
            assert.same({ "sku-a", "sku-c" }, tells("commit"))
            assert.equal(2, stock["sku-a"]:send({ type = "get" }).sold)
            assert.equal(3, stock["sku-c"]:send({ type = "get" }).sold)
        end)

        it("cancels the payment timer", function()
            local timer = e.ctx:pending_timers()[1]
            e:send({ type = "pay", amount = 42 })
            assert.equal("cancelled", timer.status)
            assert.same({}, e.ctx:pending_timers())
        end)

        it("ignores a payment_timeout that arrives after payment", function()
            e:send({ type = "pay", amount = 42 })
            assert.is_nil(e:send({ type = "payment_timeout" }))
            assert.equal("paid", state_of())
            assert.same({}, tells("release"))
        end)

        it("raises on a bad amount and stays reserved", function()
            assert.has_error(function() e:send({ type = "pay", amount = -1 }) end)
            assert.has_error(function() e:send({ type = "pay" }) end)
            assert.equal("reserved", state_of())
            assert.equal(1, #e.ctx:pending_timers())
        end)

        it("ships a paid order", function()
            e:send({ type = "pay", amount = 42 })
            assert.same({ ok = true, state = "shipped" }, e:send({ type = "ship" }))
            assert.equal("shipped", state_of())
        end)
    end)

    describe("expiry", function()
        it("expires a reserved order when the payment timer fires", function()
            place({ { sku = "sku-a", qty = 2 } }, 60)
            e:fire(e.ctx:pending_timers()[1].id)
            assert.equal("expired", state_of())
        end)

        it("releases the reservations of an expired order", function()
            place({ { sku = "sku-a", qty = 2 }, { sku = "sku-c", qty = 3 } }, 60)
            e:fire(e.ctx:pending_timers()[1].id)
            assert.same({ "sku-a", "sku-c" }, tells("release"))
            assert.equal(5, available("sku-a"))
            assert.equal(9, available("sku-c"))
        end)

        it("refuses payment after expiry", function()
            place({ { sku = "sku-a", qty = 2 } }, 60)
            e:fire(e.ctx:pending_timers()[1].id)
            local reply = e:send({ type = "pay", amount = 1 })
            assert.is_false(reply.ok)
            assert.equal("expired", reply.state)
            assert.same({}, tells("commit"))
        end)
    end)

    describe("cancel", function()
        it("cancels a new order without touching stock", function()
            assert.same({ ok = true, state = "cancelled" }, e:send({ type = "cancel" }))
            assert.same({}, e.ctx.tells)
        end)

        it("cancels a reserved order, releasing stock and the timer", function()
            place({ { sku = "sku-a", qty = 2 } }, 60)
            assert.same({ ok = true, state = "cancelled" }, e:send({ type = "cancel" }))
            assert.same({ "sku-a" }, tells("release"))
            assert.equal(5, available("sku-a"))
            assert.same({}, e.ctx:pending_timers())
        end)
    end)

    describe("invalid transitions", function()
        local function expect_invalid(msg, current)
            local reply = e:send(msg)
            assert.is_false(reply.ok)
            assert.equal(current, reply.state)
            assert.matches("^invalid transition", reply.reason)
            assert.equal(current, state_of())
        end

        it("refuses to pay or ship a new order", function()
            expect_invalid({ type = "pay", amount = 1 }, "new")
            expect_invalid({ type = "ship" }, "new")
        end)

        it("refuses to place an order twice", function()
            place({ { sku = "sku-a", qty = 1 } })
            expect_invalid({ type = "place", items = { { sku = "sku-a", qty = 1 } } },
                           "reserved")
            assert.equal(1, #e.ctx.asks)
        end)

        it("refuses to ship an unpaid order", function()
            place({ { sku = "sku-a", qty = 1 } })
            expect_invalid({ type = "ship" }, "reserved")
        end)

        it("refuses to cancel a paid or shipped order", function()
            place({ { sku = "sku-a", qty = 1 } })
            e:send({ type = "pay", amount = 1 })
            expect_invalid({ type = "cancel" }, "paid")
            e:send({ type = "ship" })
            expect_invalid({ type = "cancel" }, "shipped")
            assert.same({}, tells("release"))
        end)

        it("refuses anything but get once rejected", function()
            place({ { sku = "sku-b", qty = 9 } })
            expect_invalid({ type = "place", items = { { sku = "sku-a", qty = 1 } } },
                           "rejected")
            expect_invalid({ type = "cancel" }, "rejected")
        end)
    end)

    describe("get", function()
        it("returns state, items and a timed history", function()
            e.ctx:advance(5)
            place({ { sku = "sku-a", qty = 2 } }, 60)
            e.ctx:advance(10)
            e:send({ type = "pay", amount = 20 })
            assert.same({
                id = "o1",
                state = "paid",
                amount = 20,
                items = { { sku = "sku-a", qty = 2 } },
                history = {
                    { state = "new", at = 1000 },
                    { state = "reserved", at = 1005 },
                    { state = "paid", at = 1015 },
                },
            }, e:send({ type = "get" }))
        end)

        it("records the expiry at the time the timer fired", function()
            place({ { sku = "sku-a", qty = 2 } }, 60)
            e:fire(e.ctx:pending_timers()[1].id)
            local history = e:send({ type = "get" }).history
            assert.same({ state = "expired", at = 1060 }, history[#history])
        end)
    end)

    it("raises on an unknown message type", function()
        assert.has_error(function() e:send({ type = "refund" }) end,
                         "unknown message type: refund")
    end)
end)
