local fake_ctx = require "helpers.fake_ctx"
local counter = require "counter"

describe("entities/counter", function()
    local e

    before_each(function()
        e = fake_ctx.entity(counter, { type = "Counter", id = "c1" })
    end)

    it("starts at 0", function()
        assert.same({ value = 0 }, e:send({ type = "get" }))
    end)

    it("increments by 1 without replying", function()
        assert.is_nil(e:send({ type = "incr" }))
        e:send({ type = "incr" })
        assert.same({ value = 2 }, e:send({ type = "get" }))
    end)

    it("increments by a given amount, negative included", function()
        e:send({ type = "incr", by = 5 })
        e:send({ type = "incr", by = -2 })
        assert.same({ value = 3 }, e:send({ type = "get" }))
    end)

    it("rejects a non-number 'by' and keeps its value", function()
        e:send({ type = "incr", by = 4 })
        assert.has_error(function() e:send({ type = "incr", by = "7" }) end)
        assert.same({ value = 4 }, e:send({ type = "get" }))
    end)

    it("resets to 0", function()
        e:send({ type = "incr", by = 9 })
        assert.same({ value = 0 }, e:send({ type = "reset" }))
        assert.same({ value = 0 }, e:send({ type = "get" }))
    end)

    it("asks to be passivated on stop", function()
        assert.is_false(e.ctx.stop_requested)
        assert.same({ ok = true }, e:send({ type = "stop" }))
        assert.is_true(e.ctx.stop_requested)
    end)

    it("raises on an unknown message type", function()
        assert.has_error(function() e:send({ type = "decr" }) end,
                         "unknown message type: decr")
    end)

    it("keeps no state between entities", function()
        local other = fake_ctx.entity(counter, { type = "Counter", id = "c2" })
        e:send({ type = "incr", by = 3 })
        assert.same({ value = 0 }, other:send({ type = "get" }))
    end)
end)
