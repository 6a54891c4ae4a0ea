-- An entity type with its own partitioner (DESIGN §3 "Partitioner"), on a
-- real cluster of two nodes: the config's function places ids in shards
-- on every node alike, co-locates the ids it maps together, runs for
-- entities' own sends, and a partitioner that fails refuses the message
-- with a clear error while the nodes serve on. A node whose partitioner
-- differs is refused the type.

local helpers = require "helpers.node"

-- "N:rest" goes to shard N % shard_count; other ids raise; "-1:x" and
-- "9.5:x" give shards the host must refuse.
local PARTITIONER = [[function(id, n)
    local k = id:match("^(-?[%d.]+):")
    if not k then error("ids look like N:name") end
    k = tonumber(k)
    if k < 0 or k ~= math.floor(k) then return k end
    return k % n
end]]

describe("a type's own partitioner", function()
    local c, n1, n2

    setup(function()
        c = helpers.cluster_up({
            size = 2,
            entities = {
                Tagged = { module = "counter", shard_count = 8,
                           partitioner = { __lua = PARTITIONER } },
                Asker = { module = "asker", shard_count = 4 },
                Control = { module = "control", shard_count = 4 },
                -- a partitioner that asks where an id lives: it may not
                Loopy = { module = "counter", shard_count = 4,
                          partitioner = { __lua = [[function(id, n)
                              require("moonshard").owner_for("Loopy", id)
                              return 0
                          end]] } },
            },
        })
        n1, n2 = c:node("n1"), c:node("n2")
    end)

    teardown(function()
        helpers.stop_all_checked()
    end)

    it("places ids where it says, the same on every node", function()
        for _, case in ipairs({ { "5:x", 5 }, { "13:y", 5 }, { "0:z", 0 },
                                { "7:a:b", 7 } }) do
            local o1 = n1:owner("Tagged", case[1])
            local o2 = n2:owner("Tagged", case[1])
            assert.equal(case[2], o1.shard, case[1])
            assert.equal(case[2], o2.shard, case[1])
        end
        -- and from a shell, with the config
        local code, out, err = helpers.moonshard("shard", "--config",
                                                 c.config, "--type",
                                                 "Tagged", "5:x", "13:y",
                                                 "plain", "0:z")
        assert.equal(1, code, err)
        assert.equal("5\n5\nerror\n0\n", out)
        assert.matches("ids look like N:name", err, 1, true)
        -- one form or the other, never a mix
        for _, argv in ipairs({
            { "--count", "4", "--config", c.config, "a" },
            { "--count", "4", "--type", "Tagged", "a" },
            { "--config", c.config, "a" },
            { "--type", "Tagged", "a" },
        }) do
            assert.equal(2, (helpers.moonshard("shard", unpack(argv))))
        end
        -- a type without one: FNV-1a, as --count gives it
        code, out = helpers.moonshard("shard", "--config", c.config,
                                      "--type", "Asker", "a", "b")
        assert.equal(0, code)
        local _, fnv = helpers.moonshard("shard", "--count", "4", "a", "b")
        assert.equal(fnv, out)
    end)

    it("delivers tells and asks from either node to the one owner",
       function()
        for i = 1, 10 do
            local via = i % 2 == 0 and n1 or n2
            assert.equal(202, (via:tell("Tagged", "3:u" .. (i % 3),
                                        { type = "incr" })))
        end
        helpers.wait_until(function()
            local total = 0
            for j = 0, 2 do
                local r = n1:call("Tagged", "3:u" .. j, { type = "get" })
                total = total + (r.value or 0)
            end
            return total == 10
        end, 10, "the ten tells")
        -- co-located: the same shard, so the same owner
        local owner = n1:owner("Tagged", "3:u0").owner
        assert.is_string(owner)
        for j = 1, 2 do
            assert.equal(owner, n2:owner("Tagged", "3:u" .. j).owner)
        end
        assert.equal(owner, n2:owner("Tagged", "11:other").owner)
        local s = n1:stats().active_entities + n2:stats().active_entities
        assert.is_true(s >= 3)
    end)

    it("runs for an entity's own tells and asks, and owner_for", function()
        local r = n2:call("Asker", "a1", { type = "ask",
                          target = { type = "Tagged", id = "6:k" },
                          msg = { type = "get" } })
        assert.same({ value = 0 }, r.reply)
        r = n1:call("Asker", "a2", { type = "tell",
                    target = { type = "Tagged", id = "6:k" },
                    msg = { type = "incr", by = 4 } })
        assert.is_true(r.ok)
        helpers.wait_until(function()
            return n2:call("Tagged", "6:k", { type = "get" }).value == 4
        end, 10, "the entity's tell")
        r = n1:call("Control", "c1", { type = "owner",
                    target = { type = "Tagged", id = "14:k" } })
        assert.equal(6, r.shard)
    end)

    it("refuses a message whose id it cannot place, and serves on",
       function()
        for _, id in ipairs({ "plain", "-1:x", "9.5:x" }) do
            for _, n in ipairs({ n1, n2 }) do
                local status, body = n:tell("Tagged", id, { type = "incr" })
                assert.equal(500, status, id)
                assert.equal("partitioner", body.error.code, id)
                status, body = n:http("GET", "/v1/entities/Tagged/"
                                      .. id .. "/owner")
                assert.equal(500, status, id)
                assert.equal("partitioner", body.error.code)
            end
        end
        -- from inside an entity: its send fails, its handler does not
        local r = n1:call("Asker", "a3", { type = "ask",
                          target = { type = "Tagged", id = "plain" },
                          msg = { type = "get" } })
        assert.equal("partitioner", r.err.code)
        local status, body = n1:ask("Control", "c2", { type = "owner",
                                    target = { type = "Tagged",
                                               id = "plain" } })
        assert.equal(500, status)
        assert.matches("partitioner", body.error.message, 1, true)
        assert.matches("the partitioner of Tagged failed for id 'plain'",
                       n1:log(), 1, true)
        assert.matches("ids look like N:name", n1:log(), 1, true)
        assert.matches("it returned %-1, not an integer in 0..7", n1:log())
        -- the type and the others work on
        assert.same({ value = 0 }, n2:call("Tagged", "1:fine",
                                           { type = "get" }))
        assert.equal(200, (n1:ask("Asker", "a4", { type = "tell",
                               target = { type = "Tagged", id = "2:q" },
                               msg = { type = "incr" } })))
    end)

    it("refuses a partitioner that routes (no recursion)", function()
        local status, body = n1:tell("Loopy", "l1", { type = "incr" })
        assert.equal(500, status)
        assert.equal("partitioner", body.error.code)
        -- from an entity (its send fails; the asker fixture raises then)
        status, body = n2:ask("Asker", "a5", { type = "tell",
                              target = { type = "Loopy", id = "l2" },
                              msg = { type = "incr" } })
        assert.equal(500, status)
        assert.matches("partitioner", body.error.message, 1, true)
        assert.matches("a partitioner cannot send, ask or look up owners",
                       n1:log() .. n2:log(), 1, true)
        assert.same({ value = 0 }, n1:call("Tagged", "1:after",
                                           { type = "get" }))
    end)

    it("refuses the type to a node whose partitioner differs", function()
        local x = c:new_node("x1")
        local entities = {}
        for k, v in pairs(c.opts.entities) do entities[k] = v end
        entities.Tagged = { module = "counter", shard_count = 8,
                            partitioner = { __lua =
                                "function(id, n) return #id % n end" } }
        x.config = c:write_config("other.lua", { entities = entities }, { x })
        x:launch()
        x:wait_healthy()
        -- refused: x neither hosts nor routes the type, and says so to a
        -- sender at once (until then a tell waits for an owner)
        local a = helpers.wait_until(function()
            local st, b, r = x:tell("Tagged", "5:probe", { type = "incr" })
            if st == 202 then return nil, r end
            return { st, b, r }
        end, 15, "the refusal")
        local status, body, raw = a[1], a[2], a[3]
        assert.equal(503, status, raw)
        assert.equal("unavailable", body.error.code, raw)
        -- the why (the fingerprints differ) is in the log only
        assert.matches("partition=custom:", x:log(), 1, true)
        x:stop(5)
        assert.same({ value = 0 }, n1:call("Tagged", "4:still",
                                           { type = "get" }))
    end)
end)
