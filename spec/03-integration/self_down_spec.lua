-- A coordinator that is told to down its own address (force) stops
-- cleanly: exit code 0, no signal. The node closes from inside the
-- membership's drain (this node removed), which then goes on with the
-- actions after it (the coordinator is now another member): those must
-- not reach the closed router. The others serve on.

local helpers = require "helpers.node"

describe("a coordinator that downs itself", function()
    local c, n1, n2

    setup(function()
        c = helpers.cluster_up({
            size = 3,
            entities = { Counter = { module = "counter", shard_count = 8 } },
        })
        n1, n2 = c:node("n1"), c:node("n2")
    end)

    teardown(function()
        helpers.stop_all_checked()
    end)

    it("stops with exit code 0, and the others serve on", function()
        local views = c:wait_converged({ "n1", "n2", "n3" }, 10)
        assert.equal("n1", helpers.leader_name(views.n2))
        for i = 1, 20 do
            assert.equal(202, (n2:tell("Counter", "c" .. i,
                                       { type = "incr" })))
        end
        local status, _, raw = n1:http("POST", "/v1/down?force=1",
            helpers.json.encode(n1.listen),
            { headers = { ["X-Moonshard-Token"] = c.admin_token } })
        assert.equal(202, status, raw)
        assert.is_true(n1.proc:wait(10), "n1 kept running")
        assert.is_nil(n1.proc.signal, n1:log())
        assert.equal(0, n1.proc.code, n1:log())
        helpers.wait_until(function()
            local s, body = n2:ask("Counter", "after", { type = "get" }, 2)
            return s == 200 and body.value == 0
        end, 15, "n2 to serve on")
    end)
end)
