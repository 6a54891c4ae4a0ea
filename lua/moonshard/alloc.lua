-- moonshard.alloc: runs the allocation strategies and rebalance policies
-- on the coordinator. The host calls configure() once with the loaded
-- config, allocate() for each unowned shard and rebalance() for each
-- rebalance round. A strategy that raises, returns nothing, returns a
-- member that is not in the view or a shard out of range is refused with
-- a one-line reason, and the coordinator never applies such a decision.
-- swap() replaces a type's strategy at run time (hot reload): the new one
-- is dry-run on the latest view first and kept only if it behaves.

local cjson = require "cjson.safe"

local type, pcall, ipairs, pairs, tostring = type, pcall, ipairs, pairs,
    tostring
local floor = math.floor

local M = {}

local strategies = {} -- [entity type name] = allocation strategy
local rebalancers = {} -- [entity type name] = strategy whose rebalance runs
local last_views = {}  -- [entity type name] = latest view (for dry runs)

function M.configure(cfg)
    for _, e in ipairs(cfg.entity_list) do
        strategies[e.name] = e.allocation
        rebalancers[e.name] = e.rebalance or e.allocation
    end
end

-- The id of a type's strategy (part of its settings fingerprint).
function M.strategy_id(type_name)
    local s = strategies[type_name]
    return s and s.id or "least_loaded"
end

-- view_json: {"entity_type":..,"shard_count":N,"members":[{name, address,
-- uid, roles:[..], weight, version, up_number, status, reachable}, ..],
-- "plan":[[shard, name], ..], "in_progress":[shard, ..]} with members
-- oldest first, as DESIGN §3 describes once decoded.
local function decode_view(view_json)
    local v, err = cjson.decode(view_json)
    if type(v) ~= "table" or type(v.members) ~= "table"
        or type(v.plan) ~= "table" then
        return nil, "bad view: " .. tostring(err or "missing fields")
    end
    local plan, names, moving = {}, {}, {}
    for _, e in ipairs(v.plan) do
        plan[e[1]] = e[2]
    end
    for _, s in ipairs(v.in_progress or {}) do
        moving[s] = true
    end
    for _, m in ipairs(v.members) do
        local set = {}
        for _, r in ipairs(m.roles) do set[r] = true end
        m.roles = set
        names[m.name] = true
    end
    return { entity_type = v.entity_type, shard_count = v.shard_count,
             members = v.members, plan = plan, in_progress = moving }, names
end

local function check_allocate(s, shard, view, names)
    local ok, name, why = pcall(s.allocate, s, shard, view)
    if not ok then
        return nil, "strategy " .. tostring(s.id) .. " raised: "
            .. tostring(name)
    end
    if type(name) ~= "string" then
        return nil, "strategy " .. tostring(s.id) .. " gave no member: "
            .. tostring(why or name)
    end
    if not names[name] then
        return nil, "strategy " .. tostring(s.id)
            .. " returned unknown member '" .. name .. "'"
    end
    return name
end

local function check_rebalance(s, view)
    local ok, list = pcall(s.rebalance, s, view)
    if not ok then
        return nil, "rebalance of " .. tostring(s.id) .. " raised: "
            .. tostring(list)
    end
    if type(list) ~= "table" then
        return nil, "rebalance of " .. tostring(s.id)
            .. " returned a " .. type(list) .. ", not a list of shards"
    end
    local out, seen = {}, {}
    for i, sh in ipairs(list) do
        if type(sh) ~= "number" or sh ~= floor(sh) or sh < 0
            or sh >= view.shard_count then
            return nil, "rebalance of " .. tostring(s.id) .. " returned "
                .. tostring(sh) .. " at position " .. i
                .. ", not a shard in 0.." .. (view.shard_count - 1)
        end
        if not seen[sh] then
            seen[sh] = true
            out[#out + 1] = sh
        end
    end
    return out
end

-- The allocation strategy of a type and the decoded view with its member
-- names; or nil and a reason.
local function strategy_view(type_name, view_json)
    local s = strategies[type_name]
    if not s then
        return nil, "no allocation strategy for type " .. tostring(type_name)
    end
    local view, names = decode_view(view_json)
    if not view then return nil, names end
    return s, view, names
end

-- Returns the chosen member's name, or nil and a reason.
function M.allocate(type_name, shard, view_json)
    local s, view, names = strategy_view(type_name, view_json)
    if not s then return nil, view end
    last_views[type_name] = view
    return check_allocate(s, shard, view, names)
end

-- A copy of decoded view v that a strategy may change without changing v.
local function view_copy(v)
    local members, plan, moving = {}, {}, {}
    for i, m in ipairs(v.members) do
        local c, roles = {}, {}
        for k, x in pairs(m) do c[k] = x end
        for r in pairs(m.roles) do roles[r] = true end
        c.roles = roles
        members[i] = c
    end
    for s, name in pairs(v.plan) do plan[s] = name end
    for s in pairs(v.in_progress) do moving[s] = true end
    return { entity_type = v.entity_type, shard_count = v.shard_count,
             members = members, plan = plan, in_progress = moving }
end

-- Places shards (a list, stopped at one old owner) in order over one view,
-- as one allocate() call each would: shard i sees the shards before it
-- placed (owned by their choice, no longer moving) and itself unassigned;
-- each call gets its own copy of that view. Returns a list with each
-- shard's member name, false where it has none, and a list with the
-- reason of each shard that has none (nil at the others); or nil and a
-- reason when nothing can be placed.
function M.allocate_many(type_name, shards, view_json)
    local s, view, names = strategy_view(type_name, view_json)
    if not s then return nil, view end
    local out, whys = {}, {}
    for i, shard in ipairs(shards) do
        view.plan[shard] = nil
        local name, why = check_allocate(s, shard, view_copy(view), names)
        out[i] = name or false
        whys[i] = why
        view.plan[shard] = name
        view.in_progress[shard] = nil
    end
    last_views[type_name] = view
    return out, whys
end

-- Whether the member in `member_json` (DESIGN §3) may own shards of the
-- type at all: the strategy's `eligible` (role_aware: the roles), true
-- without one. An `eligible` that raises keeps the member (the error goes
-- to the caller's log).
function M.eligible(type_name, member_json)
    local s = strategies[type_name]
    if not s or type(s.eligible) ~= "function" then
        return true
    end
    local m, err = cjson.decode(member_json)
    if type(m) ~= "table" then
        error("bad member: " .. tostring(err), 0)
    end
    local set = {}
    for _, r in ipairs(type(m.roles) == "table" and m.roles or {}) do
        set[r] = true
    end
    m.roles = set
    return s:eligible(m) ~= false
end

-- Returns the list of shards to move now (ascending, no duplicates, each
-- in range), or nil and a reason.
function M.rebalance(type_name, view_json)
    local s = rebalancers[type_name]
    if not s then
        return nil, "no rebalance strategy for type " .. tostring(type_name)
    end
    local view, names = decode_view(view_json)
    if not view then return nil, names end
    last_views[type_name] = view
    local list, err = check_rebalance(s, view)
    if not list then return nil, err end
    table.sort(list)
    -- the shards proposed must have an owner to move away from
    local out = {}
    for _, sh in ipairs(list) do
        if view.plan[sh] and names[view.plan[sh]] then out[#out + 1] = sh end
    end
    return out
end

-- Replaces the strategies of `type_name` (allocation; rebalance: the
-- bound object whose rebalance runs, see moonshard.strategy.bind). Both
-- are checked for shape and, when this node has seen a view of the type,
-- dry-run on it. Returns true, or nil and a one-line reason (then the old
-- strategies stay).
function M.swap(type_name, allocation, rebalance)
    if strategies[type_name] == nil then
        return nil, "unknown entity type " .. tostring(type_name)
    end
    rebalance = rebalance or allocation
    for _, s in ipairs({ allocation, rebalance }) do
        if type(s) ~= "table" or type(s.allocate) ~= "function"
            or type(s.rebalance) ~= "function" or type(s.id) ~= "string" then
            return nil, "not a strategy (needs an id string and allocate and"
                .. " rebalance methods)"
        end
    end
    local view = last_views[type_name]
    if view then
        local names = {}
        for _, m in ipairs(view.members) do names[m.name] = true end
        if next(names) then
            local _, err = check_allocate(allocation, 0, view, names)
            if err then return nil, "dry run: " .. err end
        end
        local _, err = check_rebalance(rebalance, view)
        if err then return nil, "dry run: " .. err end
    end
    strategies[type_name] = allocation
    rebalancers[type_name] = rebalance
    return true
end

return M
