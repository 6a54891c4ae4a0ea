-- The collector's pace (gc_headroom_mb, runtime/lua/vm.c) on real nodes:
-- a node lets at least gc_headroom_mb of Lua garbage build up between
-- collection cycles (default 64 MB), while a node with 0 keeps LuaJIT's
-- pause (a cycle each time the heap doubles). 192 asks, each making
-- about 1 MB of garbage, go to each; /v1/stats' `lua` counts the cycles,
-- the pause in use and the heap.

local helpers = require "helpers.node"

-- Litter: an ask {type = "litter", mb = N} makes about N MB of garbage
-- (tables of 8 numbers, about 128 bytes each) and replies how many.
local LITTER = [[
local M = {}
function M.init() return {} end
function M.receive(state, msg, ctx)
    if msg.type == "litter" then
        local n = 0
        for i = 1, msg.mb * 8192 do
            local t = { i, i, i, i, i, i, i, i }
            n = n + #t
        end
        ctx:reply({ made = n / 8 })
    end
end
return M
]]

local MB = 1024 * 1024
local GARBAGE_MB = 192

local function start(settings)
    return helpers.start({
        entities = { Litter = { module = "litter", shard_count = 4 } },
        files = { ["litter.lua"] = LITTER },
        settings = settings,
    })
end

-- The node's `lua` stats before and after GARBAGE_MB litter asks (1 MB
-- each) over 16 entities, and the largest heap seen after one.
local function litter(n)
    local before, top = n:stats().lua, 0
    for i = 1, GARBAGE_MB do
        local r = n:call("Litter", "l" .. i % 16, { type = "litter", mb = 1 })
        assert.equal(8192, r.made)
        local heap = n:stats().lua.heap
        if heap > top then top = heap end
    end
    return before, n:stats().lua, top
end

describe("the collector's pace", function()
    local paced, plain

    setup(function()
        paced = start(nil) -- the default, 64 MB
        plain = start({ gc_headroom_mb = 0 })
    end)

    teardown(function()
        helpers.stop_all_checked()
        assert.same({}, helpers.leaks())
    end)

    it("reports the headroom, the pause and the heap in /v1/stats",
       function()
        local s = paced:stats().lua
        assert.equal(64 * MB, s.gc_headroom)
        assert.is_true(s.heap > 0, "heap " .. tostring(s.heap))
        -- a heap of a few MB with 64 MB on top: far above LuaJIT's 200
        assert.is_true(s.gc_pause > 1000, "pause " .. tostring(s.gc_pause))
        local z = plain:stats().lua
        assert.equal(0, z.gc_headroom)
        assert.equal(200, z.gc_pause)
    end)

    it("lets 64 MB of garbage build up between cycles, and no more",
       function()
        local before, after, top = litter(paced)
        local cycles = after.gc_cycles - before.gc_cycles
        -- about 200 MB of garbage (the tables' headers too) at 64 MB or
        -- more a cycle: 3 or 4 (without the settling of the threshold
        -- after a round, 10; with LuaJIT's pause, hundreds)
        assert.is_true(cycles >= 2 and cycles <= 6,
                       "paced cycles " .. cycles)
        -- the headroom bounds the heap: the live heap (a few MB) and 64 MB
        -- of garbage, with what the cycle under way allocates
        assert.is_true(top > 32 * MB, "largest heap " .. top)
        assert.is_true(top < 100 * MB, "largest heap " .. top)
        assert.is_true(after.gc_pause > 1000, "pause " .. after.gc_pause)
    end)

    it("with gc_headroom_mb = 0 keeps LuaJIT's pause: a cycle each time "
       .. "the heap doubles", function()
        local before, after, top = litter(plain)
        local cycles = after.gc_cycles - before.gc_cycles
        -- a live heap of a few MB doubling: a cycle every few MB
        assert.is_true(cycles >= 20, "plain cycles " .. cycles)
        assert.equal(200, after.gc_pause)
        assert.is_true(top < 16 * MB, "largest heap " .. top)
    end)
end)
