local weighted = require "moonshard.strategy.weighted_least_loaded"
local least_loaded = require "moonshard.strategy.least_loaded"
local views = require "helpers.views"

-- Members with the given weights (as member.weight).
local function weighted_members(ws)
    local over = {}
    for i, w in ipairs(ws) do
        over[i] = { weight = w }
    end
    return views.members(#ws, over)
end

-- Largest |count - ideal share| over the members, ideal = S * w / W.
local function worst_deviation(v, weight_of)
    local counts = views.counts(v)
    local total, wsum = 0, 0
    for _, m in ipairs(v.members) do
        total = total + counts[m.name]
        wsum = wsum + weight_of(m)
    end
    local worst = 0
    for _, m in ipairs(v.members) do
        local d = math.abs(counts[m.name] - total * weight_of(m) / wsum)
        worst = math.max(worst, d)
    end
    return worst
end

local function member_weight(m)
    return m.weight
end

local WEIGHT_SETS = {
    { 1, 2 }, { 1, 1, 1, 10 }, { 3, 1, 2 }, { 0.5, 1.5, 2.25, 4 },
    { 1, 2, 3, 4, 5, 6, 7 }, { 100, 1 }, { 1, 1, 1, 1, 1 },
}

describe("strategy weighted_least_loaded", function()
    describe("new", function()
        it("has an id with its options and weights, keys sorted", function()
            assert.equal("weighted_least_loaded{absolute_limit=0,"
                         .. "relative_limit=0.1}", weighted.new().id)
            assert.equal("weighted_least_loaded{absolute_limit=0,"
                         .. "relative_limit=0.1,weights={a=1,b=2.5,"
                         .. "[\"node-3\"]=4}}",
                         weighted.new{ weights = { ["node-3"] = 4, b = 2.5,
                                                   a = 1 } }.id)
        end)

        it("gives different ids for different weights", function()
            assert.not_equal(weighted.new{ weights = { a = 1 } }.id,
                             weighted.new{ weights = { a = 2 } }.id)
            assert.equal(weighted.new{ weights = { a = 1, b = 2 } }.id,
                         weighted.new{ weights = { b = 2, a = 1 } }.id)
        end)

        it("rejects a zero, negative or non-number weight", function()
            for _, w in ipairs({ 0, -1, "2", 0 / 0, math.huge }) do
                local ok, err = pcall(weighted.new, { weights = { n1 = w } })
                assert.is_false(ok)
                assert.matches("bad option 'weights': weight of n1 must be a"
                               .. " positive number", err, 1, true)
            end
            local ok, err = pcall(weighted.new, { weights = 3 })
            assert.is_false(ok)
            assert.matches("bad option 'weights'", err, 1, true)
            ok, err = pcall(weighted.new, { weight = {} })
            assert.is_false(ok)
            assert.matches("unknown option 'weight'", err, 1, true)
        end)

        it("raises on a member with a zero or negative weight", function()
            local s = weighted.new()
            local v = views.view{ members = weighted_members({ 1, 0 }) }
            local ok, err = pcall(s.allocate, s, 0, v)
            assert.is_false(ok)
            assert.matches("configuration error: member n2 has weight 0",
                           err, 1, true)
            v.members[2].weight = -2
            assert.has_error(function() s:rebalance(v) end)
            -- A weight given in the options wins over the member's.
            local fixed = weighted.new{ weights = { n2 = 1 } }
            assert.is_string(fixed:allocate(0, v))
        end)
    end)

    describe("allocate", function()
        it("gives a shard to the member furthest below its share", function()
            local members = weighted_members({ 1, 3 })
            local v = views.view{ members = members, shard_count = 8,
                                  plan = views.plan_from_counts(members,
                                                                { 1, 2 }) }
            -- 4 shards after this one: shares 1 and 3.
            assert.equal("n2", weighted.new():allocate(7, v))
        end)

        it("takes weights from the options, then member.weight, then 1",
           function()
            local members = views.members(3)
            members[1].weight = nil
            members[2].weight = 4
            local v = views.view{ members = members, shard_count = 60 }
            views.fill(weighted.new(), v)
            assert.same({ n1 = 10, n2 = 40, n3 = 10 }, views.counts(v))
            v.plan = {}
            views.fill(weighted.new{ weights = { n1 = 4, n2 = 1 } }, v)
            assert.same({ n1 = 40, n2 = 10, n3 = 10 }, views.counts(v))
        end)

        it("keeps every member within one shard of its share while filling",
           function()
            for _, ws in ipairs(WEIGHT_SETS) do
                local s = weighted.new()
                local v = views.view{ members = weighted_members(ws),
                                      shard_count = 300 }
                for shard = 0, 299 do
                    v.plan[shard] = s:allocate(shard, v)
                    assert.is_true(worst_deviation(v, member_weight) < 1)
                end
            end
        end)

        it("keeps least_loaded's order: not leaving, newer version first",
           function()
            local members = weighted_members({ 1, 10, 1 })
            members[2].status = "leaving"
            members[3].version = "1.1.0"
            local v = views.view{ members = members, shard_count = 8 }
            assert.equal("n3", weighted.new():allocate(0, v))
        end)

        it("with equal weights answers as least_loaded does", function()
            local w, l = weighted.new{ relative_limit = 0.3 },
                         least_loaded.new{ relative_limit = 0.3 }
            for seed = 1, 30 do
                local rnd = views.rng(seed)
                local n = rnd(2, 6)
                local members = views.members(n)
                for _, m in ipairs(members) do
                    m.weight = 2
                end
                local v = views.view{ members = members, shard_count = 40 }
                for shard = 0, 39 do
                    if rnd(1, 10) > 3 then
                        v.plan[shard] = members[rnd(1, math.min(n, 2))].name
                    end
                end
                assert.same(l:rebalance(v), w:rebalance(v))
                for shard = 0, 39 do
                    assert.equal(l:allocate(shard, v), w:allocate(shard, v))
                end
            end
        end)
    end)

    describe("rebalance", function()
        it("converges skewed plans to within one shard of each share",
           function()
            local seed = 0
            for _, ws in ipairs(WEIGHT_SETS) do
                for _, shards in ipairs({ 10, 64, 257, 1000 }) do
                    seed = seed + 1
                    local rnd = views.rng(seed)
                    local s = weighted.new{ relative_limit = 0.2 }
                    local members = weighted_members(ws)
                    local v = views.view{ members = members,
                                          shard_count = shards }
                    for shard = 0, shards - 1 do
                        v.plan[shard] = members[rnd(1, 10) <= 8 and 1
                                                or rnd(1, #ws)].name
                    end
                    local cap = math.max(1, math.floor(0.2 * shards))
                    views.converge(s, v, function(moves)
                        assert.is_true(#moves <= cap)
                    end)
                    assert.is_true(worst_deviation(v, member_weight) <= 1)
                end
            end
        end)

        it("respects absolute_limit", function()
            local s = weighted.new{ absolute_limit = 2, relative_limit = 1 }
            local members = weighted_members({ 1, 1, 2 })
            local v = views.view{ members = members, shard_count = 40,
                                  plan = views.plan_from_counts(members,
                                                                { 40, 0, 0 }) }
            assert.equal(2, #s:rebalance(v))
        end)

        it("proposes nothing when balanced by weight", function()
            local members = weighted_members({ 1, 3 })
            local v = views.view{ members = members, shard_count = 40,
                                  plan = views.plan_from_counts(members,
                                                                { 10, 30 }) }
            assert.same({}, weighted.new():rebalance(v))
        end)

        it("proposes nothing while unstable or moving", function()
            local s = weighted.new{ relative_limit = 1 }
            local function skew(overrides, in_progress)
                local members = views.members(3, overrides)
                return views.view{ members = members, shard_count = 30,
                                   in_progress = in_progress,
                                   plan = views.plan_from_counts(members,
                                                                 { 30 }) }
            end
            assert.same({}, s:rebalance(skew(nil, { [0] = true })))
            assert.same({}, s:rebalance(skew{ nil, { version = "9" } }))
            assert.same({}, s:rebalance(skew{ nil, { reachable = false } }))
            assert.same({}, s:rebalance(skew{ nil, { status = "joining" } }))
            assert.equal(20, #s:rebalance(skew()))
        end)
    end)

    describe("spread", function()
        it("measures deviation from the shares, not raw counts", function()
            local members = weighted_members({ 1, 3 })
            local v = views.view{ members = members, shard_count = 40,
                                  plan = views.plan_from_counts(members,
                                                                { 10, 30 }) }
            assert.equal(0, weighted.new():spread(v))
            v.plan = views.plan_from_counts(members, { 20, 20 })
            assert.equal(20, weighted.new():spread(v))
        end)
    end)

    describe("determinism", function()
        it("gives the same answers whatever the tables' insertion order",
           function()
            local s = weighted.new{ relative_limit = 0.5,
                                    weights = { n1 = 0.7, n3 = 2.2 } }
            for seed = 1, 15 do
                local rnd = views.rng(seed)
                local members = weighted_members({ 1, 1.3, 1, 0.4, 3 })
                local v = views.view{ members = members, shard_count = 60 }
                for shard = 0, 59 do
                    if rnd(1, 10) > 2 then
                        v.plan[shard] = members[rnd(1, 5)].name
                    end
                end
                local w = views.scrambled(v, seed)
                assert.same(s:rebalance(v), s:rebalance(w))
                for shard = 0, 59, 3 do
                    assert.equal(s:allocate(shard, v), s:allocate(shard, w))
                end
            end
        end)
    end)
end)
