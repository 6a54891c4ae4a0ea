-- A real cluster (issue 3): nodes of one config, each its own process on
-- 127.0.0.1, converge; every entity id answers from every node and lives
-- on exactly one of them; a node that joins later receives new shards; one
-- sender's messages keep their order while a shard is allocated (G2); a
-- node told to leave exits and its ids answer from the others; the admin
-- endpoints need the token.
--
-- One cluster for the file: n1..n3 start in setup, n4 (in the same config)
-- joins later. The tests run in order and build on each other's cluster.

local helpers = require "helpers.node"

local format = string.format

local SHARDS = 32
local IDS = 30

describe("a cluster", function()
    local c, n1, n2, n3, n4

    -- Ids k1..kIDS, told from n1 in "answers every id from every node".
    local ids = {}
    for i = 1, IDS do
        ids[i] = "k" .. i
    end
    -- Counter ids activated until a shard was placed on n2 and on n3
    local placed = {}

    -- The owner (name or nil) of every id in `list` as node `n` sees it.
    local function owners(n, list)
        local map = {}
        for _, id in ipairs(list) do
            local o = n:owner("Counter", id)
            map[id] = o.owner ~= helpers.json.null and o.owner or nil
        end
        return map
    end

    -- Waits until every node of `list` serves the same Counter plan;
    -- returns it.
    local function same_plan(list)
        return helpers.wait_until(function()
            local first, first_name
            for _, n in ipairs(list) do
                local a = n:allocations("Counter")
                local text = helpers.json.encode(a.shards)
                if first and text ~= first then
                    return nil, n.name .. "'s plan differs from "
                        .. first_name .. "'s"
                end
                first, first_name = text, n.name
            end
            return list[1]:allocations("Counter")
        end, 5, "the nodes to serve one plan")
    end

    -- The number of shards owned by `name` in allocations `a`.
    local function shards_of(a, name)
        local count = 0
        for _, s in ipairs(a.shards) do
            if s.owner == name then
                count = count + 1
            end
        end
        return count
    end

    setup(function()
        c = helpers.cluster({
            size = 4,
            entities = {
                Counter = { module = "counter", shard_count = SHARDS },
                -- for "order": fresh shards, allocated as the test goes
                Tally = { module = "counter", shard_count = SHARDS },
            },
        })
        n1, n2, n3, n4 = c:node("n1"), c:node("n2"), c:node("n3"),
            c:node("n4")
        c:start({ "n1", "n2", "n3" })
    end)

    teardown(function()
        helpers.stop_all_checked()
        assert.same({}, helpers.leaks())
    end)

    describe("of three nodes", function()
        it("converges: every node lists the three members Up under one "
           .. "leader", function()
            local views = c:wait_converged({ "n1", "n2", "n3" }, 10)
            for _, name in ipairs({ "n1", "n2", "n3" }) do
                local v = views[name]
                assert.is_true(v.converged)
                assert.equal(3, #v.members)
                assert.equal(views.n1.leader, v.leader)
                for _, m in ipairs(v.members) do
                    assert.equal("up", m.status)
                    assert.is_true(m.reachable)
                    assert.equal(c:node(m.name).listen, m.address)
                end
            end
            -- the first node is the seed that founded the cluster: the
            -- oldest member, so the coordinator
            assert.equal("n1", helpers.leader_name(views.n1))
            assert.equal(1, helpers.member(views.n1, "n1").up_number)
        end)

        it("answers every id from every node with the value told on one "
           .. "node", function()
            -- the coordinator places shards on a member only once it has
            -- its registration, which may come after the converged view:
            -- until then the ids below could all go to n1 (and none live
            -- on n3 when it leaves)
            for _, name in ipairs({ "n2", "n3" }) do
                local list = n1:wait_placed_on("Counter", name, nil,
                                               "placed-" .. name .. "-")
                for _, id in ipairs(list) do
                    placed[#placed + 1] = id
                end
            end
            for i, id in ipairs(ids) do
                assert.equal(202, (n1:tell("Counter", id,
                                           { type = "incr", by = i })))
            end
            for i, id in ipairs(ids) do
                helpers.wait_until(function()
                    return n1:call("Counter", id, { type = "get" }).value
                        == i
                end, 5, id .. " to count " .. i)
            end
            for _, n in ipairs({ n2, n3 }) do
                for i, id in ipairs(ids) do
                    assert.same({ value = i }, n:call("Counter", id,
                                                      { type = "get" }),
                                n.name .. " " .. id)
                end
            end
        end)

        it("places every id on exactly one node: owner agrees on every "
           .. "node", function()
            local by_n1 = owners(n1, ids)
            for _, id in ipairs(ids) do
                assert.is_string(by_n1[id], id .. " has no owner")
                assert.is_truthy(({ n1 = 1, n2 = 1, n3 = 1 })[by_n1[id]])
            end
            for _, n in ipairs({ n2, n3 }) do
                assert.same(by_n1, owners(n, ids), n.name)
            end
        end)

        it("hosts each id on its owner only: active_entities per node "
           .. "counts the ids it owns", function()
            local all = {}
            for _, list in ipairs({ ids, placed }) do
                for _, id in ipairs(list) do all[#all + 1] = id end
            end
            local by_n1 = owners(n1, all)
            local total = 0
            for _, n in ipairs({ n1, n2, n3 }) do
                local mine = 0
                for _, id in ipairs(all) do
                    if by_n1[id] == n.name then
                        mine = mine + 1
                    end
                end
                local active = n:stats().active_entities
                assert.equal(mine, active, n.name)
                total = total + active
            end
            assert.equal(IDS + #placed, total)
        end)

        it("reports owned_shards per node as the allocations list them",
           function()
            local a = same_plan({ n1, n2, n3 })
            assert.equal(SHARDS, a.shard_count)
            assert.equal(SHARDS, #a.shards)
            local assigned = 0
            for _, s in ipairs(a.shards) do
                if s.owner ~= helpers.json.null then
                    assigned = assigned + 1
                end
            end
            assert.is_true(assigned > 0)
            local sum = 0
            for _, n in ipairs({ n1, n2, n3 }) do
                local owned = n:stats().owned_shards
                assert.equal(shards_of(a, n.name), owned, n.name)
                sum = sum + owned
            end
            assert.equal(assigned, sum)
        end)

        it("answers activate with created=true once, then created=false "
           .. "from every node", function()
            local status, body, raw = n2:activate("Counter", "fresh-1")
            assert.equal(200, status, raw)
            assert.same({ created = true }, body)
            for _, n in ipairs({ n1, n2, n3 }) do
                status, body, raw = n:activate("Counter", "fresh-1")
                assert.equal(200, status, raw)
                assert.same({ created = false }, body, n.name)
            end
            assert.same({ value = 0 }, n3:call("Counter", "fresh-1",
                                               { type = "get" }))
        end)
    end)

    describe("admin endpoints", function()
        it("answer 403 to leave and down without the admin token, or with "
           .. "a wrong one", function()
            for _, token in ipairs({ false, "wrong-token" }) do
                local status, body, raw = n3:admin("leave", n3.listen, token)
                assert.equal(403, status, raw)
                assert.equal("forbidden", body.error.code)
                status, body, raw = n1:admin("down", n3.listen, token)
                assert.equal(403, status, raw)
                assert.equal("forbidden", body.error.code)
            end
            -- nothing changed: n3 still runs and is Up everywhere
            helpers.sleep(0.3)
            assert.is_true(n3:alive())
            c:wait_converged({ "n1", "n2", "n3" }, 1)
        end)

        it("answer 404 to down of an address no member has", function()
            local status, body, raw = n2:admin("down", "127.0.0.1:1")
            assert.equal(404, status, raw)
            assert.equal("not_found", body.error.code)
            c:wait_converged({ "n1", "n2", "n3" }, 1)
        end)
    end)

    describe("a node that joins later", function()
        it("becomes Up on every node", function()
            c:start({ "n4" })
            local views = c:wait_converged({ "n1", "n2", "n3", "n4" }, 10)
            assert.equal("n1", helpers.leader_name(views.n4))
            assert.equal(4, helpers.member(views.n1, "n4").up_number)
        end)

        it("receives new shards: an unassigned shard is allocated to it",
           function()
            -- not before the coordinator has n4's registration, which may
            -- come after the converged view (until then new shards go to
            -- the others): it places one shard there, and n4 still owns
            -- the fewest
            n1:wait_placed_on("Counter", "n4", nil, "placed-n4-")
            -- ids whose shards no node owns yet
            local fresh, seen = {}, {}
            for i = 1, 400 do
                local o = n1:owner("Counter", "new-" .. i)
                if o.owner == helpers.json.null and not seen[o.shard] then
                    seen[o.shard] = true
                    fresh[#fresh + 1] = o.id
                    if #fresh == 4 then
                        break
                    end
                end
            end
            assert.is_true(#fresh > 0, "no unassigned shard left")
            for _, id in ipairs(fresh) do
                n1:tell("Counter", id, { type = "incr", by = 7 })
                helpers.wait_until(function()
                    return n1:call("Counter", id, { type = "get" }).value
                        == 7
                end, 5, id .. " to count 7")
            end
            local by_n1 = owners(n1, fresh)
            local on_n4 = {}
            for _, id in ipairs(fresh) do
                if by_n1[id] == "n4" then
                    on_n4[#on_n4 + 1] = id
                end
            end
            -- least_loaded: n4 owns nothing, so it gets the first one
            assert.is_true(#on_n4 > 0, "owners: "
                           .. helpers.json.encode(by_n1))
            local a = same_plan({ n1, n2, n3, n4 })
            assert.equal(shards_of(a, "n4"), n4:stats().owned_shards)
            for _, id in ipairs(on_n4) do
                assert.same({ value = 7 }, n4:call("Counter", id,
                                                   { type = "get" }))
                assert.same({ value = 7 }, n2:call("Counter", id,
                                                   { type = "get" }))
            end
        end)
    end)

    describe("order", function()
        it("keeps one sender's messages to an id in order while the id's "
           .. "shard is being allocated", function()
            local bad = {}
            for _, n in ipairs({ n1, n2, n3, n4 }) do
                for i = 1, 32 do
                    local id = n.name .. "-" .. i
                    n:tell("Tally", id, { type = "reset" })
                    n:tell("Tally", id, { type = "incr", by = i })
                    local status, body, raw = n:ask("Tally", id,
                                                    { type = "get" }, 5)
                    if status ~= 200 or body.value ~= i then
                        bad[#bad + 1] = format("via %s %s: %s %s (owner %s)",
                            n.name, id, status, raw,
                            tostring(n:owner("Tally", id).owner))
                    end
                end
            end
            assert.same({}, bad)
        end)
    end)

    describe("a node told to leave", function()
        local on_n3 -- ids that lived on n3

        it("exits with code 0", function()
            on_n3 = {}
            local by_n1 = owners(n1, ids)
            for _, id in ipairs(ids) do
                if by_n1[id] == "n3" then
                    on_n3[#on_n3 + 1] = id
                end
            end
            local status, _, raw = n3:admin("leave", n3.listen)
            assert.equal(202, status, raw)
            assert.is_true(n3.proc:wait(10), "n3 is still running")
            assert.is_nil(n3.proc.signal)
            assert.equal(0, n3.proc.code, n3:log())
        end)

        it("is removed: the others converge without it", function()
            local views = c:wait_converged({ "n1", "n2", "n4" }, 10)
            assert.is_nil(helpers.member(views.n2, "n3"))
        end)

        it("has its shards reallocated: no node's plan lists it",
           function()
            helpers.wait_until(function()
                for _, n in ipairs({ n1, n2, n4 }) do
                    local count = shards_of(n:allocations("Counter"), "n3")
                    if count > 0 then
                        return nil, n.name .. " lists " .. count
                            .. " shards of n3"
                    end
                end
                return true
            end, 5, "n3's shards to be given up")
        end)

        it("leaves its ids answering from the others", function()
            assert.is_true(#on_n3 > 0, "no id lived on n3")
            for _, n in ipairs({ n1, n2, n4 }) do
                for _, id in ipairs(on_n3) do
                    local status, body, raw = n:ask("Counter", id,
                                                    { type = "get" }, 5)
                    assert.equal(200, status, n.name .. " " .. id .. ": "
                                 .. raw)
                    -- without persistence the counter starts again
                    assert.is_number(body.value)
                end
            end
            local by_n1 = owners(n1, on_n3)
            for _, id in ipairs(on_n3) do
                assert.is_truthy(({ n1 = 1, n2 = 1, n4 = 1 })[by_n1[id]],
                                 id .. " lives on " .. tostring(by_n1[id]))
            end
        end)

        it("keeps the ids of the other nodes with their state", function()
            local left = {}
            for _, id in ipairs(on_n3) do
                left[id] = true
            end
            for i, id in ipairs(ids) do
                if not left[id] then
                    assert.same({ value = i }, n2:call("Counter", id,
                                                       { type = "get" }, 5),
                                id)
                end
            end
        end)
    end)

    describe("a coordinator told to leave", function()
        it("hands coordination to the next oldest member and exits with "
           .. "code 0", function()
            local views = c:wait_converged({ "n1", "n2", "n4" }, 5)
            assert.equal("n1", helpers.leader_name(views.n2))
            local status, _, raw = n1:admin("leave", n1.listen)
            assert.equal(202, status, raw)
            assert.is_true(n1.proc:wait(10), "n1 is still running")
            assert.equal(0, n1.proc.code, n1:log())
            views = c:wait_converged({ "n2", "n4" }, 10)
            assert.equal("n2", helpers.leader_name(views.n4))
        end)

        it("leaves every id answering from the others", function()
            for _, n in ipairs({ n2, n4 }) do
                for _, id in ipairs(ids) do
                    local status, body, raw = n:ask("Counter", id,
                                                    { type = "get" }, 5)
                    assert.equal(200, status, n.name .. " " .. id .. ": "
                                 .. raw)
                    assert.is_number(body.value)
                end
            end
        end)
    end)
end)
