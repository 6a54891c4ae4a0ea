-- spec/helpers/views.lua: building strategy views (DESIGN.md §3) and
-- driving strategies through rebalance rounds, for the strategy specs.
--
--     local views = require "helpers.views"
--     local members = views.members(3)
--     local v = views.view{ members = members, shard_count = 12,
--                           plan = views.plan_from_counts(members, {10, 2}) }
--     local rounds = views.converge(s, v)   -- applies rounds until none moves
--
-- Members are n1, n2, ... with address 127.0.0.1:7101, :7102, ...,
-- up_number 1, 2, ..., status "up", version "1.0.0", reachable, no roles,
-- weight 1, unless overridden.

local M = {}

-- A small deterministic generator (Park-Miller), so specs do not depend on
-- math.random's implementation.
function M.rng(seed)
    local state = seed % 2147483647
    if state <= 0 then
        state = state + 2147483646
    end
    return function(lo, hi)
        state = state * 16807 % 2147483647
        return lo + state % (hi - lo + 1)
    end
end

-- `n` members; `overrides[i]` (optional) is merged into member i.
function M.members(n, overrides)
    local list = {}
    for i = 1, n do
        local m = {
            name = "n" .. i,
            address = "127.0.0.1:" .. (7100 + i),
            uid = "uid-" .. i,
            roles = {},
            weight = 1,
            version = "1.0.0",
            up_number = i,
            status = "up",
            reachable = true,
        }
        for k, v in pairs(overrides and overrides[i] or {}) do
            m[k] = v
        end
        list[i] = m
    end
    return list
end

-- A view; fields default to entity_type "Order", shard_count 64, empty
-- plan and in_progress.
function M.view(t)
    return {
        entity_type = t.entity_type or "Order",
        shard_count = t.shard_count or 64,
        members = t.members or {},
        plan = t.plan or {},
        in_progress = t.in_progress or {},
    }
end

-- A plan giving counts[i] shards to members[i], in contiguous runs from 0.
function M.plan_from_counts(members, counts)
    local plan, shard = {}, 0
    for i, c in ipairs(counts) do
        for _ = 1, c do
            plan[shard] = members[i].name
            shard = shard + 1
        end
    end
    return plan
end

-- Shards owned per member name (members with none get 0).
function M.counts(view)
    local counts = {}
    for _, m in ipairs(view.members) do
        counts[m.name] = 0
    end
    for shard = 0, view.shard_count - 1 do
        local o = view.plan[shard]
        if o and counts[o] then
            counts[o] = counts[o] + 1
        end
    end
    return counts
end

-- Most minus least shards over the view's members.
function M.spread(view)
    local hi, lo = -math.huge, math.huge
    for _, c in pairs(M.counts(view)) do
        hi, lo = math.max(hi, c), math.min(lo, c)
    end
    return hi - lo
end

-- Allocates every unowned shard of the view in ascending order, in place.
function M.fill(s, view)
    for shard = 0, view.shard_count - 1 do
        if view.plan[shard] == nil then
            view.plan[shard] = assert(s:allocate(shard, view))
        end
    end
    return view
end

-- One rebalance round, applied as the coordinator would: the proposed
-- shards lose their owner, then each is re-allocated with `allocate`, in
-- ascending order. Returns the proposed shards.
function M.round(s, view, allocator)
    local moves = s:rebalance(view)
    for _, shard in ipairs(moves) do
        view.plan[shard] = nil
    end
    for _, shard in ipairs(moves) do
        view.plan[shard] = assert((allocator or s):allocate(shard, view))
    end
    return moves
end

-- Applies rounds until one proposes nothing. `check(moves, view)`
-- (optional) runs after each round. Fails after `max_rounds` (default
-- 1000). Returns the number of rounds that moved something.
function M.converge(s, view, check, max_rounds)
    for round = 0, max_rounds or 1000 do
        local moves = M.round(s, view)
        if #moves == 0 then
            return round
        end
        if check then
            check(moves, view)
        end
    end
    error("no convergence")
end

local function copy(v)
    if type(v) ~= "table" then
        return v
    end
    local t = {}
    for k, x in pairs(v) do
        t[k] = copy(x)
    end
    return t
end
M.copy = copy

-- Rebuilds a table with the keys inserted in the order given by `keys`,
-- through a table pre-filled with junk keys, so its hash part (and pairs
-- order) differs from the original's.
local function reinsert(t, keys)
    local out = {}
    for i = 1, 37 do
        out["junk" .. i] = true
    end
    for _, k in ipairs(keys) do
        out[k] = copy(t[k])
    end
    for i = 1, 37 do
        out["junk" .. i] = nil
    end
    return out
end

local function shuffled_keys(t, rnd)
    local keys = {}
    for k in pairs(t) do
        keys[#keys + 1] = k
    end
    table.sort(keys, function(a, b)
        return tostring(a) < tostring(b)
    end)
    for i = #keys, 2, -1 do
        local j = rnd(1, i)
        keys[i], keys[j] = keys[j], keys[i]
    end
    return keys
end

-- The same view built in a different order: members listed in a shuffled
-- order, and every table (plan, in_progress, each member, its roles)
-- rebuilt with its keys inserted in a shuffled order.
function M.scrambled(view, seed)
    local rnd = M.rng(seed or 7)
    local members = {}
    for i, m in ipairs(view.members) do
        local mm = reinsert(m, shuffled_keys(m, rnd))
        mm.roles = reinsert(m.roles or {}, shuffled_keys(m.roles or {}, rnd))
        members[i] = mm
    end
    for i = #members, 2, -1 do
        local j = rnd(1, i)
        members[i], members[j] = members[j], members[i]
    end
    local out = reinsert(view, shuffled_keys(view, rnd))
    out.members = members
    out.plan = reinsert(view.plan, shuffled_keys(view.plan, rnd))
    out.in_progress = reinsert(view.in_progress,
                               shuffled_keys(view.in_progress, rnd))
    return out
end

return M
