-- The first node restarts while the rest of the cluster lives on. With the
-- default seeds (every node listed, the first first) it asks the others
-- before it would found a cluster, so it rejoins the one cluster: one
-- leader, one owner per shard, the entities' state where it was. (Before,
-- the first node was the only seed, and a restarted one founded a second
-- cluster beside the first, both serving the same ids; a review found it.)

local helpers = require "helpers.node"

describe("a restarted first node", function()
    local c, n1, n2, n3

    setup(function()
        c = helpers.cluster_up({
            size = 3,
            entities = { Counter = { module = "counter", shard_count = 16,
                                     idle_timeout = false } },
        })
        n1, n2, n3 = c:node("n1"), c:node("n2"), c:node("n3")
    end)

    teardown(function()
        helpers.stop_all_checked()
    end)

    local function names(v)
        local t = {}
        for _, m in ipairs(v.members) do
            t[#t + 1] = m.name .. ":" .. m.status
        end
        return table.concat(t, ",") .. " leader="
            .. tostring(helpers.leader_name(v))
    end

    it("rejoins the cluster instead of founding a second one", function()
        for i = 1, 10 do
            assert.equal(202, (n2:tell("Counter", "r" .. i,
                                       { type = "incr", by = i })))
        end
        helpers.wait_until(function()
            return n2:call("Counter", "r10", { type = "get" }).value == 10
        end, 5, "the tells")
        n1:kill()
        -- just killed, not yet unreachable: force
        local status, _, raw = n2:admin("down", { address = n1.listen,
                                                  force = true })
        assert.equal(202, status, raw)
        helpers.wait_until(function()
            return not helpers.member(n2:members(), "n1")
                and not helpers.member(n3:members(), "n1")
        end, 10, "n1 to be removed")
        c:start({ "n1" })
        helpers.wait_until(function()
            local v1, v2 = n1:members(), n2:members()
            local a, b = helpers.member(v2, "n1"), helpers.member(v1, "n2")
            return a and b and a.status == "up" and b.status == "up"
                and helpers.leader_name(v1) == helpers.leader_name(v2)
                and v1.converged and v2.converged,
                "n1 sees " .. names(v1) .. "; n2 sees " .. names(v2)
        end, 20, "one cluster again")
        -- one owner: the ids keep their state whichever node is asked
        for _, n in ipairs({ n1, n2, n3 }) do
            for i = 1, 10 do
                local r = n:call("Counter", "r" .. i, { type = "get" })
                if r.value ~= i then
                    -- a shard of the killed n1 started afresh: allowed,
                    -- but then every node must see that same entity
                    assert.equal(r.value, n2:call("Counter", "r" .. i,
                                                  { type = "get" }).value)
                end
            end
        end
        local o1 = n1:owner("Counter", "r3").owner
        assert.equal(o1, n2:owner("Counter", "r3").owner)
        assert.equal(o1, n3:owner("Counter", "r3").owner)
    end)
end)
