-- `down` of a member that is still reachable (issue 9): downing a live
-- member lets the coordinator give its shards to others while it still
-- runs their entities, so two nodes own the same entities (G1 breaks).
-- A node therefore refuses (409) to down a member it sees reachable,
-- itself included, unless the request says force (`{"force":true}`,
-- `?force=1`, CLI `--force`). Before, any down was applied at once, and
-- `POST /v1/down` with the node's own address stopped it.

local helpers = require "helpers.node"

describe("down", function()
    local c, n1, n2, n3, n4

    setup(function()
        c = helpers.cluster_up({
            size = 4,
            entities = { Counter = { module = "counter", shard_count = 8 } },
        })
        n1, n2, n3, n4 = c:node("n1"), c:node("n2"), c:node("n3"),
            c:node("n4")
    end)

    teardown(function()
        helpers.stop_all_checked()
    end)

    -- Every node of `list` lists member `name` Up.
    local function still_up(list, name)
        for _, n in ipairs(list) do
            local m = helpers.member(n:members(), name)
            assert.is_table(m, n.name .. " lost " .. name)
            assert.equal("up", m.status, n.name .. " sees " .. name)
        end
    end

    it("refuses a member that answers heartbeats, with 409 and why",
       function()
        local status, body, raw = n1:admin("down", n3.listen)
        assert.equal(409, status, raw)
        assert.equal("reachable", body.error.code)
        assert.matches("member is reachable", body.error.message, 1, true)
        assert.matches("force", body.error.message, 1, true)
        -- the object form without force is refused alike
        status = n1:admin("down", { address = n3.listen, force = false })
        assert.equal(409, status)
        helpers.sleep(0.3)
        assert.is_true(n3:alive())
        still_up({ n1, n2, n3, n4 }, "n3")
    end)

    it("refuses the node's own address, and the node keeps running",
       function()
        local status, body, raw = n2:admin("down", n2.listen)
        assert.equal(409, status, raw)
        assert.equal("reachable", body.error.code)
        helpers.sleep(0.5)
        assert.is_true(n2:alive())
        still_up({ n1, n2, n3, n4 }, "n2")
    end)

    it("answers 400 to a request it cannot read", function()
        for _, body in ipairs({
            '{"address":"' .. n3.listen .. '","force":"yes"}',
            '{"address":"' .. n3.listen .. '","extra":1}',
            n3.listen, -- not JSON
        }) do
            local status, decoded, raw = n1:http("POST", "/v1/down", body,
                { headers = { ["X-Moonshard-Token"] = c.admin_token } })
            assert.equal(400, status, body .. ": " .. raw)
            assert.equal("bad_request", decoded.error.code)
        end
        local status = n1:http("POST", "/v1/down?force=maybe",
                               helpers.json.encode(n3.listen),
                               { headers = { ["X-Moonshard-Token"] =
                                                 c.admin_token } })
        assert.equal(400, status)
        assert.is_true(n3:alive())
    end)

    it("from the CLI: refuses without --force (exit 1), downs with it",
       function()
        local code, out, err = helpers.moonshard("down", "--node", n1.address,
                                                 "--token", c.admin_token,
                                                 n4.listen)
        assert.equal(1, code, out .. err)
        assert.matches("reachable", out .. err, 1, true)
        assert.is_true(n4:alive())
        code, out, err = helpers.moonshard("down", "--node", n1.address,
                                           "--token", c.admin_token,
                                           "--force", n4.listen)
        assert.equal(0, code, out .. err)
        -- the downed node learns it through gossip and stops; the others
        -- remove it
        assert.is_true(n4.proc:wait(10), "n4 kept running")
        helpers.wait_until(function()
            for _, n in ipairs({ n1, n2, n3 }) do
                if helpers.member(n:members(), "n4") then
                    return false
                end
            end
            return true
        end, 10, "n4 to be removed")
    end)

    it("with ?force=1 downs the node's own address: it stops", function()
        local status, _, raw = n3:http("POST", "/v1/down?force=1",
            helpers.json.encode(n3.listen),
            { headers = { ["X-Moonshard-Token"] = c.admin_token } })
        assert.equal(202, status, raw)
        assert.is_true(n3.proc:wait(10), "n3 kept running")
    end)

    it("downs a member that is gone without force, once it is unreachable",
       function()
        -- n3 stopped above; whether its own Down reached the others or
        -- they see it unreachable after 5 s, a plain down succeeds
        local last
        helpers.wait_until(function()
            local status, _, raw = n1:admin("down", n3.listen)
            last = raw
            return status == 202 or status == 404
        end, 10, "a down of the stopped n3 to be accepted", 0.25)
        helpers.wait_until(function()
            return not helpers.member(n1:members(), "n3")
                and not helpers.member(n2:members(), "n3")
        end, 10, "n3 to be removed (last: " .. tostring(last) .. ")")
        c:wait_converged({ "n1", "n2" }, 10)
    end)
end)
