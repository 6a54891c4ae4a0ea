local role_aware = require "moonshard.strategy.role_aware"
local least_loaded = require "moonshard.strategy.least_loaded"
local rendezvous = require "moonshard.strategy.rendezvous"
local views = require "helpers.views"

-- n1, n3 and n5 are backends; n5 also has "eu"; n2 and n4 have no role.
local function cluster()
    return views.members(5, {
        { roles = { backend = true } }, { roles = {} },
        { roles = { backend = true } }, { roles = { frontend = true } },
        { roles = { backend = true, eu = true } },
    })
end

-- A strategy that records the names in the views it is given.
local function spy()
    local seen = {}
    local s = { id = "spy", seen = seen }
    function s.allocate(_, _, view)
        local names = {}
        for _, m in ipairs(view.members) do
            names[#names + 1] = m.name
        end
        seen[#seen + 1] = names
        return view.members[1] and view.members[1].name
    end
    function s.rebalance(self, view)
        self:allocate(0, view)
        return {}
    end
    return s
end

describe("strategy role_aware", function()
    describe("new", function()
        it("has an id with the sorted, deduplicated roles and the inner id",
           function()
            local s = role_aware.new(rendezvous.new(), { "eu", "backend", "eu" })
            assert.equal("role_aware{roles={\"backend\",\"eu\"}}(rendezvous)",
                         s.id)
            assert.equal(s.id, role_aware.new(rendezvous.new(),
                                              { "backend", "eu" }).id)
            assert.not_equal(s.id, role_aware.new(rendezvous.new(),
                                                  { "backend" }).id)
            assert.not_equal(s.id, role_aware.new(least_loaded.new(),
                                                  { "backend", "eu" }).id)
        end)

        it("rejects a missing inner strategy and bad roles", function()
            local ok, err = pcall(role_aware.new, nil, { "backend" })
            assert.is_false(ok)
            assert.matches("bad 'inner' argument to role_aware", err, 1, true)
            for _, roles in ipairs({ {}, "backend", { "" }, { 1 },
                                     { "a", x = "b" } }) do
                ok, err = pcall(role_aware.new, rendezvous.new(), roles)
                assert.is_false(ok)
                assert.matches("bad option 'roles'", err, 1, true)
            end
        end)
    end)

    describe("allocate", function()
        it("only considers members having every role", function()
            local inner = spy()
            local s = role_aware.new(inner, { "backend" })
            s:allocate(0, views.view{ members = cluster() })
            assert.same({ "n1", "n3", "n5" }, inner.seen[1])
            s = role_aware.new(inner, { "backend", "eu" })
            s:allocate(0, views.view{ members = cluster() })
            assert.same({ "n5" }, inner.seen[2])
        end)

        it("places shards with the inner strategy among those members",
           function()
            local s = role_aware.new(least_loaded.new(), { "backend" })
            local v = views.view{ members = cluster(), shard_count = 30 }
            views.fill(s, v)
            assert.same({ n1 = 10, n2 = 0, n3 = 10, n4 = 0, n5 = 10 },
                        views.counts(v))
            local r = role_aware.new(rendezvous.new(), { "backend" })
            local backends = views.view{ members = { cluster()[1], cluster()[3],
                                                     cluster()[5] } }
            for shard = 0, 63 do
                assert.equal(rendezvous.new():allocate(shard, backends),
                             r:allocate(shard, views.view{ members = cluster() }))
            end
        end)

        it("returns nil and names the roles when no member has them",
           function()
            local s = role_aware.new(least_loaded.new(), { "gpu", "backend" })
            local name, err = s:allocate(0, views.view{ members = cluster() })
            assert.is_nil(name)
            assert.equal("no member has roles backend, gpu", err)
        end)

        it("raises on a bad shard", function()
            local s = role_aware.new(least_loaded.new(), { "backend" })
            assert.has_error(function()
                s:allocate(64, views.view{ members = cluster() })
            end)
        end)
    end)

    describe("eligible", function()
        it("is true for members having every role", function()
            local s = role_aware.new(least_loaded.new(), { "backend", "eu" })
            local m = cluster()
            assert.is_false(s:eligible(m[1]))
            assert.is_false(s:eligible(m[2]))
            assert.is_true(s:eligible(m[5]))
            assert.is_false(s:eligible({ name = "x" }))
        end)

        it("accepts roles given as a list too", function()
            local s = role_aware.new(least_loaded.new(), { "backend", "eu" })
            assert.is_true(s:eligible({ name = "a", roles = { "eu", "backend" } }))
            assert.is_false(s:eligible({ name = "b", roles = { "eu" } }))
        end)

        it("also asks a nested role_aware", function()
            local s = role_aware.new(role_aware.new(least_loaded.new(),
                                                    { "eu" }), { "backend" })
            local m = cluster()
            assert.is_false(s:eligible(m[1]))
            assert.is_true(s:eligible(m[5]))
        end)
    end)

    describe("rebalance", function()
        it("balances among the members having the roles", function()
            local s = role_aware.new(least_loaded.new{ relative_limit = 1 },
                                     { "backend" })
            local members = cluster()
            local v = views.view{ members = members, shard_count = 30 }
            for shard = 0, 29 do
                v.plan[shard] = "n1"
            end
            views.converge(s, v)
            assert.same({ n1 = 10, n2 = 0, n3 = 10, n4 = 0, n5 = 10 },
                        views.counts(v))
        end)

        it("proposes nothing while any member, with the roles or not, is"
           .. " unreachable or joining or on another version", function()
            local s = role_aware.new(least_loaded.new{ relative_limit = 1 },
                                     { "backend" })
            for _, change in ipairs({ { reachable = false },
                                      { status = "joining" },
                                      { version = "2.0.0" } }) do
                local members = cluster()
                for k, val in pairs(change) do
                    members[2][k] = val -- n2 has no role
                end
                local v = views.view{ members = members, shard_count = 30 }
                for shard = 0, 29 do
                    v.plan[shard] = "n1"
                end
                assert.same({}, s:rebalance(v))
            end
        end)
    end)

    describe("determinism", function()
        it("does not depend on the insertion order of the roles sets",
           function()
            local s = role_aware.new(rendezvous.new(), { "eu", "backend" })
            local v = views.view{ members = cluster(), shard_count = 64 }
            for seed = 1, 5 do
                local w = views.scrambled(v, seed)
                for shard = 0, 63, 5 do
                    assert.equal(s:allocate(shard, v), s:allocate(shard, w))
                end
            end
        end)
    end)
end)
