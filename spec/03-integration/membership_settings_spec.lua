-- Membership settings of the config on real nodes (issue 15): failure
-- detection tuned shorter than the default sees a stopped node unreachable
-- sooner, and a node's weight and version from its config entry reach the
-- other members and the allocation strategy; `moonshard members` shows
-- them as a table (`--json`: the raw answer).

local helpers = require "helpers.node"

local json = helpers.json

-- The member `name` as node `n` sees it.
local function member(n, name)
    local view = n:members()
    return helpers.member(view, name), view
end

describe("tuned failure detection", function()
    local c

    teardown(function()
        helpers.stop_all_checked()
        assert.same({}, helpers.leaks())
    end)

    it("sees a stopped node unreachable within unreachable_after, well "
       .. "before the default 5 s", function()
        c = helpers.cluster_up({
            size = 2,
            entities = { Counter = { module = "counter" } },
            settings = { heartbeat_interval = 0.2, unreachable_after = 1,
                         gossip_interval = 0.2 },
        })
        local n1, n2 = c:node("n1"), c:node("n2")
        assert.is_true(member(n1, "n2").reachable)
        n2:signal(helpers.SIGSTOP)
        local t0 = helpers.now()
        helpers.wait_until(function()
            return member(n1, "n2").reachable == false
        end, 4, "n1 to see n2 unreachable")
        local took = helpers.now() - t0
        -- a heartbeat every 0.2 s, unreachable after 1 s without an
        -- answer: between about 0.8 s and 1.4 s (plus the polling); the
        -- default (1 s, 5 s) would take more than 4 s
        assert.is_true(took >= 0.6, "unreachable after " .. took .. " s")
        assert.is_true(took < 2.5, "unreachable after " .. took .. " s")
        -- the table of `moonshard members` says so too
        local code, out, err = helpers.moonshard("members", "--node",
                                                 n1.address)
        assert.equal(0, code, err)
        local row
        for l in out:gmatch("[^\n]+") do
            local name, rest = l:match("^%*?%s*(%S+)%s+(.*)$")
            if name == "n2" then row = rest end
        end
        assert.is_string(row, out)
        assert.equal(n2.listen, row:match("^(%S+)"))
        assert.matches("^%S+%s+up%s+NO%s", row)
        n2:signal(helpers.SIGCONT)
        helpers.wait_until(function()
            return member(n1, "n2").reachable == true
        end, 5, "n1 to see n2 reachable again")
    end)
end)

describe("a node's weight and version", function()
    local c

    -- Waits until the coordinator `n1` has n2's registration of its types:
    -- a shard of the Probe type placed on n2 says so, and n2 registered
    -- its other types in the same answer.
    local function registered(n1)
        n1:wait_placed_on("Probe", "n2", 20, "p")
    end

    setup(function()
        c = helpers.cluster_up({
            size = 2,
            entities = {
                Counter = {
                    module = "counter", shard_count = 16,
                    allocation = { __lua = "require(\"moonshard.strategy\")"
                                   .. ".weighted_least_loaded()" },
                },
                Probe = { module = "counter", shard_count = 64 },
            },
            node_fields = { n1 = { weight = 1 }, n2 = { weight = 3 } },
        })
        registered(c:node("n1"))
    end)

    -- Activates entities of `t` through `n` until every shard has an
    -- owner; returns { [owner name] = shards }.
    local function fill(n, t, shards)
        local i = 0
        helpers.wait_until(function()
            for _ = 1, shards do
                i = i + 1
                local status, _, raw = n:activate(t, "w" .. i)
                assert.is_true(status >= 200 and status < 300, raw)
            end
            for _, s in ipairs(n:allocations(t).shards) do
                if s.owner == json.null or s.owner == nil then
                    return nil, "shard " .. s.shard .. " has no owner"
                end
            end
            return true
        end, 20, "every shard to have an owner")
        local counts = {}
        for _, s in ipairs(n:allocations(t).shards) do
            counts[s.owner] = (counts[s.owner] or 0) + 1
        end
        return counts
    end

    teardown(function()
        helpers.stop_all_checked()
        assert.same({}, helpers.leaks())
    end)

    it("gossips each node's weight to the other", function()
        local binary = c:node("n1"):stats().version
        for _, n in ipairs(c.nodes) do
            local m1, view = member(n, "n1")
            local m2 = helpers.member(view, "n2")
            assert.equal(1, m1.weight)
            assert.equal(3, m2.weight)
            -- no version in the config: the binary's
            assert.equal(binary, m1.version)
            assert.equal(binary, m2.version)
        end
    end)

    it("gives the node of weight 3 about 3x the shards under "
       .. "weighted_least_loaded", function()
        local counts = fill(c:node("n1"), "Counter", 16)
        -- the strategy keeps each member within one shard of its ideal
        -- share: 16 * 1/4 = 4 and 16 * 3/4 = 12
        assert.is_true(math.abs((counts.n1 or 0) - 4) <= 1,
                       "n1 owns " .. tostring(counts.n1))
        assert.is_true(math.abs((counts.n2 or 0) - 12) <= 1,
                       "n2 owns " .. tostring(counts.n2))
    end)

    it("gossips each node's version, and least_loaded gives new shards "
       .. "to the newer one (a rolling upgrade)", function()
        local v = helpers.cluster_up({
            size = 2,
            entities = { Counter = { module = "counter", shard_count = 8 },
                         Probe = { module = "counter", shard_count = 64 } },
            node_fields = { n1 = { version = "1.4.2" },
                            n2 = { version = "1.10.0-rc1" } },
        })
        registered(v:node("n1"))
        for _, n in ipairs(v.nodes) do
            local m1, view = member(n, "n1")
            assert.equal("1.4.2", m1.version)
            assert.equal("1.10.0-rc1", helpers.member(view, "n2").version)
        end
        -- 1.10.0-rc1 is newer than 1.4.2 (numeric components)
        assert.same({ n2 = 8 }, fill(v:node("n1"), "Counter", 8))
    end)

    it("lists the members as a table, and as JSON with --json", function()
        local n1 = c:node("n1")
        local code, out, err = helpers.moonshard("members", "--node",
                                                 n1.address)
        assert.equal(0, code, err)
        local lines = {}
        for l in out:gmatch("[^\n]+") do lines[#lines + 1] = l end
        assert.equal("2 members in the view of n1, converged", lines[1])
        assert.matches("^%s*NAME%s+ADDRESS%s+STATUS%s+REACHABLE%s+ROLES%s+"
                       .. "VERSION%s+WEIGHT%s+UP$", lines[2])
        local view = n1:members()
        local rows = {}
        for i = 3, 4 do
            local mark, name, addr, status, reach, roles, version, weight,
                  up, rest = lines[i]:match("^(%*?)%s*(%S+)%s+(%S+)%s+(%S+)"
                      .. "%s+(%S+)%s+(%S+)%s+(%S+)%s+(%S+)%s+(%S+)%s*(.*)$")
            assert.is_string(name, lines[i])
            rows[name] = { mark = mark, addr = addr, status = status,
                           reach = reach, roles = roles, version = version,
                           weight = weight, up = up, rest = rest }
        end
        for _, m in ipairs(view.members) do
            local r = rows[m.name]
            assert.is_table(r, m.name)
            assert.equal(m.address, r.addr)
            assert.equal("up", r.status)
            assert.equal("yes", r.reach)
            assert.equal("-", r.roles)
            assert.equal(m.version, r.version)
            assert.equal(tostring(m.weight), r.weight)
            assert.equal(tostring(m.up_number), r.up)
            assert.equal(m.uid == view.coordinator and "*" or "", r.mark)
            assert.equal(m.uid == view.self and "(this node)" or "", r.rest)
        end
        assert.equal("* coordinator", lines[5])
        code, out, err = helpers.moonshard("members", "--json", "--node",
                                           n1.address)
        assert.equal(0, code, err)
        local raw = json.decode(out)
        assert.equal(view.self, raw.self)
        assert.equal(2, #raw.members)
    end)
end)
