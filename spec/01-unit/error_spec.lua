local errors = require "moonshard.error"

describe("moonshard.error", function()
    it("builds a plain table with code, message and fields", function()
        local e = errors.new("overflow", "shard 3 is full", { shard = 3 })
        assert.same({ code = "overflow", message = "shard 3 is full", shard = 3 },
                    setmetatable(e, nil))
    end)

    it("prints as 'code: message'", function()
        assert.equal("timeout: no reply in 2 s",
                     tostring(errors.new("timeout", "no reply in 2 s")))
    end)

    it("uses the code as message when none is given", function()
        assert.equal("cancelled", errors.new("cancelled").message)
    end)

    it("does not let fields override code or message", function()
        local e = errors.new("timeout", "late", { code = "x", message = "y" })
        assert.equal("timeout", e.code)
        assert.equal("late", e.message)
    end)

    it("tells error tables and codes apart", function()
        local e = errors.new("no_reply", "handler did not reply")
        assert.is_true(errors.is(e))
        assert.is_true(errors.is(e, "no_reply"))
        assert.is_false(errors.is(e, "timeout"))
        assert.is_false(errors.is("no_reply", "no_reply"))
        assert.is_false(errors.is({ message = "no code" }))
    end)

    it("restores the metatable on a table decoded from the wire", function()
        local decoded = { code = "unavailable", message = "no owner", shard = 1 }
        local e = errors.from(decoded)
        assert.equal(decoded, e)
        assert.equal("unavailable: no owner", tostring(e))
        assert.is_nil(errors.from({ message = "no code" }))
    end)

    it("rejects a missing or non-string code", function()
        assert.has_error(function() errors.new(nil, "x") end)
        assert.has_error(function() errors.new("", "x") end)
        assert.has_error(function() errors.new(42) end)
    end)

    it("lists every code the runtime uses", function()
        for _, code in ipairs({ "timeout", "handler_error", "no_reply",
                                "overflow", "unknown_type", "bad_json",
                                "not_object", "unavailable", "cancelled",
                                "ask_self", "too_large", "bad_timeout" }) do
            assert.equal(code, errors.codes[code])
        end
    end)
end)
