-- moonshard.strategy.util: helpers shared by the shipped allocation
-- strategies and rebalance policies, and free to use in your own.
--
-- This is not a strategy (it has no `new`). Everything here is pure: no I/O,
-- no clock, no randomness, and no dependence on `pairs` order (every table
-- that is walked with `pairs` has its keys sorted first, or is only counted).
--
-- The view (DESIGN.md §3) a strategy receives:
--
--     view = {
--         entity_type = "Order", shard_count = 256,
--         members = { {name=, address=, uid=, roles={backend=true}, weight=1,
--                      version="1.0.0", up_number=1,
--                      status="up"|"leaving"|"joining", reachable=true}, ... },
--         plan = { [shard] = name, ... },   -- current owners, shards 0-based
--         in_progress = { [shard] = true }, -- moves not yet finished
--     }
--
-- `M.view` checks it and returns a normalized copy whose `members` list is
-- sorted by a total order (oldest first: up_number, then address, then
-- name), so a strategy gives the same answer whatever order the caller built
-- its tables in. `plan` and `in_progress` may be nil (empty). A member's
-- `reachable` may be nil (reachable); `status` "exiting" counts as leaving;
-- members that are "down" or "removed" are dropped from the view; any other
-- status is an error.

local type = type
local pairs = pairs
local ipairs = ipairs
local error = error
local tostring = tostring
local tonumber = tonumber
local next = next
local floor = math.floor
local max = math.max
local min = math.min
local huge = math.huge
local sort = table.sort
local concat = table.concat
local format = string.format
local match = string.match
local find = string.find
local gsub = string.gsub
local gmatch = string.gmatch
local byte = string.byte

local M = {}

-------------------------------------------------------------------------------
-- Canonical text, for ids

-- Formats a number the same way on every node and every run: integers in
-- decimal, other numbers with the fewest significant digits that read back
-- as the same double ("0.1", not "0.10000000000000001").
function M.format_number(x)
    if x ~= x or x == huge or x == -huge then
        error("cannot format " .. tostring(x) .. " in an id", 2)
    end
    if x == floor(x) and x > -2 ^ 53 and x < 2 ^ 53 then
        return format("%d", x)
    end
    for digits = 15, 17 do
        local s = format("%." .. digits .. "g", x)
        if tonumber(s) == x then
            return s
        end
    end
    return format("%.17g", x)
end

local function quote(s)
    return "\"" .. gsub(s, "[%c\"\\]", function(c)
        if c == "\"" or c == "\\" then
            return "\\" .. c
        end
        return format("\\%d", byte(c))
    end) .. "\""
end

local function key_less(a, b)
    local ta, tb = type(a), type(b)
    if ta ~= tb then
        return ta == "number" -- numbers before strings
    end
    return a < b
end

local function sorted_keys(t)
    local keys = {}
    for k in pairs(t) do
        local tk = type(k)
        if tk ~= "string" and tk ~= "number" then
            error("cannot put a " .. tk .. " key in an id", 3)
        end
        keys[#keys + 1] = k
    end
    sort(keys, key_less)
    return keys
end
M.sorted_keys = sorted_keys

local function is_sequence(keys)
    for i, k in ipairs(keys) do
        if k ~= i then
            return false
        end
    end
    return true
end

-- Canonical Lua-constructor text of a value made of strings, numbers,
-- booleans and tables thereof: keys sorted, numbers as format_number,
-- strings quoted, identifiers bare as keys. Equal values give equal text.
local function canon(v)
    local t = type(v)
    if t == "string" then
        return quote(v)
    elseif t == "number" then
        return M.format_number(v)
    elseif t == "boolean" then
        return tostring(v)
    elseif t ~= "table" then
        error("cannot put a " .. t .. " in an id", 2)
    end
    local keys = sorted_keys(v)
    local parts = {}
    if is_sequence(keys) then
        for i = 1, #keys do
            parts[i] = canon(v[i])
        end
    else
        for i, k in ipairs(keys) do
            local ks
            if type(k) == "string" and match(k, "^[%a_][%w_]*$") then
                ks = k
            else
                ks = "[" .. canon(k) .. "]"
            end
            parts[i] = ks .. "=" .. canon(v[k])
        end
    end
    return "{" .. concat(parts, ",") .. "}"
end
M.canon = canon

-- The id of a strategy: NAME, then its options when there are any, then
-- "(" .. inner.id .. ")" for a decorator or a bound policy. For example
-- `least_loaded{absolute_limit=0,relative_limit=0.1}` or
-- `rate_limited{max_concurrent=4,threshold=1}(rendezvous)`.
function M.id(name, opts, inner)
    local s = name
    if opts ~= nil and next(opts) ~= nil then
        s = s .. canon(opts)
    end
    if inner ~= nil then
        s = s .. "(" .. inner.id .. ")"
    end
    return s
end

-------------------------------------------------------------------------------
-- Options

-- Raises "bad option 'NAME': REASON (got VALUE)" at `level` (1 = the caller
-- of bad_option, as for error()).
function M.bad_option(name, reason, value, level)
    local shown
    if type(value) == "string" then
        shown = quote(value)
    elseif type(value) == "number" or type(value) == "boolean"
        or value == nil then
        shown = tostring(value)
    else
        shown = type(value)
    end
    error(format("bad option '%s': %s (got %s)", name, reason, shown),
          (level or 1) + 1)
end

-- Checks that `opts` is nil or a table whose keys are all in `known` (a
-- list of names). Returns opts or {}. Raises at `level` otherwise.
function M.options(opts, known, strategy, level)
    level = (level or 1) + 1
    if opts == nil then
        return {}
    end
    if type(opts) ~= "table" then
        error(format("bad options for %s (table expected, got %s)", strategy,
                     type(opts)), level)
    end
    local ok = {}
    for _, k in ipairs(known) do
        ok[k] = true
    end
    for _, k in ipairs(sorted_keys(opts)) do
        if not ok[k] then
            local list = #known > 0 and concat(known, ", ") or "none"
            error(format("unknown option '%s' for %s (known: %s)",
                         tostring(k), strategy, list), level)
        end
    end
    return opts
end

-- A finite number in [lo, hi] (`lo_open`: lo excluded), or `default`.
function M.number_option(opts, name, lo, hi, lo_open, default, level)
    local v = opts[name]
    if v == nil then
        return default
    end
    if type(v) ~= "number" or v ~= v or v > hi
        or (lo_open and v <= lo) or (not lo_open and v < lo) then
        M.bad_option(name, format("must be a number in %s%s, %s]",
                                  lo_open and "(" or "[",
                                  M.format_number(lo),
                                  hi == huge and "inf" or M.format_number(hi)),
                     v, (level or 1) + 1)
    end
    return v
end

-- An integer >= lo, or `default`.
function M.integer_option(opts, name, lo, default, level)
    local v = opts[name]
    if v == nil then
        return default
    end
    if type(v) ~= "number" or v ~= floor(v) or v < lo or v >= 2 ^ 53 then
        M.bad_option(name, format("must be an integer >= %d", lo), v,
                     (level or 1) + 1)
    end
    return v
end

-------------------------------------------------------------------------------
-- Strategy shapes

-- True when `s` is a strategy: a table with a non-empty string `id` and
-- `allocate` and `rebalance` functions.
function M.is_strategy(s)
    return type(s) == "table" and type(s.id) == "string" and s.id ~= ""
        and type(s.allocate) == "function"
        and type(s.rebalance) == "function"
end

-- True when `s` is a rebalance policy not yet given its inner strategy
-- (`strategy.rate_limited{...}`, `strategy.no_rebalance()`): a table with a
-- string `id` and a `bind(self, inner)` method returning a strategy.
function M.is_policy(s)
    return type(s) == "table" and type(s.id) == "string" and s.id ~= ""
        and type(s.bind) == "function" and type(s.allocate) ~= "function"
end

-------------------------------------------------------------------------------
-- Versions

local function version_parts(v)
    if v == nil then
        v = "0"
    elseif type(v) == "number" then
        v = M.format_number(v)
    elseif type(v) ~= "string" then
        error("bad view: a member version must be a string, got " .. type(v),
              0)
    end
    local main, qualifier = match(v, "^([^%-]*)%-(.*)$")
    if not main then
        main = v
    end
    local parts = {}
    for p in gmatch(main .. ".", "([^.]*)%.") do
        parts[#parts + 1] = find(p, "^%d+$") and tonumber(p) or p
    end
    return parts, qualifier
end

-- Compares two version strings by their dot-separated components, numbers
-- numerically ("1.10" > "1.9"), other components as text; a missing
-- component counts as 0 ("1.0" == "1.0.0"); a "-qualifier" sorts before
-- the plain version ("1.0.0-rc1" < "1.0.0"). nil counts as "0". Returns
-- -1, 0 or 1.
function M.compare_versions(a, b)
    local pa, qa = version_parts(a)
    local pb, qb = version_parts(b)
    for i = 1, max(#pa, #pb) do
        local x, y = pa[i] or 0, pb[i] or 0
        if x ~= y then
            if type(x) == type(y) then
                return x < y and -1 or 1
            end
            -- A number against text: numbers first (as in semver, where a
            -- numeric identifier is lower than an alphanumeric one), so the
            -- order stays transitive ("1.2" < "1.10" < "1.1x").
            return type(x) == "number" and -1 or 1
        end
    end
    if qa == qb then
        return 0
    elseif qa == nil then
        return 1
    elseif qb == nil then
        return -1
    end
    return qa < qb and -1 or 1
end

-------------------------------------------------------------------------------
-- Members and the view

local STATUSES = { up = true, leaving = true, exiting = true, joining = true }
local GONE = { down = true, removed = true }

function M.is_leaving(m)
    return m.status == "leaving" or m.status == "exiting"
end

-- A member that may be given shards: up, or leaving (then only as a last
-- resort). Joining members get shards once they are up.
function M.can_own(m)
    return m.status == "up" or m.status == "leaving" or m.status == "exiting"
end

local function split_address(a)
    local host, port = match(a, "^(.*):(%d+)$")
    if host then
        return host, tonumber(port)
    end
    return a, -1
end

-- Address order: host as text, then port as a number (Akka's address
-- ordering), so "h:9000" < "h:10000".
function M.address_less(a, b)
    local ha, pa = split_address(a or "")
    local hb, pb = split_address(b or "")
    if ha ~= hb then
        return ha < hb
    end
    return pa < pb
end

-- Oldest first: lower up_number, then lower address, then name. A total
-- order, since names are unique in a view.
function M.older(a, b)
    local ua, ub = a.up_number or huge, b.up_number or huge
    if ua ~= ub then
        return ua < ub
    end
    if a.address ~= b.address then
        return M.address_less(a.address, b.address)
    end
    return a.name < b.name
end

local function bad_view(reason, level)
    error("bad view: " .. reason, level + 1)
end

-- Checks `view` and returns a normalized copy (see the top of this file):
-- { entity_type, shard_count, members (sorted, known statuses only),
--   by_name = {name = member}, plan, in_progress }. The member tables are
-- shared with the caller's view, not copied. Raises "bad view: ..." on a
-- malformed view, `level` as for error().
function M.view(view, level)
    level = (level or 1) + 1
    if type(view) ~= "table" then
        bad_view("table expected, got " .. type(view), level)
    end
    local count = view.shard_count
    if type(count) ~= "number" or count < 1 or count ~= floor(count) then
        bad_view("shard_count must be a positive integer", level)
    end
    if type(view.members) ~= "table" then
        bad_view("members must be a list", level)
    end
    local plan, in_progress = view.plan or {}, view.in_progress or {}
    if type(plan) ~= "table" or type(in_progress) ~= "table" then
        bad_view("plan and in_progress must be tables", level)
    end
    local members, by_name = {}, {}
    for i, m in ipairs(view.members) do
        if type(m) ~= "table" or type(m.name) ~= "string" or m.name == "" then
            bad_view(format("members[%d] must be a table with a name", i),
                     level)
        end
        if by_name[m.name] then
            bad_view("two members named " .. m.name, level)
        end
        by_name[m.name] = m
        if STATUSES[m.status] then
            members[#members + 1] = m
        elseif not GONE[m.status] then
            bad_view(format("member %s has status %s", m.name,
                            tostring(m.status)), level)
        end
    end
    sort(members, M.older)
    by_name = {}
    for _, m in ipairs(members) do
        by_name[m.name] = m
    end
    return {
        entity_type = view.entity_type,
        shard_count = count,
        members = members,
        by_name = by_name,
        plan = plan,
        in_progress = in_progress,
    }
end

-- A copy of the normalized view `v` keeping the members for which
-- keep(member) is true, in a form any strategy accepts as its `view`.
function M.filter(v, keep)
    local members = {}
    for _, m in ipairs(v.members) do
        if keep(m) then
            members[#members + 1] = m
        end
    end
    return {
        entity_type = v.entity_type,
        shard_count = v.shard_count,
        members = members,
        plan = v.plan,
        in_progress = v.in_progress,
    }
end

-- Raises unless `shard` is an integer in [0, shard_count).
function M.check_shard(shard, v, level)
    if type(shard) ~= "number" or shard ~= floor(shard) or shard < 0
        or shard >= v.shard_count then
        error(format("bad 'shard' argument (integer in [0, %d) expected,"
                     .. " got %s)", v.shard_count, tostring(shard)),
              (level or 1) + 1)
    end
end

-- Shards owned by each member of the normalized view `v`, ascending:
-- { [name] = { shard, ... } }. Members owning nothing get {}. Owners that
-- are not members of the view are ignored (their shards are the
-- coordinator's to reallocate).
function M.owned(v)
    local owned = {}
    for _, m in ipairs(v.members) do
        owned[m.name] = {}
    end
    local plan = v.plan
    for shard = 0, v.shard_count - 1 do
        local list = owned[plan[shard]]
        if list then
            list[#list + 1] = shard
        end
    end
    return owned
end

-- Number of shards in [0, shard_count) marked in progress.
function M.in_progress_count(v)
    local n, ip = 0, v.in_progress
    for shard = 0, v.shard_count - 1 do
        if ip[shard] then
            n = n + 1
        end
    end
    return n
end

-- Whether voluntary moves may happen now (DESIGN §3): false, with a reason,
-- while a member is joining, a member is unreachable, or members run
-- different versions. Moves already in progress are not looked at here.
function M.stable(v)
    local first
    for _, m in ipairs(v.members) do
        if m.status == "joining" then
            return false, "member " .. m.name .. " is joining"
        end
        if m.reachable == false then
            return false, "member " .. m.name .. " is unreachable"
        end
        if first == nil then
            first = m
        elseif M.compare_versions(first.version, m.version) ~= 0 then
            return false, "members run different versions"
        end
    end
    return true
end

-- Whether a strategy that moves one round at a time may propose moves
-- now: nothing is in progress and the view is stable (M.stable).
function M.quiet(v)
    return M.in_progress_count(v) == 0 and (M.stable(v))
end

-- Akka's per-round cap: max(1, min(floor(relative * shards), absolute));
-- absolute = 0 means no absolute cap.
function M.limit(shards, relative, absolute)
    local rel = floor(relative * shards)
    if absolute ~= nil and absolute > 0 then
        rel = min(rel, absolute)
    end
    return max(1, rel)
end

-- The spread of a plan: the most minus the least shards owned by an up
-- member for which `eligible(member)` (optional) is true; 0 with fewer than
-- two such members. Used by rate_limited for inner strategies that do not
-- measure load themselves.
function M.count_spread(v, eligible)
    local owned = M.owned(v)
    local hi, lo, n = -huge, huge, 0
    for _, m in ipairs(v.members) do
        if m.status == "up" and (eligible == nil or eligible(m)) then
            local c = #owned[m.name]
            hi, lo, n = max(hi, c), min(lo, c), n + 1
        end
    end
    if n < 2 then
        return 0
    end
    return hi - lo
end

-- Sorts a list of shards ascending in place and returns it.
function M.sorted(list)
    sort(list)
    return list
end

-- Checks a rebalance answer: a list of distinct integer shards in range.
-- Returns it sorted ascending, or raises naming `who`.
function M.check_proposals(list, v, who, level)
    level = (level or 1) + 1
    if type(list) ~= "table" then
        error(who .. ": rebalance must return a list of shards, got "
              .. type(list), level)
    end
    local out, seen = {}, {}
    for i = 1, #list do
        local s = list[i]
        if type(s) ~= "number" or s ~= floor(s) or s < 0
            or s >= v.shard_count then
            error(format("%s: rebalance returned %s, not a shard in [0, %d)",
                         who, tostring(s), v.shard_count), level)
        end
        if not seen[s] then
            seen[s] = true
            out[#out + 1] = s
        end
    end
    sort(out)
    return out
end

-- The two phases of Akka's LeastShardAllocationStrategy (2.6.10+) over
-- `list`, regions in allocation order, each with `shards` (the member's
-- shards, ascending) and `optimal` (its target count). Phase 1 takes the
-- excess of regions above optimal; phase 2, only when phase 1 found
-- nothing, takes one shard (its lowest) from each region at optimal or
-- above, as many as the regions two or more below optimal are short of
-- optimal - 1. At most `limit` shards; returns them ascending.
function M.two_phase(list, limit)
    local selected = {}
    for _, r in ipairs(list) do
        for i = 1, #r.shards - r.optimal do
            if #selected >= limit then
                break
            end
            selected[#selected + 1] = r.shards[i]
        end
    end
    if #selected > 0 then
        return M.sorted(selected)
    end
    local short = 0
    for _, r in ipairs(list) do
        local gap = r.optimal - 1 - #r.shards
        if gap > 0 then
            short = short + gap
        end
    end
    if short < limit then
        limit = short
    end
    for _, r in ipairs(list) do
        if #selected >= limit then
            break
        end
        if #r.shards >= r.optimal and #r.shards > 0 then
            selected[#selected + 1] = r.shards[1]
        end
    end
    return M.sorted(selected)
end

-- `eligible` of a decorator that keeps its inner strategy's answer (true
-- when the inner strategy has no `eligible`).
function M.inner_eligible(self, m)
    if self.inner.eligible then
        return self.inner:eligible(m) and true or false
    end
    return true
end

return M
