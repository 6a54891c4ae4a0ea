-- spec/helpers/fake_ctx.lua: the entity ctx API in memory, so behaviors can
-- be tested without a host (DESIGN.md §3).
--
--     local fake_ctx = require "helpers.fake_ctx"
--     local e = fake_ctx.entity(require "order", {
--         type = "Order", id = "o1",
--         responder = function(type, id, msg, seconds) return { ok = true } end,
--     })
--     local reply = e:send({ type = "place", items = {...} })
--     e:fire(e.ctx:pending_timers()[1].id)
--
-- Like the real host, every message, reply, tell, ask and timer message is
-- copied through JSON (cjson) when it crosses the boundary, so a behavior
-- cannot share tables with its callers and anything not encodable fails the
-- spec. The fake raises where lua/moonshard/host.lua raises (bad ref
-- arguments, ask timeouts and timer delays) and is stricter in two places:
-- an unknown log level and a second reply to one message raise.
--
-- Recorded, on the ctx:
--   ctx.replies          every reply, in order
--   ctx.tells            {type =, id =, msg =} per ref:tell
--   ctx.asks             {type =, id =, msg =, timeout =} per ref:ask
--   ctx.timers[id]       {id =, seconds =, due =, msg =, status =
--                         "pending" | "cancelled" | "fired"}
--   ctx.stop_requested   true after ctx:stop()
--   ctx.logs             {level =, message =} per ctx:log
-- Programmable, in the options:
--   responder(type, id, msg, seconds) -> reply | nil, err   (for ref:ask;
--       default: nil, a "no_owner" error)
--   teller(type, id, msg) -> true | nil, err                (default: true)
--   now                   initial clock in seconds (default 1000)
--   ask_timeout           ref:ask's timeout when none is given (default 5)

local cjson = require("cjson").new()
local errors = require "moonshard.error"

local type = type
local error = error
local select = select
local ipairs = ipairs
local pairs = pairs
local tostring = tostring
local setmetatable = setmetatable
local concat = table.concat
local sort = table.sort

local M = {}

local LEVELS = { debug = true, info = true, warn = true, error = true }

-- A copy of `v` as it would arrive on the other side of the wire.
local function wire(v)
    if v == nil then
        return nil
    end
    return cjson.decode(cjson.encode(v))
end
M.wire = wire

local Ctx = {}
Ctx.__index = Ctx

local Ref = {}
Ref.__index = Ref

local function check_message(msg, what)
    if type(msg) ~= "table" then
        error(what .. ": message must be a table, got " .. type(msg), 3)
    end
end

function Ctx:reply(msg)
    check_message(msg, "reply")
    self.replies[#self.replies + 1] = wire(msg)
end

function Ctx:ref(entity_type, id)
    if type(entity_type) ~= "string" then
        error("bad 'type' argument: a string is required", 2)
    end
    if type(id) ~= "string" or id == "" then
        error("bad 'id' argument: a non-empty string is required", 2)
    end
    return setmetatable({ ctx = self, type = entity_type, id = id }, Ref)
end

function Ref:tell(msg)
    check_message(msg, "tell")
    local ctx = self.ctx
    local copy = wire(msg)
    ctx.tells[#ctx.tells + 1] = { type = self.type, id = self.id, msg = copy }
    if ctx.teller then
        return ctx.teller(self.type, self.id, wire(copy))
    end
    return true
end

function Ref:ask(msg, seconds)
    check_message(msg, "ask")
    local ctx = self.ctx
    seconds = seconds or ctx.ask_timeout
    if type(seconds) ~= "number" or seconds ~= seconds or seconds <= 0 then
        error("bad 'seconds' argument: the ask timeout must be > 0", 2)
    end
    if self.type == ctx.type and self.id == ctx.id then
        return nil, errors.new("ask_self", "an entity cannot ask itself")
    end
    local copy = wire(msg)
    ctx.asks[#ctx.asks + 1] = {
        type = self.type, id = self.id, msg = copy, timeout = seconds,
    }
    local reply, err = ctx.responder(self.type, self.id, wire(copy), seconds)
    if reply == nil then
        return nil, err
    end
    return wire(reply)
end

function Ctx:after(seconds, msg)
    if type(seconds) ~= "number" or seconds ~= seconds or seconds < 0 then
        error("after: seconds must be a number >= 0", 2)
    end
    check_message(msg, "after")
    local id = self.next_timer
    self.next_timer = id + 1
    self.timers[id] = {
        id = id, seconds = seconds, due = self.clock + seconds,
        msg = wire(msg), status = "pending",
    }
    return id
end

function Ctx:cancel(id)
    local timer = self.timers[id]
    if timer and timer.status == "pending" then
        timer.status = "cancelled"
        return true
    end
    return false
end

function Ctx:stop()
    self.stop_requested = true
end

function Ctx:log(level, ...)
    if not LEVELS[level] then
        error("log: bad level " .. tostring(level), 2)
    end
    local parts = {}
    for i = 1, select("#", ...) do
        parts[i] = tostring((select(i, ...)))
    end
    self.logs[#self.logs + 1] = { level = level, message = concat(parts, " ") }
end

function Ctx:now()
    return self.clock
end

-- Test-side helpers (not part of the ctx API).

function Ctx:advance(seconds)
    self.clock = self.clock + seconds
end

-- Pending timers, oldest first.
function Ctx:pending_timers()
    local list = {}
    for _, timer in pairs(self.timers) do
        if timer.status == "pending" then
            list[#list + 1] = timer
        end
    end
    sort(list, function(a, b) return a.id < b.id end)
    return list
end

-- Tells sent to `entity_type` (and `id`, if given), in order.
function Ctx:tells_to(entity_type, id)
    local list = {}
    for _, t in ipairs(self.tells) do
        if t.type == entity_type and (id == nil or t.id == id) then
            list[#list + 1] = t
        end
    end
    return list
end

local function unavailable()
    return nil, errors.new("no_owner", "fake_ctx has no responder")
end

function M.new(opts)
    opts = opts or {}
    return setmetatable({
        type = opts.type or "Test",
        id = opts.id or "test-1",
        shard = opts.shard or 0,
        node = opts.node or "n1",
        clock = opts.now or 1000,
        responder = opts.responder or unavailable,
        teller = opts.teller,
        ask_timeout = opts.ask_timeout or 5,
        replies = {},
        tells = {},
        asks = {},
        timers = {},
        next_timer = 1,
        logs = {},
        stop_requested = false,
    }, Ctx)
end

-- An entity: a behavior, its state and its fake ctx.

local Entity = {}
Entity.__index = Entity

local function deliver(self, msg)
    local ctx = self.ctx
    local before = #ctx.replies
    local new_state = self.behavior.receive(self.state, msg, ctx)
    if new_state ~= nil then
        if type(new_state) ~= "table" then
            error("receive returned a " .. type(new_state)
                  .. ", expected a state table or nothing", 2)
        end
        self.state = new_state
    end
    local count = #ctx.replies - before
    if count > 1 then
        error("handler replied " .. count .. " times to one message", 2)
    end
    return ctx.replies[before + 1]
end

-- Delivers `msg` (through JSON) and returns the reply, or nil if none.
-- A handler error propagates to the caller.
function Entity:send(msg)
    return deliver(self, wire(msg))
end

-- Fires a pending timer: delivers its message, returns the reply if any.
function Entity:fire(id)
    local timer = self.ctx.timers[id]
    if not timer then
        error("no timer " .. tostring(id), 2)
    end
    if timer.status ~= "pending" then
        error("timer " .. tostring(id) .. " is " .. timer.status, 2)
    end
    timer.status = "fired"
    self.ctx.clock = timer.due > self.ctx.clock and timer.due or self.ctx.clock
    return deliver(self, wire(timer.msg))
end

-- Passivates: calls the optional stopped(state, ctx).
function Entity:passivate()
    if self.behavior.stopped then
        self.behavior.stopped(self.state, self.ctx)
    end
end

function M.entity(behavior, opts)
    local ctx = M.new(opts)
    local state = behavior.init(ctx)
    if type(state) ~= "table" then
        error("init returned a " .. type(state) .. ", expected a table", 2)
    end
    return setmetatable({ behavior = behavior, ctx = ctx, state = state },
                        Entity)
end

return M
