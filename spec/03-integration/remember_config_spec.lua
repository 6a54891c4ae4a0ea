-- The memory store of remember-entities (issue 12) lives in the node's
-- process: it records like the others (the counts in /v1/stats), and a
-- restart of the node forgets it, so nothing is started again.

local helpers = require "helpers.node"

describe("a type remembered in memory", function()
    teardown(function() helpers.stop_all_checked() end)

    it("counts what runs, and forgets it with the process", function()
        local dir = helpers.tmpdir()
        local out = dir .. "/starts.log"
        local o = {
            entities = {
                Keeper = { module = "keeper", shard_count = 4,
                           remember = { store = "memory" } },
                Plain = { module = "counter" },
            },
            files = { ["keeper_out.lua"] = string.format("return %q", out) },
        }
        local n = helpers.start(o)
        for i = 1, 5 do n:tell("Keeper", "m" .. i, { type = "incr" }) end
        n:tell("Plain", "p1", { type = "incr" })
        assert.same({ ok = true }, n:call("Keeper", "m1", { type = "stop" }))
        local deadline = helpers.now() + 5
        local s
        repeat
            s = n:stats()
            helpers.sleep(0.05)
        until s.remember.types.Keeper.remembered == 4
            or helpers.now() > deadline
        assert.equal(4, s.remember.types.Keeper.remembered)
        assert.equal("memory", s.remember.types.Keeper.store)
        assert.is_nil(s.remember.types.Plain) -- not remembered
        n:stop()
        os.remove(out)
        local n2 = helpers.start(o)
        helpers.sleep(1.5) -- its shards are allocated and listed
        s = n2:stats()
        assert.equal(0, s.remember.types.Keeper.remembered)
        assert.equal(0, s.remember.eager_starts)
        assert.is_nil(helpers.read_file(out))
    end)
end)
