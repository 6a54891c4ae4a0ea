-- The collector's pace (gc_headroom_mb, runtime/lua/vm.c) on real nodes:
-- a node lets up to gc_headroom_mb of Lua garbage build up between
-- collection cycles (default 64 MB), and up to five times its live heap,
-- while a node with 0 keeps LuaJIT's pause (a cycle each time the heap
-- doubles). An entity holding 16 MB of live data makes 192 MB of
-- garbage, 1 MB a message, each message a timer message to itself: the
-- node stays busy from the first to the last, so its idle collector (a GC
-- step each 50 ms without a round, which starts a cycle of its own) does
-- not run however the machine schedules the spec. /v1/stats' `lua` counts
-- the cycles, the pause in use and the heap.

local helpers = require "helpers.node"

-- Litter: {type = "keep", mb = L} makes the entity's state hold about L
-- MB of live tables; {type = "run", left = N} makes 1 MB of garbage (tables of 8
-- numbers, about 128 bytes each, kept in a ring so that the JIT cannot
-- sink them), notes the largest heap after one, and sends itself the
-- next with left = N - 1; {type = "get"} replies how far it is.
-- Grow: {type = "grow", live_mb = L, garbage_mb = G} builds a live table
-- of about L MB and then makes G MB of garbage, all in one message, and
-- replies the largest heap it saw (MB).
local LITTER = [[
local M = {}
function M.init() return { left = 0, top = 0, made = 0 } end
local function litter(mb)
    local ring = {}
    for i = 1, mb * 8192 do
        ring[i % 64] = { i, i, i, i, i, i, i, i }
    end
    return mb * 8192
end
function M.receive(state, msg, ctx)
    if msg.type == "keep" then
        local live = {}
        for i = 1, msg.mb * 8192 do
            live[i] = { i, i, i, i, i, i, i, i }
        end
        state.live = live
        ctx:reply({ kept = #live })
    elseif msg.type == "run" then
        state.made = state.made + litter(1)
        local kb = collectgarbage("count")
        if kb > state.top then state.top = kb end
        state.left = msg.left - 1
        if state.left > 0 then
            ctx:after(0, { type = "run", left = state.left })
        end
    elseif msg.type == "get" then
        ctx:reply({ left = state.left, made = state.made,
                    top = state.top * 1024 })
    elseif msg.type == "grow" then
        local live, ring, top = {}, {}, 0
        for i = 1, msg.live_mb * 8192 do
            live[i] = { i, i, i, i, i, i, i, i }
        end
        for i = 1, msg.garbage_mb * 8192 do
            ring[i % 64] = { i, i, i, i, i, i, i, i }
            if i % 256 == 0 then
                local kb = collectgarbage("count")
                if kb > top then top = kb end
            end
        end
        ctx:reply({ top = top * 1024, live = #live })
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

-- The node's `lua` stats before and after GARBAGE_MB run messages (1 MB
-- each) on one entity holding LIVE_MB of live data, and the largest heap
-- it saw after one.
local LIVE_MB = 16
local function litter(n)
    assert.equal(LIVE_MB * 8192,
                 n:call("Litter", "l", { type = "keep", mb = LIVE_MB }).kept)
    local before = n:stats().lua
    local st, body = n:tell("Litter", "l", { type = "run",
                                              left = GARBAGE_MB })
    assert.equal(202, st, body)
    local r
    assert.is_true(helpers.wait_until(function()
        r = n:call("Litter", "l", { type = "get" })
        return r.left == 0
    end, 60), "litter did not finish")
    assert.equal(GARBAGE_MB * 8192, r.made)
    return before, n:stats().lua, r.top
end

describe("the collector's pace", function()
    local paced, plain, small

    setup(function()
        paced = start(nil) -- the default, 64 MB
        plain = start({ gc_headroom_mb = 0 })
        small = start({ gc_headroom_mb = 16 })
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
        -- a heap of a few MB with 64 MB on top: the most, five times the
        -- live heap of garbage
        assert.equal(600, s.gc_pause)
        local z = plain:stats().lua
        assert.equal(0, z.gc_headroom)
        assert.equal(200, z.gc_pause)
    end)

    it("lets 64 MB of garbage build up between cycles, and no more",
       function()
        local before, after, top = litter(paced)
        local cycles = after.gc_cycles - before.gc_cycles
        -- about 200 MB of garbage (the tables' headers too) at 64 MB a
        -- cycle, and what each cycle allocates while it runs: 2 or 3
        -- (with LuaJIT's pause over this live heap, 7)
        assert.is_true(cycles >= 1 and cycles <= 4,
                       "paced cycles " .. cycles)
        -- the headroom bounds the heap: the live heap (about 22 MB) and
        -- 64 MB of garbage, with what the cycle under way allocates
        -- (about 99 MB at the top)
        assert.is_true(top > 60 * MB, "largest heap " .. top)
        assert.is_true(top < 125 * MB, "largest heap " .. top)
        -- 64 MB over about 22: a pause near 385 %
        assert.is_true(after.gc_pause > 250 and after.gc_pause < 500,
                       "pause " .. after.gc_pause)
    end)

    it("sets the pause at each cycle's end, also inside a handler whose "
       .. "live heap grows", function()
        -- 16 MB of headroom over a live heap of a few MB: a pause near
        -- 1000%. The handler makes the live heap 8 MB and then 64 MB of
        -- garbage: each cycle ending inside it sets the pause for the
        -- live heap then, so the next starts at about 8 + 16 MB (about
        -- 30 MB at the top, 4 cycles; the pause set for the small heap
        -- before it, kept: 2 cycles, 47 MB)
        local before = small:stats().lua
        assert.is_true(before.gc_pause > 500, "pause " .. before.gc_pause)
        local r = small:call("Litter", "g", { type = "grow", live_mb = 8,
                                              garbage_mb = 64 })
        assert.equal(8 * 8192, r.live)
        local after = small:stats().lua
        local cycles = after.gc_cycles - before.gc_cycles
        assert.is_true(cycles >= 3, "cycles " .. cycles)
        assert.is_true(r.top > 16 * MB, "largest heap " .. r.top)
        assert.is_true(r.top < 40 * MB, "largest heap " .. r.top)
    end)

    it("with gc_headroom_mb = 0 keeps LuaJIT's pause: a cycle each time "
       .. "the heap doubles", function()
        local before, after, top = litter(plain)
        local cycles = after.gc_cycles - before.gc_cycles
        -- a live heap of about 22 MB doubling: a cycle every 22 MB or so
        -- and what it allocates while it runs (7; paced, 2)
        assert.is_true(cycles >= 5, "plain cycles " .. cycles)
        assert.equal(200, after.gc_pause)
        assert.is_true(top < 60 * MB, "largest heap " .. top)
    end)
end)
