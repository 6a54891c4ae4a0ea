local fake_ctx = require "helpers.fake_ctx"
local inventory = require "inventory"

describe("entities/inventory", function()
    local e

    before_each(function()
        e = fake_ctx.entity(inventory, { type = "Inventory", id = "sku-1" })
        e:send({ type = "restock", qty = 10 })
    end)

    local function stock()
        return e:send({ type = "get" })
    end

    it("adds restocked units to what is available", function()
        assert.same({ ok = true, available = 15 }, e:send({ type = "restock", qty = 5 }))
        assert.same({ sku = "sku-1", available = 15, reserved = 0, sold = 0 }, stock())
    end)

    it("reserves units for an order", function()
        assert.same({ ok = true }, e:send({ type = "reserve", order = "o1", qty = 4 }))
        assert.same({ sku = "sku-1", available = 6, reserved = 4, sold = 0 }, stock())
    end)

    it("refuses a reservation larger than what is available", function()
        e:send({ type = "reserve", order = "o1", qty = 8 })
        assert.same({ ok = false, reason = "insufficient", available = 2 },
                    e:send({ type = "reserve", order = "o2", qty = 3 }))
        assert.equal(2, stock().available)
    end)

    it("treats a repeated reserve from one order as the same reservation", function()
        e:send({ type = "reserve", order = "o1", qty = 4 })
        assert.same({ ok = true }, e:send({ type = "reserve", order = "o1", qty = 4 }))
        assert.same({ sku = "sku-1", available = 6, reserved = 4, sold = 0 }, stock())
    end)

    it("returns an order's reservation on release", function()
        e:send({ type = "reserve", order = "o1", qty = 4 })
        e:send({ type = "reserve", order = "o2", qty = 1 })
        assert.same({ ok = true, released = 4 }, e:send({ type = "release", order = "o1" }))
        assert.same({ sku = "sku-1", available = 9, reserved = 1, sold = 0 }, stock())
    end)

    it("releases nothing for an order without a reservation", function()
        assert.same({ ok = true, released = 0 }, e:send({ type = "release", order = "o9" }))
        assert.equal(10, stock().available)
    end)

    it("turns a reservation into sold units on commit", function()
        e:send({ type = "reserve", order = "o1", qty = 3 })
        assert.same({ ok = true, committed = 3 }, e:send({ type = "commit", order = "o1" }))
        assert.same({ sku = "sku-1", available = 7, reserved = 0, sold = 3 }, stock())
    end)

    it("does not release committed units", function()
        e:send({ type = "reserve", order = "o1", qty = 3 })
        e:send({ type = "commit", order = "o1" })
        assert.same({ ok = true, released = 0 }, e:send({ type = "release", order = "o1" }))
        assert.equal(7, stock().available)
    end)

    it("refuses to commit without a reservation", function()
        assert.same({ ok = false, reason = "no reservation" },
                    e:send({ type = "commit", order = "o1" }))
        assert.equal(0, stock().sold)
    end)

    it("raises on a bad quantity or order id", function()
        assert.has_error(function() e:send({ type = "restock", qty = 0 }) end)
        assert.has_error(function() e:send({ type = "restock", qty = 1.5 }) end)
        assert.has_error(function() e:send({ type = "reserve", order = "o1", qty = -1 }) end)
        assert.has_error(function() e:send({ type = "reserve", qty = 1 }) end)
        assert.same({ sku = "sku-1", available = 10, reserved = 0, sold = 0 }, stock())
    end)

    it("raises on an unknown message type", function()
        assert.has_error(function() e:send({ type = "steal" }) end,
                         "unknown message type: steal")
    end)
end)
