-- spec/helpers/remember.lua: checks for the remember-entities cluster
-- specs (issue 12). The Keeper fixture (spec/fixtures/keeper.lua) appends
-- "<node> <type> <id>" to one file at every init; these helpers read it to
-- see who started what, without sending a message.
--
--   local rh = require "helpers.remember"
--   local log = rh.inits(path)              -- { {node, type, id}, ... }
--   local before = rh.counts(path, "Keeper") -- { id = inits so far }
--   rh.running(c, via, live, "Keeper", ids, prev_owner, before)

local helpers = require "helpers.node"
local assert = require "luassert"

local format = string.format

local M = {}

-- The init lines of `path`, in order: { { node, type, id }, ... }.
function M.inits(path)
    local t = {}
    for l in (helpers.read_file(path) or ""):gmatch("[^\n]+") do
        local node, ty, id = l:match("^(%S+) (%S+) (%S+)$")
        if node then t[#t + 1] = { node = node, type = ty, id = id } end
    end
    return t
end

-- { id = number of inits } of type `ty` in `path`, and { id = the node of
-- its latest init }.
function M.counts(path, ty)
    local n, last = {}, {}
    for _, r in ipairs(M.inits(path)) do
        if r.type == ty then
            n[r.id] = (n[r.id] or 0) + 1
            last[r.id] = r.node
        end
    end
    return n, last
end

-- Whether tables a and b hold the same keys with equal (==) values.
function M.same(a, b)
    for k, v in pairs(a) do
        if b[k] ~= v then return false end
    end
    for k in pairs(b) do
        if a[k] == nil then return false end
    end
    return true
end

-- { shard = owner name or nil } of type `ty` as node `via` sees it.
function M.owners(via, ty)
    local out = {}
    for _, s in ipairs(via:allocations(ty).shards) do
        if s.owner ~= helpers.json.null then out[s.shard] = s.owner end
    end
    return out
end

-- { id = shard } of `ids` of type `ty` (asked once: it never changes).
function M.shards(via, ty, ids)
    local out = {}
    for _, id in ipairs(ids) do out[id] = via:owner(ty, id).shard end
    return out
end

-- { id = owner name } of `ids` (shard map `sh`) as `via` sees it.
function M.id_owners(via, ty, ids, sh)
    local o = M.owners(via, ty)
    local out = {}
    for _, id in ipairs(ids) do out[id] = o[sh[id]] end
    return out
end

-- The sum over the nodes `live` of their remembered count of `ty`, and
-- whether every shard a node reports ids for is one it owns (per `own`,
-- { shard = owner }); the second value says what disagrees.
local function stats_agree(live, ty, own)
    local sum = 0
    for _, n in ipairs(live) do
        local s = n:stats().remember
        if s.queued ~= 0 or s.inflight ~= 0 or s.eager_pending ~= 0 then
            return nil, n.name .. " still writes or starts"
        end
        local t = s.types[ty]
        sum = sum + t.remembered
        for shard in pairs(t.shards) do
            if own[tonumber(shard)] ~= n.name then
                return nil, format("%s reports ids for shard %s, owned by %s",
                                   n.name, shard,
                                   tostring(own[tonumber(shard)]))
            end
        end
    end
    return sum
end

-- Waits until every id of `ids` (type `ty`, shards `sh`) runs on the
-- owner of its shard without any message: its latest init (file `path`)
-- names the owner as `via` sees it, the owner is one of `live` and the
-- nodes agree on it; an id whose owner is not prev[id] was started again
-- (more inits than before[id]). The live nodes' remember stats must
-- count `want` ids of `ty` (nil: #ids), each shard on its owner only.
-- Returns { id = owner }.
function M.running(opts)
    local live, ty, ids, sh = opts.live, opts.type, opts.ids, opts.shards
    local names = {}
    for _, n in ipairs(live) do names[n.name] = true end
    local want = opts.want or #ids
    return helpers.wait_until(function()
        local own = M.owners(live[1], ty)
        for i = 2, #live do
            if not M.same(M.owners(live[i], ty), own) then
                return nil, live[i].name .. " sees other owners"
            end
        end
        local n, last = M.counts(opts.path, ty)
        local out = {}
        for _, id in ipairs(ids) do
            local o = own[sh[id]]
            if not o or not names[o] then
                return nil, format("%s: shard %d owned by %s", id, sh[id],
                                   tostring(o))
            end
            if last[id] ~= o then
                return nil, format("%s: last init on %s, owner %s", id,
                                   tostring(last[id]), o)
            end
            if opts.prev and opts.prev[id] ~= o
                and (n[id] or 0) <= (opts.before[id] or 0) then
                return nil, id .. " moved to " .. o .. " but not started"
            end
            out[id] = o
        end
        local sum, why = stats_agree(live, ty, own)
        if sum ~= want then
            return nil, why or format("the nodes count %d %s ids, not %d",
                                      sum, ty, want)
        end
        return out
    end, opts.timeout or 20, "the " .. ty .. " entities to run on owners",
        0.1)
end

-- Asks each id for its state through `via`: the answer comes from its
-- owner (`where`: { id = owner }), and it was not started again by the
-- message (the init count of `path` does not change).
function M.answer_once(via, path, ty, ids, where)
    local before = M.counts(path, ty)
    for _, id in ipairs(ids) do
        local r = via:call(ty, id, { type = "get" }, 10)
        assert.equal(where[id], r.node, id .. " answered elsewhere")
    end
    helpers.sleep(0.2)
    local after = M.counts(path, ty)
    for _, id in ipairs(ids) do
        assert.equal(before[id], after[id], id .. " was started again")
    end
end

return M
