-- moonshard.strategy.role_aware: restricts any strategy to the members
-- that have all the given roles.
--
--     local rendezvous = require "moonshard.strategy.rendezvous"
--     local role_aware = require "moonshard.strategy.role_aware"
--     local s = role_aware.new(rendezvous.new(), { "backend" })
--
-- The inner strategy sees a view whose `members` holds only the members
-- with every role (a member's `roles` is a set, { backend = true }, or a
-- list, { "backend" }); `plan` and `in_progress` are passed unchanged, so
-- shards owned by other members are invisible to it (the inner strategies
-- ignore owners that are not in their view). When no member has the roles, `allocate` returns nil and
-- "no member has roles backend, ...".
--
-- `s:eligible(member)` tells the coordinator which members may own the
-- type's shards at all; a shard whose owner is not eligible must leave it
-- whatever the rebalance policy (DESIGN §3: "shards still leave ineligible
-- owners"). Rebalance also proposes nothing while any member of the whole
-- view, with or without the roles, is joining or unreachable or runs a
-- different version.
--
-- The roles are sorted and deduplicated, so { "a", "b" } and { "b", "a" }
-- give the same id: role_aware{roles={"a","b"}}(INNER_ID).

local util = require "moonshard.strategy.util"

local type = type
local error = error
local pairs = pairs
local ipairs = ipairs
local setmetatable = setmetatable
local sort = table.sort
local concat = table.concat

local M = {}

local methods = {}
local mt = { __index = methods }

-- Creates the decorator. `inner` is a strategy, `roles` a non-empty list of
-- role names. Raises on a bad argument.
function M.new(inner, roles)
    if not util.is_strategy(inner) then
        error("bad 'inner' argument to role_aware (strategy expected: a table"
              .. " with an id and allocate and rebalance methods)", 2)
    end
    local n = 0
    if type(roles) == "table" then
        for _ in pairs(roles) do
            n = n + 1
        end
    end
    if type(roles) ~= "table" or n == 0 or n ~= #roles then
        util.bad_option("roles", "must be a non-empty list of role names",
                        roles, 2)
    end
    local list, seen = {}, {}
    for i, r in ipairs(roles) do
        if type(r) ~= "string" or r == "" then
            util.bad_option("roles", "role " .. i .. " must be a non-empty"
                            .. " string", r, 2)
        end
        if not seen[r] then
            seen[r] = true
            list[#list + 1] = r
        end
    end
    sort(list)
    local self = { inner = inner, roles = list }
    self.id = util.id("role_aware", { roles = list }, inner)
    return setmetatable(self, mt)
end

-- True when member m has every role (and the inner strategy, if it says
-- anything, accepts it too).
function methods:eligible(m)
    local have = m.roles
    if type(have) ~= "table" then
        return false
    end
    if have[1] ~= nil then -- a list, as /v1/members shows it: make a set
        local set = {}
        for _, r in ipairs(have) do
            set[r] = true
        end
        have = set
    end
    for _, r in ipairs(self.roles) do
        if have[r] ~= true then
            return false
        end
    end
    local inner = self.inner
    if inner.eligible then
        return inner:eligible(m) and true or false
    end
    return true
end

local function filtered(self, v)
    return util.filter(v, function(m)
        return self:eligible(m)
    end)
end

function methods:allocate(shard, view)
    local v = util.view(view, 2)
    util.check_shard(shard, v, 2)
    local fv = filtered(self, v)
    if #fv.members == 0 then
        return nil, "no member has roles " .. concat(self.roles, ", ")
    end
    return self.inner:allocate(shard, fv)
end

function methods:rebalance(view)
    local v = util.view(view, 2)
    if not util.stable(v) then
        return {}
    end
    return self.inner:rebalance(filtered(self, v))
end

-- The inner strategy's spread over the members with the roles, or the
-- spread of their shard counts.
function methods:spread(view)
    local fv = filtered(self, util.view(view, 2))
    if self.inner.spread then
        return self.inner:spread(fv)
    end
    return util.count_spread(util.view(fv))
end

return M
