-- The custom strategy of examples/custom_strategy, as a user would test it.
local pinned = dofile("examples/custom_strategy/pinned.lua")
local views = require "helpers.views"

describe("examples/custom_strategy pinned", function()
    local s = pinned.new{ members = { "n1", "n2", "n3" } }

    it("has an id with its members and its fallback", function()
        assert.equal("pinned{members={\"n1\",\"n2\",\"n3\"}}(least_loaded"
                     .. "{absolute_limit=0,relative_limit=0.1})", s.id)
        local ok, err = pcall(pinned.new, { members = {} })
        assert.is_false(ok)
        assert.matches("bad option 'members'", err, 1, true)
    end)

    it("pins shards round-robin onto the named members", function()
        local v = views.fill(s, views.view{ members = views.members(3),
                                            shard_count = 12 })
        for shard = 0, 11 do
            assert.equal("n" .. (shard % 3 + 1), v.plan[shard])
        end
    end)

    it("falls back to least_loaded while a pinned member is not up, and"
       .. " sends the shards home when it is back", function()
        local members = views.members(3, { nil, { status = "joining" } })
        local v = views.fill(s, views.view{ members = members,
                                            shard_count = 12 })
        assert.equal(0, views.counts(v).n2)
        assert.same({}, s:rebalance(v)) -- n2 joining: no voluntary moves
        members[2].status = "up"
        assert.same({ 1, 4, 7, 10 }, s:rebalance(v))
        views.round(s, v)
        assert.same({ n1 = 4, n2 = 4, n3 = 4 }, views.counts(v))
    end)
end)
