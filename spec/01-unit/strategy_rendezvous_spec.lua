local rendezvous = require "moonshard.strategy.rendezvous"
local partition = require "moonshard.partition"
local views = require "helpers.views"
local bit = require "bit"

-- The score as documented, computed independently of the module: MurmurHash3
-- fmix64 over partition's FNV-1a 64 of "name\0type\0shard".
local function reference_score(name, etype, shard)
    local h = partition.hash(name .. "\0" .. etype .. "\0" .. tostring(shard))
    h = bit.bxor(h, bit.rshift(h, 33)) * 0xff51afd7ed558ccdULL
    h = bit.bxor(h, bit.rshift(h, 33)) * 0xc4ceb9fe1a85ec53ULL
    return bit.bxor(h, bit.rshift(h, 33))
end

local function reference_winner(members, etype, shard)
    local best, best_score
    for _, m in ipairs(members) do
        local sc = reference_score(m.name, etype, shard)
        if not best or sc > best_score
            or (sc == best_score and m.name < best) then
            best, best_score = m.name, sc
        end
    end
    return best
end

-- A view with every shard owned by its winner among `members`.
local function settled(s, members, shards, etype)
    local v = views.view{ members = members, shard_count = shards,
                          entity_type = etype }
    return views.fill(s, v)
end

describe("strategy rendezvous", function()
    local s = rendezvous.new()

    describe("new", function()
        it("has the id 'rendezvous' and takes no options", function()
            assert.equal("rendezvous", s.id)
            assert.equal("rendezvous", rendezvous.new({}).id)
            local ok, err = pcall(rendezvous.new, { seed = 1 })
            assert.is_false(ok)
            assert.matches("unknown option 'seed' for rendezvous", err, 1, true)
        end)
    end)

    describe("score", function()
        it("is fmix64 of FNV-1a 64 over name, type and shard", function()
            for shard = 0, 300, 7 do
                for _, name in ipairs({ "n1", "n2", "node-b.example" }) do
                    assert.equal(reference_score(name, "Order", shard),
                                 rendezvous.score(name, "Order", shard))
                end
            end
        end)

        it("is pinned, so every node and every release agrees", function()
            assert.equal("75bb96c8e3877f82",
                         bit.tohex(rendezvous.score("n1", "Order", 1234)))
            assert.equal(bit.tohex(reference_score("n2", "Counter", 0)),
                         bit.tohex(rendezvous.score("n2", "Counter", 0)))
        end)

        it("depends on the entity type", function()
            local same = 0
            local members = views.members(5)
            for shard = 0, 255 do
                if reference_winner(members, "A", shard)
                    == reference_winner(members, "B", shard) then
                    same = same + 1
                end
            end
            assert.is_true(same < 100) -- about 256 / 5 by chance
        end)
    end)

    describe("allocate", function()
        it("gives each shard to the member with the highest score", function()
            local members = views.members(5)
            local v = views.view{ members = members, shard_count = 512 }
            for shard = 0, 511 do
                assert.equal(reference_winner(members, "Order", shard),
                             s:allocate(shard, v))
            end
        end)

        it("breaks an equal score by the lowest name", function()
            assert.is_true(rendezvous.beats(2ULL, "b", 1ULL, "a"))
            assert.is_false(rendezvous.beats(1ULL, "a", 2ULL, "b"))
            assert.is_true(rendezvous.beats(5ULL, "a", 5ULL, "b"))
            assert.is_false(rendezvous.beats(5ULL, "b", 5ULL, "a"))
            -- With every score made equal, the lowest name wins.
            local orig = rendezvous.beats
            rendezvous.beats = function(_, name, _, best_name)
                return orig(0ULL, name, 0ULL, best_name)
            end
            local ok, res = pcall(function()
                local members = views.members(3, {
                    { name = "m" }, { name = "c" }, { name = "x" } })
                local got = s:allocate(3, views.view{ members = members })
                return got
            end)
            rendezvous.beats = orig
            assert.is_true(ok, res)
            assert.equal("c", res)
        end)

        it("spreads shards evenly enough", function()
            local v = settled(s, views.members(5), 1024)
            for name, c in pairs(views.counts(v)) do
                assert.is_true(c > 150 and c < 260, name .. " has " .. c)
            end
        end)

        it("depends on names only: a restarted member wins the same shards",
           function()
            local members = views.members(5)
            local a = settled(s, members, 256)
            local again = views.members(5)
            again[3].uid = "uid-restarted"
            again[3].address = "127.0.0.1:9999"
            again[3].up_number = 17
            local b = settled(s, again, 256)
            assert.same(a.plan, b.plan)
        end)

        it("lets only up members compete while there are any", function()
            local members = views.members(3, { nil, { status = "leaving" },
                                               { status = "joining" } })
            local v = views.view{ members = members, shard_count = 64 }
            for shard = 0, 63 do
                assert.equal("n1", s:allocate(shard, v))
            end
        end)

        it("falls back to leaving members when none is up", function()
            local members = views.members(2, { { status = "leaving" },
                                               { status = "leaving" } })
            local v = views.view{ members = members, shard_count = 64 }
            for shard = 0, 63 do
                assert.equal(reference_winner(members, "Order", shard),
                             s:allocate(shard, v))
            end
        end)

        it("returns nil and a reason when no member can take shards", function()
            local members = views.members(1, { { status = "joining" } })
            local name, err = s:allocate(0, views.view{ members = members })
            assert.is_nil(name)
            assert.matches("no member can take shards", err, 1, true)
        end)

        it("raises without an entity type", function()
            assert.has_error(function()
                s:allocate(0, { shard_count = 4, members = views.members(2) })
            end)
        end)
    end)

    describe("minimal movement", function()
        local SHARDS = 1024

        it("adding a member moves only the shards it wins, and all of them",
           function()
            for n = 5, 8 do
                local members = views.members(n)
                local v = settled(s, members, SHARDS)
                local before = views.copy(v.plan)
                local newcomer = views.members(n + 1)[n + 1]
                v.members[#v.members + 1] = newcomer
                local moves = s:rebalance(v)
                local wins = 0
                for shard = 0, SHARDS - 1 do
                    if reference_winner(v.members, "Order", shard)
                        == newcomer.name then
                        wins = wins + 1
                    end
                end
                assert.equal(wins, #moves)
                assert.is_true(wins > SHARDS / (n + 1) * 0.6)
                views.round(s, v) -- the same proposals, applied
                local moved = 0
                for shard = 0, SHARDS - 1 do
                    if v.plan[shard] ~= before[shard] then
                        moved = moved + 1
                        assert.equal(newcomer.name, v.plan[shard])
                    end
                end
                assert.equal(wins, moved)
                assert.same({}, s:rebalance(v))
            end
        end)

        it("removing a member moves only the shards it owned", function()
            for n = 5, 8 do
                local members = views.members(n)
                local v = settled(s, members, SHARDS)
                local gone = members[3].name
                local before = views.copy(v.plan)
                table.remove(v.members, 3)
                -- The coordinator reallocates the orphans with allocate.
                for shard = 0, SHARDS - 1 do
                    if v.plan[shard] == gone then
                        v.plan[shard] = nil
                    end
                end
                views.fill(s, v)
                for shard = 0, SHARDS - 1 do
                    if before[shard] ~= gone then
                        assert.equal(before[shard], v.plan[shard])
                    else
                        assert.not_equal(gone, v.plan[shard])
                    end
                end
                assert.same({}, s:rebalance(v))
            end
        end)

        it("proposes nothing for shards owned by names not in the view",
           function()
            local v = settled(s, views.members(5), 256)
            table.remove(v.members, 2)
            assert.same({}, s:rebalance(v))
        end)
    end)

    describe("rebalance", function()
        it("proposes the shards whose owner is not their winner, ascending",
           function()
            local members = views.members(4)
            local v = settled(s, members, 128)
            v.plan[5], v.plan[90], v.plan[17] = "n1", "n1", "n1"
            local want = {}
            for _, shard in ipairs({ 5, 17, 90 }) do
                if reference_winner(members, "Order", shard) ~= "n1" then
                    want[#want + 1] = shard
                end
            end
            assert.same(want, s:rebalance(v))
        end)

        it("drains a leaving member", function()
            local members = views.members(4)
            local v = settled(s, members, 256)
            members[2].status = "leaving"
            local moves = s:rebalance(v)
            local owned = views.counts(v).n2
            assert.equal(owned, #moves)
            views.round(s, v)
            assert.equal(0, views.counts(v).n2)
        end)

        it("does not propose shards already moving", function()
            local members = views.members(4)
            local v = settled(s, members, 64)
            for shard = 0, 63 do
                v.plan[shard] = "n1"
            end
            v.in_progress = { [1] = true, [2] = true, [3] = true }
            local moves = s:rebalance(v)
            for _, shard in ipairs(moves) do
                assert.is_nil(v.in_progress[shard])
            end
            assert.is_true(#moves > 20)
        end)

        describe("proposes nothing", function()
            local function skewed(overrides, n)
                local members = views.members(n or 3, overrides)
                local v = views.view{ members = members, shard_count = 64 }
                for shard = 0, 63 do
                    v.plan[shard] = "n1"
                end
                return v
            end

            it("while members run different versions", function()
                assert.same({}, s:rebalance(skewed({ nil, { version = "2" } })))
            end)

            it("while a member is unreachable", function()
                assert.same({}, s:rebalance(skewed({ nil,
                    { reachable = false } })))
            end)

            it("while a member is joining", function()
                assert.same({}, s:rebalance(skewed({ nil, nil,
                    { status = "joining" } })))
            end)

            it("but does once the situation is over", function()
                assert.is_true(#s:rebalance(skewed()) > 20)
            end)
        end)
    end)

    describe("determinism", function()
        it("gives the same answers whatever the tables' insertion order",
           function()
            for seed = 1, 10 do
                local rnd = views.rng(seed)
                local n = rnd(2, 7)
                local members = views.members(n)
                local v = views.view{ members = members, shard_count = 200 }
                for shard = 0, 199 do
                    v.plan[shard] = members[rnd(1, n)].name
                end
                local want = s:rebalance(v)
                local w = views.scrambled(v, seed)
                assert.same(want, s:rebalance(w))
                for shard = 0, 199, 13 do
                    assert.equal(s:allocate(shard, v), s:allocate(shard, w))
                end
            end
        end)
    end)
end)
