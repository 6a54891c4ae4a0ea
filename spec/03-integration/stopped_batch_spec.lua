-- The shards a leaving node stops in one round reach the coordinator in one
-- STOPPED and are placed by one allocate_many call (moonshard.alloc). A
-- shard the strategy places nowhere is noted in the coordinator's log with
-- the reason the strategy gave for that shard, as one allocate() call per
-- shard would note it, not with the reason of the first shard of the
-- batch (a review of the batch found every note naming the first shard's).
local helpers = require "helpers.node"

-- Every shard to n2; a moving shard nowhere, with a reason naming it.
local REFUSE_MOVING = [[
local M = {}
local methods = {}
local mt = { __index = methods }
function M.new() return setmetatable({ id = "refuse_moving" }, mt) end
function methods:allocate(shard, view)
    if view.in_progress[shard] then
        return nil, "refused shard " .. shard .. "."
    end
    for _, m in ipairs(view.members) do
        if m.name == "n2" then return "n2" end
    end
    return nil, "n2 is not a member"
end
function methods.rebalance() return {} end
return M
]]

describe("shards stopped together and placed nowhere", function()
    teardown(function()
        helpers.stop_all_checked()
    end)

    it("are each noted with their own reason", function()
        local c = helpers.cluster({
            size = 2,
            files = { ["refuse.lua"] = REFUSE_MOVING },
            settings = { handoff_timeout = 3 },
            entities = { Order = { module = "counter", shard_count = 8,
                allocation = { __lua = 'require("refuse").new()' } } },
        })
        local n1, n2 = c:node("n1"), c:node("n2")
        n1:launch(); n1:wait_healthy()
        n2:launch(); n2:wait_healthy()
        c:wait_converged({ "n1", "n2" }, 10)
        n1:wait_placed_on("Order", "n2")
        for i = 1, 40 do n1:call("Order", "o" .. i, { type = "get" }) end
        local had = 0
        for _, sh in ipairs(n1:allocations("Order").shards) do
            if sh.owner == "n2" then had = had + 1 end
        end
        assert.is_true(had >= 2, "n2 owns " .. had .. " shards")
        assert.are.equal(202, (n2:admin("leave")))
        helpers.wait_until(function()
            return not n2:alive() or nil, "n2 still runs"
        end, 20, "n2 to exit")
        local notes = 0
        for line in n1:log():gmatch("[^\n]*left unassigned[^\n]*") do
            local shard = assert(line:match("shard (%d+) of Order"), line)
            notes = notes + 1
            assert.is_truthy(line:find("refused shard " .. shard .. ".", 1,
                                       true), line)
        end
        assert.are.equal(had, notes)
    end)
end)
