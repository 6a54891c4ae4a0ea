-- ctx:reply's short way (lua/moonshard/flat_reply.lua) on a real node: a
-- finalizer that replies, run by a GC step inside the reply's encode,
-- encoded its own reply into the shared buffer, and the reply sent was
-- both, invalid JSON ({"x":1}{"a":1,"k1":2}).

local helpers = require "helpers.node"

describe("ctx:reply with a finalizer that replies inside it", function()
    local n

    setup(function()
        n = helpers.start({
            entities = { Fin = { module = "finreply" } },
            -- LuaJIT's pause as the handler sets it
            settings = { gc_headroom_mb = 0 },
        })
    end)

    teardown(function()
        helpers.stop_all_checked()
        assert.same({}, helpers.leaks())
    end)

    it("sends the handler's reply, exactly", function()
        n:call("Fin", "keeper", { type = "keep" })
        for i = 1, 50 do
            local status, _, raw = n:ask("Fin", "replier",
                                         { type = "go", i = i })
            assert.equal(200, status, raw)
            local want1 = '{"a":1,"k' .. i .. '":2}'
            local want2 = '{"k' .. i .. '":2,"a":1}'
            assert.is_true(raw:find(want1, 1, true) ~= nil
                           or raw:find(want2, 1, true) ~= nil, raw)
            assert.is_nil(raw:find('"x"', 1, true), raw)
        end
        -- the finalizers did run inside the replies
        assert.equal(50, n:call("Fin", "counter", { type = "count" }).fins)
    end)
end)
