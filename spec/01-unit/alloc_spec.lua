-- moonshard.alloc without a node: allocate_many, which places the shards
-- one STOPPED answer names with one decoded view, gives each strategy
-- call the view that one allocate() call per shard would give, and the
-- same answers.

local cjson = require "cjson.safe"
local alloc = require "moonshard.alloc"
local strategy = require "moonshard.strategy"

local function member(name, up)
    return { name = name, address = "127.0.0.1:" .. (7000 + up),
             uid = string.format("%016x", up), weight = 1,
             version = "1.0.0", up_number = up, status = "up",
             reachable = true, roles = {} }
end

-- The view the node hands over (strategy_view.c), as JSON: 12 shards, n1
-- and n2 own them all, shards in `moving` are moving.
local function view_json(plan, moving)
    local p = {}
    for s = 0, 11 do
        if plan[s] then p[#p + 1] = { s, plan[s] } end
    end
    return cjson.encode({ entity_type = "T", shard_count = 12,
                          members = { member("n1", 1), member("n2", 2),
                                      member("n3", 3) },
                          plan = p, in_progress = moving })
end

local function start_plan()
    local plan = {}
    for s = 0, 11 do plan[s] = s % 2 == 0 and "n1" or "n2" end
    return plan
end

-- A strategy that records what each call saw: the owners of every shard
-- and the moving ones, as text, and changes the view it got.
local function recorder(inner)
    local seen = {}
    local s = { id = "recorder" }
    function s.allocate(_, shard, view)
        local owners, moving = {}, {}
        for i = 0, view.shard_count - 1 do
            owners[#owners + 1] = tostring(view.plan[i])
            if view.in_progress[i] then moving[#moving + 1] = i end
        end
        seen[#seen + 1] = shard .. ":" .. table.concat(owners, ",") .. "|"
            .. table.concat(moving, ",")
        local name, why = inner:allocate(shard, view)
        view.plan[0], view.members[1].name = "x", "y" -- must not leak
        return name, why
    end
    function s.rebalance() return {} end
    return s, seen
end

describe("moonshard.alloc.allocate_many", function()
    it("places as one allocate() per shard would, one view decoded", function()
        local batch, seen_b = recorder(strategy.least_loaded())
        local one, seen_1 = recorder(strategy.least_loaded())
        alloc.configure({ entity_list = {
            { name = "B", allocation = batch },
            { name = "O", allocation = one } } })
        local shards = { 1, 2, 5, 8 }
        -- one by one, as the coordinator does without allocate_many: the
        -- shard unassigned (and still moving), then owned by its choice
        -- and no longer moving
        local plan, moving = start_plan(), { 1, 2, 5, 8 }
        local want = {}
        for i, s in ipairs(shards) do
            plan[s] = nil
            want[i] = assert(alloc.allocate("O", s, view_json(plan, moving)))
            plan[s] = want[i]
            table.remove(moving, 1)
        end
        local got, why = alloc.allocate_many("B", shards,
            view_json(start_plan(), { 1, 2, 5, 8 }))
        assert.same({}, why)
        assert.same(want, got)
        assert.same(seen_1, seen_b)
        -- the least loaded member is n3 until it has caught up
        assert.same({ "n3", "n3", "n3", "n3" }, got)
    end)

    it("gives false and its own reason for each shard it cannot place", function()
        local calls = 0
        local s = { id = "picky" }
        function s.allocate(_, shard)
            calls = calls + 1
            if shard == 2 then return nil, "not that one" end
            if shard == 5 then return "nobody" end
            return "n3"
        end
        function s.rebalance() return {} end
        alloc.configure({ entity_list = { { name = "P", allocation = s } } })
        local got, why = alloc.allocate_many("P", { 1, 2, 5, 8 },
            view_json(start_plan(), { 1, 2, 5, 8 }))
        assert.same({ "n3", false, false, "n3" }, got)
        -- each as allocate() would give it for that shard (the coordinator
        -- logs each unplaced shard with it)
        assert.equal("table", type(why))
        assert.is_nil(why[1])
        assert.is_nil(why[4])
        assert.equal(select(2, alloc.allocate("P", 2,
            view_json(start_plan(), { 2 }))), why[2])
        assert.matches("not that one", why[2])
        assert.matches("unknown member 'nobody'", why[3])
        assert.equal(5, calls)
    end)

    it("refuses an unknown type and a bad view", function()
        local got, why = alloc.allocate_many("nope", { 1 }, view_json({}, {}))
        assert.is_nil(got)
        assert.matches("no allocation strategy", why)
        alloc.configure({ entity_list = {
            { name = "B", allocation = strategy.least_loaded() } } })
        got, why = alloc.allocate_many("B", { 1 }, "{")
        assert.is_nil(got)
        assert.matches("bad view", why)
    end)
end)
