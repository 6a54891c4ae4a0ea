-- Faults in a real cluster (issue 3): a node killed with SIGKILL stays Up
-- but unreachable and its ids fail explicitly until an operator downs it,
-- then they reactivate elsewhere; a restarted node rejoins as a new
-- incarnation; the coordinator's death hands coordination to the next
-- oldest member without the plan generation going backwards.
--
-- One cluster of four nodes for the file; the tests run in order.

local helpers = require "helpers.node"

local SHARDS = 32
local IDS = 30

describe("cluster faults", function()
    local c
    local n4_uid -- n4's first incarnation
    local ids -- told in "a node killed with SIGKILL"

    local function live(except)
        local list = {}
        for _, n in ipairs(c.nodes) do
            if n:alive() and n ~= except then
                list[#list + 1] = n
            end
        end
        return list
    end

    -- The ids of `list` whose owner, as node `n` sees it, is `name`.
    local function owned_by(n, list, name)
        local out = {}
        for _, id in ipairs(list) do
            if n:owner("Counter", id).owner == name then
                out[#out + 1] = id
            end
        end
        return out
    end

    -- Waits until no node of `nodes` lists `name` in its members or in its
    -- Counter plan.
    local function wait_gone(nodes, name)
        helpers.wait_until(function()
            for _, n in ipairs(nodes) do
                if helpers.member(n:members(), name) then
                    return nil, n.name .. " still lists member " .. name
                end
                for _, s in ipairs(n:allocations("Counter").shards) do
                    if s.owner == name then
                        return nil, n.name .. " still lists shard "
                            .. s.shard .. " on " .. name
                    end
                end
            end
            return true
        end, 10, name .. " to be removed")
    end

    -- Kills node `n` (when it runs) and makes sure it is removed: downs it
    -- through `via` unless an earlier test did (which leaves `via` not
    -- listing it, or listing it down); waits until the live nodes no
    -- longer list it. Then a down of its address answers 404: a removed
    -- member is unknown, not downed twice.
    local function kill_and_down(n, via)
        if n:alive() then
            n:kill()
        end
        local m = helpers.member(via:members(), n.name)
        if m and m.status ~= "down" then
            -- just killed: gone for sure, so no need to wait the 5 s until
            -- it is unreachable (a down without force waits for that)
            local status, _, raw = via:admin("down", { address = n.listen,
                                                       force = true })
            assert.equal(202, status, raw)
        end
        wait_gone(live(), n.name)
        local status, body, raw = via:admin("down", { address = n.listen,
                                                      force = true })
        assert.equal(404, status, raw)
        assert.equal("not_found", body.error.code, raw)
    end

    -- Ids PREFIX1..PREFIXn, each told its index from node `n`; waits until
    -- `n` answers each with its value. Returns the ids.
    local function fill(n, prefix)
        local list = {}
        for i = 1, IDS do
            list[i] = prefix .. i
            assert.equal(202, (n:tell("Counter", list[i],
                                      { type = "incr", by = i })))
        end
        for i, id in ipairs(list) do
            helpers.wait_until(function()
                return n:call("Counter", id, { type = "get" }).value == i
            end, 5, id .. " to count " .. i)
        end
        return list
    end

    setup(function()
        c = helpers.cluster({
            size = 4,
            entities = { Counter = { module = "counter",
                                     shard_count = SHARDS } },
        })
        c:start()
        c:wait_converged(nil, 10)
    end)

    teardown(function()
        helpers.stop_all_checked()
        assert.same({}, helpers.leaks())
    end)

    describe("a node killed with SIGKILL", function()
        local victim, on_victim

        setup(function()
            -- the coordinator places shards on n4 only once it has n4's
            -- registration, which may come after the converged view:
            -- until then every id of the fill could go elsewhere
            c:node("n1"):wait_placed_on("Counter", "n4")
            ids = fill(c:node("n1"), "f")
            victim = c:node("n4")
            on_victim = owned_by(c:node("n1"), ids, victim.name)
            n4_uid = helpers.member(victim:members(), "n4").uid
        end)

        it("stays Up but becomes unreachable on every other node",
           function()
            assert.is_true(#on_victim > 0, "no id lives on n4")
            victim:kill()
            helpers.wait_until(function()
                for _, n in ipairs(live()) do
                    local m = helpers.member(n:members(), victim.name)
                    if not m or m.status ~= "up" or m.reachable ~= false then
                        return nil, n.name .. " sees n4 as "
                            .. helpers.json.encode(m)
                    end
                end
                return true
            end, 12, "n4 to be unreachable everywhere", 0.1)
        end)

        it("fails the asks to its ids explicitly (504 or 503) from every "
           .. "other node", function()
            for _, n in ipairs(live()) do
                for k = 1, math.min(#on_victim, 2) do
                    local id = on_victim[k]
                    local t0 = helpers.now()
                    local status, body, raw = n:ask("Counter", id,
                                                    { type = "get" }, 0.25)
                    assert.is_truthy(status == 504 or status == 503,
                                     n.name .. " " .. id .. ": " .. status
                                     .. " " .. raw)
                    assert.is_string(body.error.code)
                    assert.is_true(helpers.now() - t0 < 2)
                end
            end
        end)

        it("waits with at most 1,024 messages for one of its shards, "
           .. "then refuses with 503 overflow (G3)", function()
            local n = live()[1]
            local id = on_victim[1]
            local before = n:stats().route_overflows
            -- "get" as a tell changes nothing once delivered after down
            local accepted, refused = 0, 0
            for _ = 1, 1030 do
                local status, body = n:tell("Counter", id, { type = "get" })
                if status == 202 then
                    accepted = accepted + 1
                else
                    assert.equal(503, status)
                    assert.equal("overflow", body.error.code)
                    refused = refused + 1
                end
            end
            assert.is_true(accepted <= 1024, "accepted " .. accepted)
            assert.is_true(refused >= 6, "refused " .. refused)
            assert.equal(before + refused, n:stats().route_overflows)
        end)

        it("relocates nothing before down: its shards stay on it in every "
           .. "plan", function()
            for _, n in ipairs(live()) do
                for _, id in ipairs(on_victim) do
                    assert.equal(victim.name, n:owner("Counter", id).owner,
                                 n.name .. " " .. id)
                end
            end
        end)

        it("keeps the ids of the live nodes answering with their state",
           function()
            local dead = {}
            for _, id in ipairs(on_victim) do
                dead[id] = true
            end
            for _, n in ipairs(live()) do
                for i, id in ipairs(ids) do
                    if not dead[id] then
                        assert.same({ value = i },
                                    n:call("Counter", id, { type = "get" }),
                                    n.name .. " " .. id)
                    end
                end
            end
        end)

        it("is removed by down and its shards leave every plan", function()
            local status, _, raw = c:node("n2"):admin("down", victim.listen)
            assert.equal(202, status, raw)
            wait_gone(live(), victim.name)
            c:wait_converged(live(), 5)
        end)

        it("answers its ids again after down, from every node, with fresh "
           .. "state", function()
            for _, n in ipairs(live()) do
                for _, id in ipairs(on_victim) do
                    -- the 1,024 tells of the G3 test drain first: until
                    -- then a send may still be refused, explicitly
                    local a = helpers.wait_until(function()
                        local st, b, r = n:ask("Counter", id,
                                               { type = "get" }, 5)
                        if st == 503 and b.error.code == "overflow" then
                            return nil, r
                        end
                        return { st, b, r }
                    end, 10, "the waiting tells to drain")
                    local status, body, raw = a[1], a[2], a[3]
                    assert.equal(200, status, n.name .. " " .. id .. ": "
                                 .. raw)
                    assert.same({ value = 0 }, body, n.name .. " " .. id)
                end
            end
            local by_n1 = {}
            for _, id in ipairs(on_victim) do
                by_n1[id] = c:node("n1"):owner("Counter", id).owner
                assert.are_not.equal(victim.name, by_n1[id])
            end
            for _, n in ipairs(live()) do
                for _, id in ipairs(on_victim) do
                    assert.equal(by_n1[id], n:owner("Counter", id).owner)
                end
            end
        end)
    end)

    describe("a restarted node", function()
        it("rejoins as a new incarnation: same name and address, new uid, "
           .. "Up", function()
            local n = c:node("n4")
            kill_and_down(n, c:node("n1")) -- done above, unless that failed
            c:start({ "n4" })
            local views = c:wait_converged(nil, 10)
            local m = helpers.member(views.n1, "n4")
            assert.equal("up", m.status)
            assert.equal(n.listen, m.address)
            assert.equal(m.uid, views.n4.self)
            for _, v in pairs(views) do
                assert.equal(m.uid, helpers.member(v, "n4").uid)
            end
            assert.is_string(n4_uid)
            assert.are_not.equal(n4_uid, m.uid)
            -- the newest member: the highest up_number
            for _, other in ipairs(views.n1.members) do
                if other.name ~= "n4" then
                    assert.is_true(other.up_number < m.up_number)
                end
            end
        end)

        it("serves asks after it rejoined", function()
            local n4 = c:node("n4")
            for i, id in ipairs(ids) do
                local status, _, raw = n4:ask("Counter", id,
                                              { type = "get" }, 5)
                assert.equal(200, status, id .. " (" .. i .. "): " .. raw)
            end
        end)
    end)

    describe("the coordinator's death", function()
        local leader, before_gen, successor, on_leader
        local samples = {} -- [name] = generations seen, in order

        setup(function()
            ids = fill(c:node("n2"), "g")
            local views = c:wait_converged(nil, 10)
            leader = c:node(helpers.leader_name(views.n2))
            -- the next oldest member: the lowest up_number after the leader
            local best
            for _, m in ipairs(views.n2.members) do
                if m.name ~= leader.name
                    and (not best or m.up_number < best.up_number) then
                    best = m
                end
            end
            successor = best.name
            before_gen = 0
            for _, n in ipairs(live()) do
                local g = n:allocations("Counter").generation
                if g > before_gen then
                    before_gen = g
                end
            end
        end)

        it("hands coordination to the next oldest member, the plan "
           .. "generation never going backwards", function()
            assert.equal("n1", leader.name)
            on_leader = owned_by(c:node("n2"), ids, leader.name)
            assert.is_true(#on_leader > 0, "no id lived on the leader")
            leader:kill()
            local via = live()[1]
            -- just killed, not yet unreachable: force
            local status, _, raw = via:admin("down", { address = leader.listen,
                                                       force = true })
            assert.equal(202, status, raw)
            local survivors = live()
            helpers.wait_until(function()
                local ok, why = true, nil
                for _, n in ipairs(survivors) do
                    local gen = n:allocations("Counter").generation
                    local list = samples[n.name] or {}
                    samples[n.name] = list
                    list[#list + 1] = gen
                    local v = n:members()
                    if helpers.leader_name(v) ~= successor then
                        ok, why = false, n.name .. " sees leader "
                            .. tostring(helpers.leader_name(v))
                    elseif gen <= before_gen then
                        ok, why = false, n.name .. " serves generation "
                            .. gen .. " <= " .. before_gen
                    end
                    -- the members' view first, then an id of the dead
                    -- leader makes the new coordinator allocate its shard
                    n:ask("Counter", on_leader[1], { type = "get" }, 0.2)
                end
                return ok, why
            end, 10, "the successor to coordinate", 0.05)
            for name, list in pairs(samples) do
                for k = 2, #list do
                    assert.is_true(list[k] >= list[k - 1], name
                                   .. " went from generation " .. list[k - 1]
                                   .. " to " .. list[k])
                end
            end
        end)

        it("answers every id from every live node after it", function()
            local dead = {}
            for _, id in ipairs(on_leader) do
                dead[id] = true
            end
            for _, n in ipairs(live()) do
                for i, id in ipairs(ids) do
                    local status, body, raw = n:ask("Counter", id,
                                                    { type = "get" }, 5)
                    assert.equal(200, status, n.name .. " " .. id .. ": "
                                 .. raw)
                    -- ids of the dead leader start again at 0; the others
                    -- keep their state
                    assert.same({ value = dead[id] and 0 or i }, body,
                                n.name .. " " .. id)
                end
            end
        end)

        it("keeps the plan generation above the one before", function()
            for _, n in ipairs(live()) do
                assert.is_true(n:allocations("Counter").generation
                               > before_gen, n.name)
            end
        end)
    end)
end)
