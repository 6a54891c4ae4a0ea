-- A ctx (an FFI struct since the compact entity records, its id read from
-- the dispatcher) misused on a real node: kept past its entity's life,
-- used by another entity, compared, keyed, printed; ctx:reply with a
-- value that cannot be encoded, above the size limit, twice, nested
-- deeper than json_max_depth.

local helpers = require "helpers.node"

local MAX_BYTES = 512 -- limits.max_message_bytes
local DEPTH = 6       -- limits.json_max_depth

describe("a ctx", function()
    local n

    setup(function()
        n = helpers.start({
            entities = {
                CtxA = { module = "ctxprobe" },
                CtxB = { module = "ctxprobe", shard_count = 7 },
            },
            limits = { max_message_bytes = MAX_BYTES,
                       json_max_depth = DEPTH },
        })
    end)

    teardown(function()
        helpers.stop_all_checked()
        assert.same({}, helpers.leaks())
    end)

    -- Stops CtxA `id` and waits until it has passivated.
    local function stop(id)
        local before = n:stats().passivations
        assert.same({ ok = true }, n:call("CtxA", id, { type = "stop" }))
        helpers.wait_until(function()
            return n:stats().passivations > before
        end, 5, id .. " to passivate")
    end

    describe("kept past its entity's passivation", function()
        it("has no id and refuses every method, even after a new entity "
           .. "took its entity's handle", function()
            n:call("CtxA", "gone-1", { type = "keep", key = "gone" })
            stop("gone-1")
            -- a new entity (the freed handle is reused first)
            local r = n:call("CtxA", "new-1", { type = "use", key = "gone" })
            assert.is_nil(r.id)
            assert.equal("CtxA", r.type)
            assert.is_false(r.same)
            for _, m in ipairs({ "reply", "after", "stop" }) do
                assert.matches("belongs to another entity", r[m], 1, true)
            end
            -- the new entity was not stopped by the kept ctx
            local again = n:call("CtxA", "new-1", { type = "describe" })
            assert.equal("new-1", again.id)
        end)

        it("has no id once its entity activated again", function()
            n:call("CtxA", "back-1", { type = "keep", key = "back" })
            stop("back-1")
            local r = n:call("CtxA", "back-1", { type = "use", key = "back" })
            assert.is_nil(r.id)
            assert.is_false(r.same) -- a new activation, a new ctx
        end)
    end)

    it("of a live entity, used by another entity, names its own entity "
       .. "and refuses to act", function()
        n:call("CtxB", "live-1", { type = "keep", key = "live" })
        local r = n:call("CtxA", "user-1", { type = "use", key = "live" })
        assert.equal("live-1", r.id)
        assert.equal("CtxB", r.type)
        for _, m in ipairs({ "reply", "after", "stop" }) do
            assert.matches("belongs to another entity", r[m], 1, true)
        end
        -- live-1 still answers, as itself
        assert.equal("live-1",
                     n:call("CtxB", "live-1", { type = "describe" }).id)
    end)

    it("knows its type, node, id and shard in each type", function()
        for _, t in ipairs({ "CtxA", "CtxB" }) do
            local r = n:call(t, "desc-" .. t, { type = "describe" })
            assert.equal("desc-" .. t, r.id)
            assert.equal(t, r.type)
            assert.equal("n1", r.node)
            assert.is_number(r.shard)
            assert.equal("ctx: " .. t .. " desc-" .. t, r.str)
            assert.is_true(r.eq)
            assert.equal("found", r.key)
            assert.is_true(r.nope)
        end
        local b = n:call("CtxB", "desc-CtxB", { type = "describe" })
        assert.is_true(b.shard >= 0 and b.shard < 7)
    end)

    it("kept in its entity's own state acts for its entity in later "
       .. "messages (each message has a ctx of its own)", function()
        n:call("CtxA", "hold-1", { type = "hold" })
        for _ = 1, 3 do
            assert.same({ same = false, id = "hold-1" },
                        n:call("CtxA", "hold-1", { type = "held" }))
        end
    end)

    it("kept in its entity's state refuses to act once the entity was "
       .. "passivated with mail waiting and activated again on the same "
       .. "record", function()
        -- the stop and a message behind it in one go: the record stays
        -- (mail waits), the next activation must not take the old ctx
        n:call("CtxA", "again-1", { type = "keep", key = "again" })
        n:stop_entity("CtxA", "again-1")
        local r = n:call("CtxA", "again-1", { type = "use", key = "again" })
        assert.is_nil(r.id)
        for _, m in ipairs({ "reply", "after", "stop" }) do
            assert.matches("belongs to another entity", r[m], 1, true)
        end
    end)

    describe("ctx:reply", function()
        it("raises the encoder's error for a value it cannot write, and "
           .. "the failed reply does not count", function()
            local r = n:call("CtxA", "bad-1", { type = "bad_reply" })
            assert.matches("Cannot serialise function", r.err, 1, true)
        end)

        it("raises above max_message_bytes, and a smaller reply follows",
           function()
            local r = n:call("CtxA", "big-1", { type = "big",
                                                bytes = MAX_BYTES + 1 })
            assert.matches("above the message size limit", r.err, 1, true)
        end)

        it("raises when called twice for one message", function()
            assert.same({ first = true },
                        n:call("CtxA", "twice-1", { type = "twice" }))
            local r = n:call("CtxA", "twice-1", { type = "last" })
            assert.matches("called twice", r.err, 1, true)
        end)

        it("writes a reply nested json_max_depth deep", function()
            local status, body, raw = n:ask("CtxA", "deep-1",
                                            { type = "deep", depth = DEPTH })
            assert.equal(200, status, raw)
            local d, v = 0, body
            while type(v) == "table" do
                d = d + 1
                v = v[1]
            end
            assert.equal(DEPTH, d)
        end)

        it("refuses a reply nested deeper than json_max_depth", function()
            local status, body, raw = n:ask("CtxA", "deep-2",
                                            { type = "deep",
                                              depth = DEPTH + 1 })
            assert.equal(500, status, raw)
            assert.equal("handler_error", body.error.code)
            assert.matches("excessive nesting", body.error.message, 1, true)
        end)
    end)
end)
