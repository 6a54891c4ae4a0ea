local fake_ctx = require "helpers.fake_ctx"
local register = require "register"

describe("entities/register", function()
    local e

    before_each(function()
        e = fake_ctx.entity(register, { type = "Register", id = "r1" })
    end)

    it("reads a missing key as no value at version 0", function()
        assert.same({ version = 0 }, e:send({ type = "get", key = "a" }))
    end)

    it("stores a value and returns it with its version", function()
        assert.same({ ok = true, version = 1 },
                    e:send({ type = "put", key = "a", value = { n = 1 } }))
        assert.same({ value = { n = 1 }, version = 1 },
                    e:send({ type = "get", key = "a" }))
    end)

    it("gives every write a higher version", function()
        local v1 = e:send({ type = "put", key = "a", value = 1 }).version
        local v2 = e:send({ type = "put", key = "b", value = 2 }).version
        local v3 = e:send({ type = "put", key = "a", value = 3 }).version
        assert.is_true(v1 < v2 and v2 < v3)
        assert.same({ value = 3, version = v3 }, e:send({ type = "get", key = "a" }))
    end)

    it("deletes a key and says whether it existed", function()
        e:send({ type = "put", key = "a", value = 1 })
        assert.same({ ok = true, deleted = true }, e:send({ type = "delete", key = "a" }))
        assert.same({ ok = true, deleted = false }, e:send({ type = "delete", key = "a" }))
        assert.same({ version = 0 }, e:send({ type = "get", key = "a" }))
    end)

    it("applies cas when the expected version matches", function()
        local v = e:send({ type = "put", key = "a", value = "old" }).version
        local reply = e:send({ type = "cas", key = "a", expect_version = v, value = "new" })
        assert.is_true(reply.ok)
        assert.is_true(reply.version > v)
        assert.same({ value = "new", version = reply.version },
                    e:send({ type = "get", key = "a" }))
    end)

    it("refuses cas on a version mismatch and reports the current version", function()
        local v = e:send({ type = "put", key = "a", value = "old" }).version
        e:send({ type = "put", key = "a", value = "newer" })
        local reply = e:send({ type = "cas", key = "a", expect_version = v, value = "x" })
        assert.same({ ok = false, version = v + 1 }, reply)
        assert.equal("newer", e:send({ type = "get", key = "a" }).value)
    end)

    it("creates a missing key with cas expect_version 0", function()
        assert.is_true(e:send({ type = "cas", key = "a", expect_version = 0, value = 1 }).ok)
        assert.is_false(e:send({ type = "cas", key = "a", expect_version = 0, value = 2 }).ok)
    end)

    it("never reuses a version after delete and re-create", function()
        local v = e:send({ type = "put", key = "a", value = 1 }).version
        e:send({ type = "delete", key = "a" })
        e:send({ type = "put", key = "a", value = 2 })
        assert.is_false(e:send({ type = "cas", key = "a", expect_version = v, value = 3 }).ok)
    end)

    it("lists keys sorted", function()
        for _, k in ipairs({ "pear", "apple", "fig" }) do
            e:send({ type = "put", key = k, value = true })
        end
        assert.same({ keys = { "apple", "fig", "pear" } }, e:send({ type = "keys" }))
    end)

    it("raises on a non-string key", function()
        for _, t in ipairs({ "get", "put", "delete", "cas" }) do
            assert.has_error(function()
                e:send({ type = t, key = 7, value = 1, expect_version = 0 })
            end)
        end
    end)

    it("raises on a put without a value", function()
        assert.has_error(function() e:send({ type = "put", key = "a" }) end)
        assert.same({ version = 0 }, e:send({ type = "get", key = "a" }))
    end)

    it("raises on an unknown message type", function()
        assert.has_error(function() e:send({ type = "clear" }) end,
                         "unknown message type: clear")
    end)
end)
