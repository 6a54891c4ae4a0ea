local least_loaded = require "moonshard.strategy.least_loaded"
local views = require "helpers.views"

local function view_of(counts, t)
    t = t or {}
    local members = t.members or views.members(#counts, t.overrides)
    local total = 0
    for _, c in ipairs(counts) do
        total = total + c
    end
    return views.view{
        members = members,
        shard_count = t.shard_count or math.max(total, 1),
        plan = views.plan_from_counts(members, counts),
        in_progress = t.in_progress,
    }
end

describe("strategy least_loaded", function()
    describe("new", function()
        it("has an id with its options, keys sorted, defaults filled", function()
            assert.equal("least_loaded{absolute_limit=0,relative_limit=0.1}",
                         least_loaded.new().id)
            assert.equal("least_loaded{absolute_limit=5,relative_limit=0.25}",
                         least_loaded.new{ relative_limit = 0.25,
                                           absolute_limit = 5 }.id)
        end)

        it("gives equal ids for equal options and different ids otherwise",
           function()
            assert.equal(least_loaded.new().id,
                         least_loaded.new{ relative_limit = 0.1 }.id)
            assert.not_equal(least_loaded.new().id,
                             least_loaded.new{ absolute_limit = 20 }.id)
            assert.not_equal(least_loaded.new{ relative_limit = 0.2 }.id,
                             least_loaded.new{ relative_limit = 0.3 }.id)
        end)

        it("rejects bad options with a message naming the option", function()
            local bad = {
                { { relative_limit = 0 }, "bad option 'relative_limit'" },
                { { relative_limit = 1.5 }, "bad option 'relative_limit'" },
                { { relative_limit = "0.1" }, "bad option 'relative_limit'" },
                { { absolute_limit = -1 }, "bad option 'absolute_limit'" },
                { { absolute_limit = 2.5 }, "bad option 'absolute_limit'" },
                { { relative = 0.1 }, "unknown option 'relative'" },
                { 5, "bad options for least_loaded" },
            }
            for _, case in ipairs(bad) do
                local ok, err = pcall(least_loaded.new, case[1])
                assert.is_false(ok)
                assert.matches(case[2], err, 1, true)
            end
        end)

        it("points an option error at the caller's line", function()
            local ok, err = pcall(function()
                local s = least_loaded.new{ relative_limit = 2 }
                return s
            end)
            assert.is_false(ok)
            assert.matches("strategy_least_loaded_spec.lua:%d+: bad option",
                           err)
        end)
    end)

    describe("allocate", function()
        local s = least_loaded.new()

        it("picks the member with the fewest shards", function()
            assert.equal("n3", s:allocate(9, view_of({ 4, 3, 2, 3 },
                                                      { shard_count = 16 })))
        end)

        it("prefers a member that is not leaving, whatever its load", function()
            local v = view_of({ 5, 0, 3 }, { shard_count = 10,
                overrides = { nil, { status = "leaving" } } })
            assert.equal("n3", s:allocate(9, v))
        end)

        it("uses a leaving member when it is the only one", function()
            local v = view_of({ 1 }, { shard_count = 4,
                overrides = { { status = "leaving" } } })
            assert.equal("n1", s:allocate(2, v))
        end)

        it("prefers a newer version, compared numerically", function()
            local v = view_of({ 1, 5, 0 }, { shard_count = 8, overrides = {
                { version = "1.9.0" }, { version = "1.10.0" },
                { version = "1.9" } } })
            assert.equal("n2", s:allocate(7, v))
        end)

        it("breaks a tie on load by age (lowest up_number)", function()
            local v = view_of({ 2, 2, 2 }, { shard_count = 8, overrides = {
                { up_number = 5 }, { up_number = 3 }, { up_number = 4 } } })
            assert.equal("n2", s:allocate(7, v))
        end)

        it("breaks a tie on age by the lowest address, port as a number",
           function()
            local v = view_of({ 1, 1 }, { shard_count = 4, overrides = {
                { up_number = 1, address = "127.0.0.1:10000" },
                { up_number = 1, address = "127.0.0.1:9000" } } })
            assert.equal("n2", s:allocate(3, v))
            v.members[2].address = "127.0.0.2:1"
            assert.equal("n1", s:allocate(3, v))
        end)

        it("never gives a shard to a joining member", function()
            local v = view_of({ 3, 0 }, { shard_count = 4,
                overrides = { nil, { status = "joining" } } })
            assert.equal("n1", s:allocate(3, v))
        end)

        it("returns nil and a reason when no member can take shards", function()
            local v = view_of({ 0 }, { shard_count = 4,
                overrides = { { status = "joining" } } })
            local name, err = s:allocate(0, v)
            assert.is_nil(name)
            assert.matches("no member can take shards of Order", err, 1, true)
            name = s:allocate(0, views.view{ members = {} })
            assert.is_nil(name)
        end)

        it("ignores shards owned by names that are not members", function()
            local members = views.members(2)
            local plan = { [0] = "gone", [1] = "gone", [2] = "gone",
                           [3] = "n2" }
            assert.equal("n1", s:allocate(4, views.view{
                members = members, shard_count = 8, plan = plan }))
        end)

        it("raises on a shard out of range and on a malformed view", function()
            local v = view_of({ 1, 1 })
            assert.has_error(function() s:allocate(2, v) end)
            assert.has_error(function() s:allocate(-1, v) end)
            assert.has_error(function() s:allocate(0.5, v) end)
            assert.has_error(function() s:allocate(0, nil) end)
            assert.has_error(function()
                s:allocate(0, { shard_count = 4, members = "n1" })
            end)
            assert.has_error(function()
                s:allocate(0, views.view{ members = {
                    { name = "a", status = "up" }, { name = "a", status = "up" },
                } })
            end)
        end)
    end)

    describe("rebalance", function()
        it("phase 1 takes the excess above optimal, lowest shards first",
           function()
            -- 20 shards on 4 members: optimal 5; n1 has 10 (shards 0..9).
            local s = least_loaded.new{ relative_limit = 1 }
            local v = view_of({ 10, 5, 3, 2 })
            assert.same({ 0, 1, 2, 3, 4 }, s:rebalance(v))
        end)

        it("phase 1 takes from every member above optimal", function()
            -- 12 shards, 3 members: optimal 4. n1 7 (0..6), n2 5 (7..11).
            local s = least_loaded.new{ relative_limit = 1 }
            assert.same({ 0, 1, 2, 7 }, s:rebalance(view_of({ 7, 5, 0 })))
        end)

        it("phase 2 evens out members two or more below optimal", function()
            -- 10 shards, 3 members: optimal 4, nobody above; n3 has 2 (two
            -- below), so one shard leaves a member at optimal.
            local s = least_loaded.new{ relative_limit = 1 }
            local v = view_of({ 4, 4, 2 })
            local moves = s:rebalance(v)
            assert.equal(1, #moves)
            assert.is_true(moves[1] == 0 or moves[1] == 4)
        end)

        it("phase 2 takes one shard from each member at optimal, at most as"
           .. " many as are missing", function()
            -- 25 shards, 5 members: optimal 5; n5 has 1 (3 missing below 4).
            local s = least_loaded.new{ relative_limit = 1 }
            local moves = s:rebalance(view_of({ 6, 6, 6, 6, 1 }))
            -- phase 1 first: each 6 is above optimal 5.
            assert.same({ 0, 6, 12, 18 }, moves)
            moves = s:rebalance(view_of({ 5, 5, 5, 5, 1 }, { shard_count = 21 }))
            -- 21 shards: optimal 5, n5 three below optimal - 1 = 4.
            assert.same({ 0, 5, 10 }, moves)
        end)

        it("does nothing when every member is within one of optimal", function()
            local s = least_loaded.new{ relative_limit = 1 }
            assert.same({}, s:rebalance(view_of({ 4, 4, 3 })))
            assert.same({}, s:rebalance(view_of({ 4, 3, 3 })))
            assert.same({}, s:rebalance(view_of({ 5, 5, 5 })))
            assert.same({}, s:rebalance(view_of({ 0, 0 }, { shard_count = 8 })))
        end)

        it("caps a round at floor(relative_limit * shards)", function()
            -- 100 shards, 0.1 -> 10.
            local s = least_loaded.new()
            local moves = s:rebalance(view_of({ 100, 0, 0, 0 }))
            assert.equal(10, #moves)
            assert.same({ 0, 1, 2, 3, 4, 5, 6, 7, 8, 9 }, moves)
        end)

        it("caps a round at absolute_limit when it is lower", function()
            local s = least_loaded.new{ absolute_limit = 3, relative_limit = 1 }
            assert.equal(3, #s:rebalance(view_of({ 100, 0, 0, 0 })))
        end)

        it("moves at least one shard a round", function()
            local s = least_loaded.new{ relative_limit = 0.01 }
            assert.same({ 0 }, s:rebalance(view_of({ 6, 0 })))
        end)

        it("caps phase 2 too", function()
            local s = least_loaded.new{ absolute_limit = 1, relative_limit = 1 }
            assert.equal(1, #s:rebalance(view_of({ 5, 5, 5, 5, 1 },
                                                { shard_count = 21 })))
        end)

        describe("proposes nothing", function()
            local s = least_loaded.new{ relative_limit = 1 }
            local skew = { 10, 0, 0 }

            it("while a move is in progress", function()
                assert.same({}, s:rebalance(view_of(skew,
                    { in_progress = { [3] = true } })))
            end)

            it("while members run different versions", function()
                assert.same({}, s:rebalance(view_of(skew, { overrides = {
                    nil, { version = "1.0.1" } } })))
            end)

            it("while a member is unreachable", function()
                assert.same({}, s:rebalance(view_of(skew, { overrides = {
                    nil, nil, { reachable = false } } })))
            end)

            it("while a member is joining", function()
                local members = views.members(4, { [4] = { status = "joining" } })
                assert.same({}, s:rebalance(view_of({ 10, 0, 0, 0 },
                    { members = members })))
            end)

            it("but does once the situation is over", function()
                assert.equal(6, #s:rebalance(view_of(skew)))
            end)
        end)

        it("counts 1.0 and 1.0.0 as the same version", function()
            local s = least_loaded.new{ relative_limit = 1 }
            assert.equal(6, #s:rebalance(view_of({ 10, 0, 0 }, { overrides = {
                { version = "1.0" }, { version = "1.0.0" }, { version = "1" },
            } })))
        end)

        it("ignores members that are down or removed", function()
            local s = least_loaded.new{ relative_limit = 1 }
            local members = views.members(3, { [3] = { status = "down",
                                                       reachable = false } })
            assert.same({ 0, 1, 2, 3 }, s:rebalance(view_of({ 10, 2, 0 },
                { members = members })))
        end)
    end)

    describe("convergence", function()
        -- Runs rounds from a skewed plan until none proposes a move; checks
        -- the cap on each round and the balance at the end.
        local function converge(s, n, shards, seed, relative, absolute)
            local rnd = views.rng(seed)
            local members = views.members(n)
            local v = views.view{ members = members, shard_count = shards }
            -- Skewed: most shards on a few members.
            for shard = 0, shards - 1 do
                local pick = rnd(1, 100) <= 70 and 1 or rnd(1, math.max(1, math.floor(n / 2)))
                v.plan[shard] = members[pick].name
            end
            local cap = math.max(1, math.min(math.floor(relative * shards),
                                             absolute > 0 and absolute
                                             or math.huge))
            local rounds = views.converge(s, v, function(moves)
                assert.is_true(#moves <= cap)
            end)
            assert.is_true(views.spread(v) <= 1,
                           "spread " .. views.spread(v) .. " after "
                           .. rounds .. " rounds")
            return rounds, v
        end

        it("balances skewed plans to within one shard", function()
            local seed = 1
            for _, n in ipairs({ 2, 3, 5, 7, 10 }) do
                for _, shards in ipairs({ 1, 7, 64, 100, 256, 1000 }) do
                    for _, lim in ipairs({ { 0.1, 0 }, { 1, 0 }, { 0.1, 3 },
                                           { 0.01, 0 } }) do
                        seed = seed + 1
                        converge(least_loaded.new{ relative_limit = lim[1],
                                                   absolute_limit = lim[2] },
                                 n, shards, seed, lim[1], lim[2])
                    end
                end
            end
        end)

        it("spreads a fresh member's share over several capped rounds",
           function()
            local s = least_loaded.new{ absolute_limit = 5, relative_limit = 1 }
            local members = views.members(4)
            local v = views.view{ members = members, shard_count = 120 }
            v.plan = views.plan_from_counts(members, { 40, 40, 40, 0 })
            local rounds = views.converge(s, v, function(moves)
                assert.is_true(#moves <= 5)
            end)
            assert.equal(6, rounds)
            assert.same({ n1 = 30, n2 = 30, n3 = 30, n4 = 30 }, views.counts(v))
        end)

        it("moves nothing more once balanced", function()
            local _, v = converge(least_loaded.new(), 5, 256, 99, 0.1, 0)
            assert.same({}, least_loaded.new():rebalance(v))
        end)
    end)

    describe("determinism", function()
        it("gives the same answers whatever the tables' insertion order",
           function()
            local s = least_loaded.new{ relative_limit = 0.5 }
            for seed = 1, 20 do
                local rnd = views.rng(seed)
                local n = rnd(2, 6)
                local members = views.members(n)
                for _, m in ipairs(members) do
                    m.up_number = rnd(1, 3) -- ties on age: address decides
                end
                local v = views.view{ members = members, shard_count = 50 }
                for shard = 0, 49 do
                    if rnd(1, 10) > 2 then
                        v.plan[shard] = members[rnd(1, n)].name
                    end
                end
                local want_r = s:rebalance(v)
                local want_a = {}
                for shard = 0, 49 do
                    want_a[shard] = s:allocate(shard, v)
                end
                for k = 1, 3 do
                    local w = views.scrambled(v, seed * 10 + k)
                    assert.same(want_r, s:rebalance(w))
                    for shard = 0, 49 do
                        assert.equal(want_a[shard], s:allocate(shard, w))
                    end
                end
            end
        end)

        it("does not change the view it is given", function()
            local s = least_loaded.new()
            local v = view_of({ 10, 0, 3 })
            local before = views.copy(v)
            s:rebalance(v)
            s:allocate(0, v)
            assert.same(before, v)
        end)
    end)
end)
