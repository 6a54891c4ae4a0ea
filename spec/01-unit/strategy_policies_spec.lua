local no_rebalance = require "moonshard.strategy.no_rebalance"
local rate_limited = require "moonshard.strategy.rate_limited"
local least_loaded = require "moonshard.strategy.least_loaded"
local weighted = require "moonshard.strategy.weighted_least_loaded"
local rendezvous = require "moonshard.strategy.rendezvous"
local role_aware = require "moonshard.strategy.role_aware"
local views = require "helpers.views"

-- A strategy whose rebalance proposes a fixed list.
local function proposing(list)
    return {
        id = "fixed",
        allocate = function(_, _, view)
            return view.members[1].name
        end,
        rebalance = function()
            return list
        end,
    }
end

local function skewed(counts, t)
    t = t or {}
    local members = views.members(#counts, t.overrides)
    local total = 0
    for _, c in ipairs(counts) do
        total = total + c
    end
    return views.view{ members = members, shard_count = total,
                       plan = views.plan_from_counts(members, counts),
                       in_progress = t.in_progress }
end

describe("policy no_rebalance", function()
    it("never proposes a move", function()
        local s = no_rebalance.new(least_loaded.new{ relative_limit = 1 })
        assert.same({}, s:rebalance(skewed({ 30, 0, 0 })))
        s = no_rebalance.new(rendezvous.new())
        assert.same({}, s:rebalance(skewed({ 30, 0, 0 })))
    end)

    it("allocates as its inner strategy", function()
        local inner = least_loaded.new()
        local s = no_rebalance.new(inner)
        local v = skewed({ 5, 1, 3 })
        for shard = 0, 8 do
            assert.equal(inner:allocate(shard, v), s:allocate(shard, v))
        end
        local name, err = s:allocate(0, views.view{ members = {} })
        assert.is_nil(name)
        assert.is_string(err)
    end)

    it("passes eligibility through", function()
        local s = no_rebalance.new(role_aware.new(least_loaded.new(),
                                                  { "backend" }))
        assert.is_true(s:eligible({ name = "a", roles = { backend = true } }))
        assert.is_false(s:eligible({ name = "b", roles = {} }))
        assert.is_true(no_rebalance.new(least_loaded.new()):eligible({}))
    end)

    it("has the id no_rebalance(INNER)", function()
        assert.equal("no_rebalance(rendezvous)",
                     no_rebalance.new(rendezvous.new()).id)
        assert.equal("no_rebalance(least_loaded{absolute_limit=0,"
                     .. "relative_limit=0.1})",
                     no_rebalance.new(least_loaded.new()).id)
    end)

    it("without an inner strategy is a policy to bind later", function()
        local p = no_rebalance.new()
        assert.equal("no_rebalance", p.id)
        assert.is_nil(p.allocate)
        local s = p:bind(rendezvous.new())
        assert.equal("no_rebalance(rendezvous)", s.id)
        assert.has_error(function() p:bind({}) end)
    end)

    it("rejects an inner that is not a strategy", function()
        local ok, err = pcall(no_rebalance.new, { id = "x" })
        assert.is_false(ok)
        assert.matches("bad 'inner' argument to no_rebalance", err, 1, true)
    end)
end)

describe("policy rate_limited", function()
    describe("new", function()
        it("has an id with its options and the inner id", function()
            local s = rate_limited.new(rendezvous.new(),
                                       { threshold = 1, max_concurrent = 4 })
            assert.equal("rate_limited{max_concurrent=4,threshold=1}"
                         .. "(rendezvous)", s.id)
            assert.equal("rate_limited{max_concurrent=3,threshold=1}"
                         .. "(rendezvous)", rate_limited.new(rendezvous.new()).id)
            assert.not_equal(s.id, rate_limited.new(rendezvous.new(),
                { threshold = 2, max_concurrent = 4 }).id)
        end)

        it("without an inner strategy is a policy to bind later", function()
            local p = rate_limited.new{ threshold = 1, max_concurrent = 4 }
            assert.equal("rate_limited{max_concurrent=4,threshold=1}", p.id)
            assert.is_nil(p.allocate)
            local s = p:bind(least_loaded.new())
            assert.equal("rate_limited{max_concurrent=4,threshold=1}"
                         .. "(least_loaded{absolute_limit=0,"
                         .. "relative_limit=0.1})", s.id)
            assert.equal(4, s.max_concurrent)
            assert.equal("rate_limited{max_concurrent=3,threshold=1}",
                         rate_limited.new().id)
        end)

        it("rejects bad options and a bad inner", function()
            local bad = {
                { { threshold = -1 }, "bad option 'threshold'" },
                { { threshold = "1" }, "bad option 'threshold'" },
                { { max_concurrent = 0 }, "bad option 'max_concurrent'" },
                { { max_concurrent = 1.5 }, "bad option 'max_concurrent'" },
                { { max = 1 }, "unknown option 'max' for rate_limited" },
            }
            for _, case in ipairs(bad) do
                local ok, err = pcall(rate_limited.new, case[1])
                assert.is_false(ok)
                assert.matches(case[2], err, 1, true)
                ok, err = pcall(rate_limited.new, least_loaded.new(), case[1])
                assert.is_false(ok)
                assert.matches(case[2], err, 1, true)
            end
            local ok, err = pcall(rate_limited.new, { id = "x" }, {})
            assert.is_false(ok)
            assert.matches("bad 'inner' argument to rate_limited", err, 1, true)
            ok = pcall(rate_limited.new, rate_limited.new(), {})
            assert.is_false(ok)
            ok = pcall(rate_limited.new, 3)
            assert.is_false(ok)
        end)
    end)

    describe("rebalance", function()
        it("passes the inner proposals while the spread exceeds threshold",
           function()
            local s = rate_limited.new(proposing({ 6, 2, 5 }),
                                       { threshold = 2, max_concurrent = 10 })
            assert.same({ 2, 5, 6 }, s:rebalance(skewed({ 5, 2 })))
            assert.same({}, s:rebalance(skewed({ 4, 2 })))
            assert.same({}, s:rebalance(skewed({ 3, 3 })))
        end)

        it("never lets more than max_concurrent be in progress", function()
            local s = rate_limited.new(proposing({ 0, 1, 2, 3, 4, 5, 6 }),
                                       { threshold = 0, max_concurrent = 4 })
            assert.same({ 0, 1, 2, 3 }, s:rebalance(skewed({ 10, 0 })))
            assert.same({ 0, 1 }, s:rebalance(skewed({ 10, 0 },
                { in_progress = { [8] = true, [9] = true } })))
            assert.same({}, s:rebalance(skewed({ 10, 0 }, { in_progress = {
                [6] = true, [7] = true, [8] = true, [9] = true } })))
        end)

        it("drops proposals that are already moving", function()
            local s = rate_limited.new(proposing({ 0, 1, 2, 3 }),
                                       { threshold = 0, max_concurrent = 3 })
            assert.same({ 0, 2 }, s:rebalance(skewed({ 10, 0 },
                { in_progress = { [1] = true } })))
        end)

        it("lets rendezvous fill a new member a few shards at a time",
           function()
            local r = rendezvous.new()
            local s = rate_limited.new(r, { threshold = 1, max_concurrent = 4 })
            local members = views.members(5)
            local v = views.fill(r, views.view{ members = members,
                                                shard_count = 1024 })
            v.members[6] = views.members(6)[6]
            local target = #r:rebalance(v)
            local moved = 0
            for _ = 1, 1000 do
                local moves = s:rebalance(v)
                if #moves == 0 then
                    break
                end
                assert.is_true(#moves <= 4)
                for _, shard in ipairs(moves) do
                    v.plan[shard] = r:allocate(shard, v)
                    assert.equal("n6", v.plan[shard])
                end
                moved = moved + #moves
            end
            -- It stops once n6 is within `threshold` of the least loaded
            -- member, or when rendezvous has nothing left to move.
            assert.is_true(moved <= target)
            assert.is_true(views.counts(v).n6 > 1024 / 6 * 0.5)
        end)

        it("measures load with the inner strategy's spread when it has one",
           function()
            local inner = weighted.new{ relative_limit = 1,
                                        weights = { n1 = 1, n2 = 3 } }
            local s = rate_limited.new(inner, { threshold = 1,
                                                max_concurrent = 100 })
            -- 10 / 30 is exactly the weighted share: nothing to do though
            -- raw counts differ by 20.
            assert.same({}, s:rebalance(skewed({ 10, 30 })))
            assert.equal(10, #s:rebalance(skewed({ 20, 20 })))
        end)

        it("counts only eligible members without a spread of the inner",
           function()
            local p = proposing({ 0 })
            p.eligible = function(_, m)
                return m.name ~= "n3"
            end
            local s = rate_limited.new(p, { threshold = 1 })
            -- n3 (0 shards) is not eligible: the spread is 5 - 5.
            assert.same({}, s:rebalance(skewed({ 5, 5, 0 })))
            assert.same({ 0 }, s:rebalance(skewed({ 7, 3, 0 })))
        end)

        it("proposes nothing while unstable", function()
            local s = rate_limited.new(proposing({ 0 }), { threshold = 0 })
            for _, o in ipairs({ { reachable = false }, { status = "joining" },
                                 { version = "0.9" } }) do
                assert.same({}, s:rebalance(skewed({ 9, 0 },
                                                   { overrides = { nil, o } })))
            end
        end)

        it("raises when the inner strategy answers something malformed",
           function()
            for _, bad in ipairs({ { 99 }, { -1 }, { 1.5 }, { "1" } }) do
                local s = rate_limited.new(proposing(bad), { threshold = 0 })
                local ok, err = pcall(s.rebalance, s, skewed({ 9, 0 }))
                assert.is_false(ok)
                assert.matches("fixed: rebalance returned", err, 1, true)
            end
            local s = rate_limited.new(proposing(nil), { threshold = 0 })
            assert.has_error(function() s:rebalance(skewed({ 9, 0 })) end)
        end)

        it("keeps least_loaded's own limits underneath", function()
            local s = rate_limited.new(least_loaded.new{ absolute_limit = 2 },
                                       { threshold = 1, max_concurrent = 10 })
            assert.equal(2, #s:rebalance(skewed({ 40, 0, 0, 0 })))
        end)
    end)

    it("allocates as its inner strategy", function()
        local inner = rendezvous.new()
        local s = rate_limited.new(inner, { threshold = 1 })
        local v = views.view{ members = views.members(4) }
        for shard = 0, 63 do
            assert.equal(inner:allocate(shard, v), s:allocate(shard, v))
        end
    end)
end)
