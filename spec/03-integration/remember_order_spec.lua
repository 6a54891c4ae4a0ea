-- G1 and G2 around the eager start of remember-entities (issue 12): while
-- two senders keep telling numbered messages to remembered Seq entities,
-- their shards move to a node that joins (the new owner starts them
-- again without a message, behind what waits for the shard) and then
-- away from a node that leaves. Every entity must see each sender's
-- numbers in order, without a gap, and never be active on two nodes at
-- once (seqcheck counts a start while its state file is still marked
-- active as `double`).

local helpers = require "helpers.node"
local seqload = require "helpers.seqload"

local format = string.format

local SHARDS, IDS = 16, 32

describe("remember-entities keep order and a single activation", function()
    local c
    local ids = {}
    for i = 1, IDS do ids[i] = "r" .. i end

    setup(function()
        -- the store's directory, shared by the nodes of this machine
        local rdir = helpers.tmpdir()
        c = helpers.cluster({
            size = 3,
            entities = {
                Seq = { module = "seqcheck", shard_count = SHARDS,
                        idle_timeout = 600,
                        remember = { store = "file", dir = rdir } },
            },
            settings = { handoff_timeout = 2, rebalance_interval = 0.5 },
        })
        seqload.use(c)
        c:start({ "n1", "n2" })
        c:wait_converged({ "n1", "n2" })
    end)

    teardown(function()
        helpers.stop_all_checked()
        assert.same({}, helpers.leaks())
    end)

    -- the total of eager starts over the running nodes
    local function eager()
        local t = 0
        for _, n in ipairs(c.nodes) do
            if n.runs > 0 and n:alive() then
                t = t + n:stats().remember.eager_starts
            end
        end
        return t
    end

    it("across a join and a leave under load", function()
        local n1, n2 = c:node("n1"), c:node("n2")
        -- both senders go through n1, which stays
        local run = seqload.start(c, { { n1, "a" }, { n1, "b" } }, ids)
        helpers.wait_until(function()
            local r1, r2 = n1:stats().remember, n2:stats().remember
            local k = r1.types.Seq.remembered + r2.types.Seq.remembered
            return k == IDS or nil, k .. " remembered"
        end, 20, "every entity remembered")
        c:start({ "n3" })
        c:wait_converged({ "n1", "n2", "n3" })
        local n3 = c:node("n3")
        helpers.wait_until(function()
            local k = seqload.owned(n1, "n3")
            return k >= 4 or nil, k .. " shards on n3"
        end, 30, "n3 to take its share")
        -- n3 started the entities of its shards by itself
        helpers.wait_until(function()
            return n3:stats().remember.eager_starts > 0 or nil
        end, 10, "an eager start on n3")
        local before = eager()
        assert.equal(202, (n2:admin("leave")))
        helpers.wait_until(function() return not n2:alive() or nil end, 30,
                           "n2 to exit")
        local results = seqload.finish(run)
        for _, id in ipairs(ids) do
            local st = seqload.arrived(results, n1, id)
            assert.equal(0, st.gaps, id .. " saw gaps")
            assert.equal(0, st.reorders, id .. " saw reorders")
            assert.equal(0, st.double, id .. " was active twice")
        end
        assert.is_true(eager() > before,
                       format("no eager start after the leave (%d)", before))
        for sender, r in pairs(results) do
            for code in pairs(r.errors) do
                assert.is_truthy(code == "overflow" or code == "timeout"
                                 or code == "no_owner",
                                 sender .. " got error " .. code)
            end
        end
    end)
end)
