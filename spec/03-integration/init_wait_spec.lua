-- An entity whose init waits in an ask (its state is not there yet: the
-- host keeps a placeholder for it, lua/moonshard/host.lua INITING) and a
-- stop that comes meanwhile: the stop waits for init, stopped() sees the
-- state init returned and a ctx that still acts, and the next message
-- activates the entity again.

local helpers = require "helpers.node"

describe("a stop that comes while init waits in an ask", function()
    local n

    setup(function()
        n = helpers.start({
            entities = {
                SlowInit = { module = "slowinit" },
                Sleeper = { module = "sleeper" },
            },
        })
    end)

    teardown(function()
        helpers.stop_all_checked()
        assert.same({}, helpers.leaks())
    end)

    it("passivates the entity after init returned, stopped() seeing the "
       .. "state and a live ctx", function()
        local before = n:stats().passivations
        assert.equal(202, (n:tell("SlowInit", "w-1", { type = "get" })))
        assert.equal(202, (n:stop_entity("SlowInit", "w-1")))
        local rec = helpers.wait_until(function()
            local r = n:call("SlowInit", "recorder", { type = "records" })
            return r["w-1"] and r
        end, 10, "stopped() of w-1 to report")
        assert.same({ slept = 0.3, id = "w-1" }, rec["w-1"])
        assert.is_true(n:stats().passivations > before)
        assert.same({ slept = 0.3, id = "w-1", ctx_id = "w-1" },
                    n:call("SlowInit", "w-1", { type = "get" }))
        assert.equal(0, n:stats().handler_errors)
    end)
end)
