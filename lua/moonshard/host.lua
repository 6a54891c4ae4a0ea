-- moonshard.host: the Lua half of a node. It loads the behaviors, builds
-- each entity's ctx, and runs the dispatch driver: a loop that pulls the
-- next delivery from the C dispatcher (moonshard.core, preloaded by the
-- host) and calls the behavior. Entity state lives in `states`, indexed by
-- the entity's handle, never in the behavior's upvalues.
--
-- Handlers run inside driver coroutines. An ask yields the coroutine: the
-- entity keeps it while it waits, and the host continues the shard queues
-- with a fresh driver, so an ask suspends only that entity.

local core = require "moonshard.core"
local ffi = require "ffi"
local cjson = require "cjson"
local errors = require "moonshard.error"

local type, tostring, setmetatable, select = type, tostring, setmetatable, select
local pcall, require = pcall, require
local concat = table.concat
local find, format = string.find, string.format
local floor, huge = math.floor, math.huge
local band = require("bit").band
local yield, running = coroutine.yield, coroutine.running

local done, reply_c, reply_msg = core.done, core.reply, core.reply_msg
local tell_c, ask_c, after_c, cancel_c = core.tell, core.ask, core.after, core.cancel
local stop_c, log_c, now_c = core.stop, core.log, core.now
local state_at = core.state_at
local p_load, p_append, p_save, p_fail =
    core.p_load, core.p_append, core.p_save, core.p_fail
local p_record, p_find = core.p_record, core.p_find
-- the message field that carries an operation id (the HTTP gateway's
-- Idempotency-Key, the CLI's --op-id, ref options): see README
-- "Operation ids"
local OP_FIELD = "$op"
local OP_MAX = 128
local tonumber, sub = tonumber, string.sub
local ASK, IDLE, FREE = core.ASK, core.IDLE, core.FREE
local KIND_STOP = 3
local KIND_ACTIVATE = 4

local M = {}

-- The driver pulls deliveries through the FFI (see runtime/lua/leaf.c):
-- the call stays inside the compiled trace of the loop.
ffi.cdef [[
struct ms_lua_delivery {
    uint32_t h;
    int32_t kind;
    int32_t init;
    int32_t type;
    uint32_t shard;
    uint32_t idlen;
    uint32_t len;
    uint32_t gen;
    const char *payload;
    const char *id;
};
uint32_t ms_lua_next(void *bridge, uint32_t prev, struct ms_lua_delivery *out);
int32_t ms_lua_ctx_live(void *bridge, uint32_t h, uint32_t gen);
int32_t ms_lua_reply(void *bridge, uint32_t h, const uint8_t *json,
                     size_t len);
const char *ms_lua_entity_id(void *bridge, uint32_t h, uint32_t gen,
                             uint32_t *len);
int32_t ms_lua_entity_type(void *bridge, uint32_t h, uint32_t *shard);
const uint32_t *ms_lua_parked(void *bridge, uint32_t *n);
void ms_lua_release_parked(void *bridge);
void ms_lua_quiet_stop(void *bridge, int32_t type, int32_t on);
struct ms_lua_ctx { const uint32_t _h; const uint32_t _g; const uint16_t shard;
                   const uint16_t _t; };
]]
ffi.cdef(("struct ms_lua_restated { uint32_t n; uint32_t h[%d]; };")
         :format(core.RESTATED_MAX))
local C = ffi.C
-- the bridge of this VM, passed back to ms_lua_next (the host keeps no
-- process-wide bridge)
local BRIDGE = ffi.cast("void *", core.BRIDGE)
-- the entities whose handler returned a new state this round (bridge_int.h)
local RESTATED = ffi.cast("struct ms_lua_restated *", core.RESTATED)
local RESTATED_MAX = core.RESTATED_MAX
-- its array, taken once: RESTATED.h in the interpreter (an activation that
-- is not compiled) would make a cdata object each time, garbage that sat
-- between the states (355 bytes an entity at 1,000,000 instead of 293)
local RESTATED_H = RESTATED.h
local ffi_string = ffi.string
-- the declaration above mirrors runtime/lua/leaf.c: refuse to run with a
-- mismatch rather than read deliveries wrongly
assert(ffi.sizeof("struct ms_lua_delivery") == core.DELIVERY_SIZE,
       "struct ms_lua_delivery differs between host.lua and leaf.c")

local behaviors = {}   -- [type index] = behavior module
local type_ids = {}    -- [type name] = type index, as the C dispatcher has
                       -- them (ctx:ref stays in Lua, inside the trace)
local states = {}      -- [handle] = state table
core.keep_states(states)
-- states[h] while the entity's init runs (it may wait on an ask across a
-- hot reload, before it has a state): the reload finds it there
local INITING = setmetatable({}, { __newindex = function()
    error("the entity's state does not exist until init returns", 2)
end })
-- Every state is set through set_state: the dispatcher keeps its address
-- and prefetches it while a delivery's payload is decoded (leaf.c). The
-- handle is noted in RESTATED, through the FFI, and C takes the address
-- from `states` at the round's end: a C call here would end the compiled
-- trace of every activation, and of every message of a handler that
-- returns a new state each time (about 20 % of their rates). Until then
-- the entity's deliveries prefetch its earlier state's address (or none):
-- a wasted load, never a wrong result (a prefetch reads nothing). Once
-- RESTATED is full (more than two states set a delivery in one round),
-- core.state_at takes the address at once.
local function set_state(h, st)
    states[h] = st
    local n = RESTATED.n
    if n < RESTATED_MAX then
        RESTATED_H[n] = h
        RESTATED.n = n + 1
    else
        state_at(h, st)
    end
end

-- The state that receive returned (res: anything): a table other than the
-- state is the new state.
local function receive_set(h, res)
    if type(res) == "table" and not rawequal(res, states[h]) then
        set_state(h, res)
    end
end
-- Hot reload (moonshard.reload, M.swap_behavior): the module name and the
-- load count (1: as started) of each type's behavior, and, for each entity
-- that was active when its behavior was swapped and has not handled a
-- message since, the version its state was made under (for `migrate`).
local modules = {}     -- [type index] = module name
local loads = {}       -- [type index] = number of loads of its behavior
local migrate_from = {} -- [handle] = old version, until migrated
local detached = setmetatable({}, { __mode = "k" }) -- driver coroutines now owned by a waiting entity
-- Persistent types (see "persistence" below): [type index] = { kind =
-- "events" | "state", every = snapshot_every, delete = bool, name = }.
local persist = {}
local pmeta = {}    -- [handle] = { seq = } or { rev =, last = }; nil:
                    -- recover from the database before the next message
local preplies = {} -- [handle] = the encoded reply, sent after the commit
local pdelete = {}  -- [handle] = true: ctx:delete() in this message
local pfresh = {}   -- [handle] = true: the state is init's, untouched
local node_name = "?"
local default_ask_timeout = 5
local MAX_ASK_S = 86400                -- one day
local MAX_AFTER_S = 365 * 86400        -- one year
-- The largest snapshot, durable state or events of one command written
-- (MS_PERSIST_TEXT_MAX, runtime/core/config.h: one statement's limit less
-- room for its SQL and other parameters).
local MAX_SNAPSHOT_BYTES = core.PERSIST_TEXT_MAX
local MAX_WRITE_TEXT = "%s %d bytes, above the " .. MAX_SNAPSHOT_BYTES
    .. " bytes one statement may take: nothing was written"
local current                          -- the coroutine running a handler now

local decoder = cjson.new()
-- the host's own encoder (runtime/lua/json_encode.c): numbers exact, where
-- lua-cjson 2.1.0 keeps 14 digits (DESIGN G9)
local encoder = require("moonshard.encoder")
-- strict JSON: NaN, Infinity and hex numbers are not JSON (lua-cjson takes
-- them by default), and an entity holding one could never reply again
decoder.decode_invalid_numbers(false)
local decode, encode = decoder.decode, encoder.encode
-- ctx:reply's short way for a flat object (the encoder's bytes, in Lua)
local flat_encode = require("moonshard.flat_reply").encode

local function safe_decode(s)
    local ok, v = pcall(decode, s)
    if ok then return v end
    return nil, v
end

local function errtable(code, message)
    return errors.new(code, message)
end

-- partitioners --------------------------------------------------------------

-- [type index] = { partitioner function, shard_count, type name }, for the
-- types that place their ids themselves. The shard of an entity's send is
-- computed here and handed to core.*, which never call back into Lua.
local partitioners = {}
local partition_logged = {} -- [type index] = failures logged
-- [coroutine or "main"] = true while a partitioner runs there: it may not
-- route (a send would place an id while placing one)
local placing = setmetatable({}, { __mode = "k" })

-- The shard of `id` for type t: nil for a type without its own
-- partitioner, else the shard, or nil and an error table (logged: the
-- first failures, then every power of two).
local function shard_for(t, id)
    local here = running() or "main"
    if placing[here] then
        error("a partitioner cannot send, ask or look up owners", 3)
    end
    local p = partitioners[t]
    -- a type whose module failed to load is refused as unavailable by
    -- core.* before any shard is needed: its partitioner is not run
    if not p or not behaviors[t] then return nil end
    placing[here] = true
    local ok, s = pcall(p[1], id, p[2])
    placing[here] = nil
    if ok and type(s) == "number" and s >= 0 and s < p[2] and s == floor(s) then
        return s
    end
    local why = ok and ("it returned " .. tostring(s) .. ", not an integer "
                        .. "in 0.." .. (p[2] - 1))
                or ("it raised: " .. tostring(s))
    local n = (partition_logged[t] or 0) + 1
    partition_logged[t] = n
    if band(n, n - 1) == 0 then
        log_c(0, "error", "the partitioner of " .. p[3] .. " failed for "
              .. "id '" .. id:sub(1, 64) .. "' (" .. n .. " times so far): "
              .. why .. "; the message is refused")
    end
    return nil, errtable("partitioner", "the partitioner of " .. p[3]
                         .. " failed: " .. why)
end
M.shard_for = shard_for

-- ref ---------------------------------------------------------------------

local Ref = {}
Ref.__index = Ref

-- msg with the operation id of `opts` (a copy; msg itself unchanged)
local function with_op(msg, opts, level)
    if opts == nil then return msg end
    if type(opts) ~= "table" then
        error("bad 'opts' argument: a table is required", level)
    end
    local op = opts.op_id
    if op == nil then return msg end
    if type(op) ~= "string" or #op == 0 or #op > OP_MAX
        or find(op, "[%z\1-\32\"\\\127-\255]") then
        error("bad 'op_id': 1 to " .. OP_MAX .. " bytes of visible ASCII "
              .. "other than '\"' and '\\'", level)
    end
    local copy = {}
    for k, v in pairs(msg) do copy[k] = v end
    copy[OP_FIELD] = op
    return copy
end

function Ref:tell(msg, opts)
    if type(msg) ~= "table" then
        error("bad 'msg' argument: a table is required", 2)
    end
    msg = with_op(msg, opts, 3)
    local shard, perr = shard_for(self._t, self.id)
    if perr then return nil, perr end
    local ok, code, message = tell_c(self._t, self.id, encode(msg), shard)
    if ok then return true end
    return nil, errtable(code, message)
end

-- An ordered stop request: the entity is passivated after the messages
-- it accepted before (a remembered entity is forgotten: it is not
-- started again). true, or nil, err.
function Ref:stop()
    local shard, perr = shard_for(self._t, self.id)
    if perr then return nil, perr end
    local ok, code, message = core.stop_entity(self._t, self.id, shard)
    if ok then return true end
    return nil, errtable(code, message)
end

-- Waits in the running handler's coroutine for the end of ask `corr`
-- (issued by ask_c or activate_c), then returns the reply or nil, err.
-- The raw reply (a string) or nil, err.
local function await_raw(co)
    detached[co] = true
    -- a yield can fail (across a C call: inside table.sort's comparator,
    -- say); if someone catches that, the entity must not look suspended
    local ok, reply, err = pcall(yield, ASK)
    if not ok then
        detached[co] = nil
        error(reply, 0)
    end
    current = co
    if reply then return reply end
    local e = safe_decode(err)
    if type(e) == "table" then
        return nil, errtable(e.code or "error", e.message or "")
    end
    return nil, errtable("error", tostring(err))
end

local function await(co)
    local reply, err = await_raw(co)
    if reply then
        local v, derr = safe_decode(reply)
        if v == nil and derr then
            return nil, errtable("bad_json", "reply: " .. tostring(derr))
        end
        return v
    end
    return nil, err
end

-- The running handler's coroutine, or raises: asks and activations must be
-- made by a handler itself.
local function handler_coroutine(what)
    local co = running()
    if co == nil or co ~= current then
        error(what .. " must be called by a handler itself (not from a "
              .. "coroutine it created)", 3)
    end
    return co
end

local function check_seconds(seconds)
    seconds = seconds or default_ask_timeout
    if type(seconds) ~= "number" or not (seconds > 0 and seconds <= MAX_ASK_S) then
        error("bad 'seconds' argument: the ask timeout must be in (0, "
              .. MAX_ASK_S .. "]", 3)
    end
    return seconds
end

function Ref:ask(msg, seconds, opts)
    if type(msg) ~= "table" then
        error("bad 'msg' argument: a table is required", 2)
    end
    msg = with_op(msg, opts, 3)
    seconds = check_seconds(seconds)
    local co = handler_coroutine("ask")
    local shard, perr = shard_for(self._t, self.id)
    if perr then return nil, perr end
    local corr, code, message = ask_c(self._t, self.id, encode(msg),
                                      seconds * 1000, shard)
    if not corr then return nil, errtable(code, message) end
    return await(co)
end

-- Eager creation of entity (tname, id) where it lives; inside a handler,
-- waits like an ask. Returns true when this call activated it, false when
-- it was active already, or nil, err.
function M.activate(tname, id, seconds)
    local t = type(tname) == "string" and type_ids[tname]
    if not t then error("unknown entity type '" .. tostring(tname) .. "'", 2) end
    if type(id) ~= "string" or id == "" then
        error("bad 'id' argument: a non-empty string is required", 2)
    end
    seconds = check_seconds(seconds)
    local co = handler_coroutine("activate")
    local shard, perr = shard_for(t, id)
    if perr then return nil, perr end
    local corr, code, message = core.activate(t, id, seconds * 1000, shard)
    if not corr then return nil, errtable(code, message) end
    local r, err = await(co)
    if not r then return nil, err end
    return r.created == true
end

-- ctx ---------------------------------------------------------------------

-- A ctx is a 12-byte FFI struct (handle, the activation's generation,
-- shard, type index), made for each delivery and kept by nothing of the
-- host's: an idle entity holds only its state (bench local: 358 -> 302
-- bytes an entity at 1,000,000 with the per-entity ctx and its slot gone;
-- a delivery's ctx is garbage once its message is handled). The type,
-- node name and methods come from one table per entity type (`protos`);
-- ctx.id is read from the dispatcher's record when asked for, so the id
-- is kept once, in C. (handle, generation) names one activation: a ctx
-- kept past it (in a module table, or in a state that a passivation
-- dropped) refuses to act even when the handle names another entity.
local Ctx = {}
local protos = {}      -- [type index] = type, node and methods of its ctxs
local u32_out = ffi.new("uint32_t[1]")

local function ctx_index(c, k)
    local v = protos[c._t][k]
    if v ~= nil then return v end
    if k == "id" then
        local p = C.ms_lua_entity_id(BRIDGE, c._h, c._g, u32_out)
        if p ~= nil then return ffi_string(p, u32_out[0]) end
    end
    return nil
end

-- The leaf functions refuse a ctx whose handle is not the handler's
-- entity; this refuses one whose activation is gone.
local function live_h(c)
    if C.ms_lua_ctx_live(BRIDGE, c._h, c._g) == 0 then
        error("this ctx belongs to another entity's handler (its own "
              .. "entity was passivated)", 3)
    end
    return c._h
end

local function ctx_newindex(_, k)
    error("ctx." .. tostring(k) .. ": a ctx takes no fields of its own "
          .. "(keep data in the entity's state)", 2)
end

local new_ctx = ffi.metatype("struct ms_lua_ctx", {
    __index = ctx_index, __newindex = ctx_newindex,
    __tostring = function(c)
        return format("ctx: %s %s", protos[c._t].type, tostring(c.id))
    end,
})

-- what core.reply_msg's codes mean (runtime/lua/leaf.c; a persistent
-- entity's reply, kept encoded until its commit, goes through core.reply)
local REPLY_ERRORS = {
    "ctx:reply: the reply is above the message size limit",
    "ctx:reply called twice for one message",
    "this ctx belongs to another entity's handler",
}

-- A flat object is written here and handed over through the FFI, which
-- keeps a compiled handler in its trace; any other reply is the
-- encoder's (moonshard/flat_reply.lua). The bytes are the same.
function Ctx:reply(msg)
    local h = live_h(self)
    local p, len = flat_encode(msg)
    local rc
    if p then
        rc = C.ms_lua_reply(BRIDGE, h, p, len)
    else
        rc = reply_msg(h, msg)
    end
    if rc ~= 0 then error(REPLY_ERRORS[rc], 2) end
end

function Ctx.ref(_, tname, id)
    if type(tname) ~= "string" then
        error("bad 'type' argument: a string is required", 2)
    end
    if type(id) ~= "string" or id == "" then
        error("bad 'id' argument: a non-empty string is required", 2)
    end
    local t = type_ids[tname]
    if not t then error("unknown entity type '" .. tname .. "'", 2) end
    return setmetatable({ type = tname, id = id, _t = t }, Ref)
end

function Ctx:after(seconds, msg)
    if type(seconds) ~= "number" or not (seconds >= 0 and seconds <= MAX_AFTER_S) then
        error("bad 'seconds' argument: must be in [0, " .. MAX_AFTER_S .. "]", 2)
    end
    if type(msg) ~= "table" then
        error("bad 'msg' argument: a table is required", 2)
    end
    local id, err = after_c(live_h(self), seconds * 1000, encode(msg))
    if not id then error(err, 2) end
    return id
end

function Ctx:cancel(timer)
    return cancel_c(live_h(self), timer)
end

function Ctx:stop()
    stop_c(live_h(self))
end

function Ctx:log(level, ...)
    local n = select("#", ...)
    local parts = {}
    for i = 1, n do parts[i] = tostring((select(i, ...))) end
    log_c(live_h(self), level, concat(parts, " "))
end

function Ctx.now(_)
    return now_c()
end

-- driver ------------------------------------------------------------------
--
-- Handlers are called directly, not through xpcall: that keeps the driver
-- loop and the handler in one compiled trace. A handler that raises kills
-- its driver coroutine; the host sees the error from lua_resume, logs it
-- with the coroutine's traceback, calls M.on_error and starts a new driver.

local function default_init()
    return {}
end

local function activate(h, b, t, ctx)
    states[h] = INITING -- no address: nothing reads it in a delivery
    local st = (b.init or default_init)(ctx)
    if type(st) ~= "table" then
        error("init must return a table, got " .. type(st))
    end
    set_state(h, st)
    if persist[t] then pfresh[h] = true end
end

-- Forgets entity h (its ctxs stop working: the dispatcher's generation of
-- the handle moves on with the next activation).
local function forget(h)
    set_state(h, nil)
    migrate_from[h] = nil
    pmeta[h], preplies[h], pdelete[h], pfresh[h] = nil, nil, nil, nil
end

-- A handoff's stop passes the idle entities of a type whose behavior runs
-- nothing at a stop without a delivery each (ms_dispatch_set_quiet_stop):
-- C passivates them and parks their handles, and the driver forgets their
-- states here before it takes its next delivery.
local PARKED = core.PARKED
local parked_n = ffi.new("uint32_t[1]")
local function forget_parked()
    local hs = C.ms_lua_parked(BRIDGE, parked_n)
    for i = 0, parked_n[0] - 1 do
        local h = hs[i]
        states[h] = nil -- C forgets the address (ms_lua_release_parked)
        migrate_from[h] = nil
        pmeta[h], preplies[h], pdelete[h], pfresh[h] = nil, nil, nil, nil
    end
    C.ms_lua_release_parked(BRIDGE)
end

-- Whether a handoff may stop type idx's idle entities that way: nothing
-- runs at their stop (no `stopped`, no `migrate` to run before it, no
-- persistence). Looked at when the behavior is loaded or swapped.
local function set_quiet_stop(idx, mod)
    local quiet = mod.stopped == nil and mod.migrate == nil
        and persist[idx] == nil
    C.ms_lua_quiet_stop(BRIDGE, idx, quiet and 1 or 0)
end

local function passivate(h, b, ctx)
    local stopped = b.stopped
    if stopped then stopped(states[h], ctx) end
    forget(h)
end

-- Entity h was active when its behavior was swapped: before the new code
-- handles its next message, `migrate(state, old_version, ctx)` (optional)
-- may convert the state. A migrate that raises fails that message like a
-- handler error, and runs again before the next one.
local function migrate(h, b, ctx)
    local m = b.migrate
    if m then
        local st = m(states[h], migrate_from[h], ctx)
        if type(st) == "table" then
            set_state(h, st)
        end
    end
    migrate_from[h] = nil
end

-- persistence ---------------------------------------------------------------
--
-- A type with `persistence = "events"` has command(state, cmd, ctx),
-- returning a list of events (nil or {}: nothing to write), and
-- apply(state, event), which may return a new state. One with
-- `persistence = "state"` has an ordinary receive; its state is saved
-- after each message that changed it (its encoding differs from the last
-- one saved), and ctx:delete() deletes it (see below).
--
-- Recovery: before an entity's first message (and again after a write
-- whose outcome is unknown) init(ctx) gives the empty state, the latest
-- snapshot or the saved state replaces it, then the events after the
-- snapshot are applied in order. The handler waits for the database like
-- an ask (core.p_load).
--
-- Writes: the events of a command are encoded with the host's exact
-- encoder and applied (decoded from that encoding, as recovery will see
-- them), then written in one transaction with, every `snapshot_every`
-- events, the state after them; only after the commit is the buffered
-- ctx:reply sent. A failed commit fails the message with the error's
-- code: stale_owner and revision_conflict stop the entity; any other
-- failure makes it recover again before its next message.

-- A persistent entity's ctx:reply and ctx:delete act in Lua (kept until
-- the commit), not through a leaf function that checks the running
-- handler: this refuses a ctx whose activation is gone, and one of
-- another entity (kept in a module table: its entity may be waiting in
-- an ask, its reply and delete pending here).
local function own_h(c)
    local live = C.ms_lua_ctx_live(BRIDGE, c._h, c._g)
    if live == 0 then
        error("this ctx's entity is gone", 3)
    elseif live ~= 1 then
        error("this ctx belongs to another entity's handler", 3)
    end
    return c._h
end

-- ctx:reply of a persistent entity: kept until the commit
local function persistent_reply(self, msg)
    local h = own_h(self)
    if preplies[h] ~= nil then
        error("ctx:reply called twice for one message", 2)
    end
    preplies[h] = encode(msg)
end

-- ctx:delete() (durable state): after this message, the saved state is
-- deleted and the entity stops; its next message starts from init.
local function persistent_delete(self)
    pdelete[own_h(self)] = true
end

local function flush_reply(h)
    local r = preplies[h]
    if r ~= nil then
        preplies[h] = nil
        local ok, err = reply_c(h, r)
        if not ok and err then error(err, 0) end
    end
end

-- A load or write failed with err {code, message}: the message fails
-- with that error; the entity stops (stale owner, conflicting history)
-- or recovers before its next message.
local function persist_failed(h, what, err)
    preplies[h], pdelete[h], pmeta[h] = nil, nil, nil
    local code, message = err.code or "error", err.message or ""
    if code == "stale_owner" or code == "revision_conflict" then
        log_c(h, "error", what .. " refused (" .. code .. "): " .. message
              .. "; the entity stops")
        stop_c(h)
    else
        log_c(h, "warn", what .. " failed (" .. code .. "): " .. message
              .. "; the entity recovers before its next message")
    end
    p_fail(h, code, what .. " failed: " .. message)
end

-- One "<length>\n<bytes>" piece of a load's reply at `pos`.
local function chunk(raw, pos)
    local _, e, len = find(raw, "^(%d+)\n", pos)
    if not e then error("recovery: malformed journal reply") end
    len = tonumber(len)
    return sub(raw, e + 1, e + len), e + len + 1
end

local function decode_stored(text, what)
    local v, err = safe_decode(text)
    if type(v) ~= "table" then
        error("recovery: the stored " .. what .. " is not a JSON object ("
              .. tostring(err or type(v)) .. ")")
    end
    return v
end

-- The answer of a load or lookup core.p_* started (corr, or nil, code,
-- message): the raw reply, or nil after persist_failed(h, what, err).
local function loaded(h, co, what, corr, code, message)
    local raw, err
    if corr then
        raw, err = await_raw(co)
    else
        err = errtable(code, message)
    end
    if not raw then persist_failed(h, what, err) end
    return raw
end

-- Recovers entity h from the database; false when the load failed (the
-- message then fails with the load's error).
local function recover(h, b, P, co, ctx)
    local raw = loaded(h, co, "recovery", p_load(h))
    if not raw then return false end
    local _, e, last, rev, has_snap, n = find(raw, "^(%d+) (%d+) (%d) (%d+)\n")
    if not e then error("recovery: malformed journal reply") end
    local pos, text = e + 1
    if not pfresh[h] then
        -- recovering again (after a failure): the state in memory may
        -- hold changes the database never got; start from init's
        local st = (b.init or default_init)(ctx)
        if type(st) ~= "table" then
            error("init must return a table, got " .. type(st))
        end
        set_state(h, st)
    end
    pfresh[h] = nil
    if P.kind == "events" then
        local st = states[h]
        if has_snap == "1" then
            text, pos = chunk(raw, pos)
            st = decode_stored(text, "snapshot")
        end
        local apply = b.apply
        for _ = 1, tonumber(n) do
            text, pos = chunk(raw, pos)
            local r = apply(st, decode_stored(text, "event"), ctx)
            if type(r) == "table" then st = r end
        end
        set_state(h, st)
        pmeta[h] = { seq = tonumber(last) }
    else
        rev = tonumber(rev)
        if rev > 0 then
            text = chunk(raw, pos)
            set_state(h, decode_stored(text, "state"))
        else
            text = encode(states[h])
        end
        pmeta[h] = { rev = rev, last = text }
    end
    return true
end

-- Waits for a write started by core.p_append / p_save / p_record; true,
-- or false after persist_failed.
local function written(h, co, what, corr, code, message)
    return loaded(h, co, what, corr, code, message) ~= nil
end

-- Records operation `op` alone (the message wrote nothing else), with
-- the reply ctx:reply made; true, or false after persist_failed.
local function record_op(h, co, op)
    return written(h, co, "the operation record",
                   p_record(h, op, preplies[h]))
end

local function run_command(h, b, P, msg, ctx, co, op)
    local evs = b.command(states[h], msg, ctx)
    if evs == nil then return op == nil or record_op(h, co, op) end
    if type(evs) ~= "table" then
        error("command must return a list of events or nil, got " .. type(evs))
    end
    local n = #evs
    if n == 0 then return op == nil or record_op(h, co, op) end
    local enc, size = {}, 0
    for i = 1, n do
        if type(evs[i]) ~= "table" then
            error("event " .. i .. " is a " .. type(evs[i]) .. ", not a table")
        end
        enc[i] = encode(evs[i])
        size = size + #enc[i]
    end
    if size > MAX_SNAPSHOT_BYTES then
        persist_failed(h, "the event write", errtable("too_large",
            format(MAX_WRITE_TEXT, "the events of this command take", size)))
        return false
    end
    local m = pmeta[h]
    pmeta[h] = nil -- until the commit: any failure recovers or stops
    local st, apply = states[h], b.apply
    for i = 1, n do
        local r = apply(st, decode(enc[i]), ctx)
        if type(r) == "table" then st = r end
    end
    set_state(h, st)
    local seq0, last = m.seq, m.seq + n
    local every, snap = P.every, nil
    if every > 0 and floor(last / every) > floor(seq0 / every) then
        snap = encode(st)
        if #snap > MAX_SNAPSHOT_BYTES then
            -- the events still commit (failing them would fail every
            -- command crossing this boundary, for good); the snapshot is
            -- tried again at the next one
            log_c(h, "warn", "the snapshot at sequence " .. last .. " ("
                  .. #snap .. " bytes) is above the " .. MAX_SNAPSHOT_BYTES
                  .. " bytes one may take: skipped, the events are "
                  .. "written without it")
            snap = nil
        end
    end
    if not written(h, co, "the event write",
                   p_append(h, seq0 + 1, enc, snap, P.delete, op,
                            op and preplies[h])) then
        return false
    end
    pmeta[h] = { seq = last }
    return true
end

local function run_receive(h, b, msg, ctx, co, op)
    receive_set(h, b.receive(states[h], msg, ctx))
    local m = pmeta[h]
    local reply = op and preplies[h]
    if pdelete[h] then
        pdelete[h] = nil
        if m.rev > 0 then
            pmeta[h] = nil
            if not written(h, co, "the state delete",
                           p_save(h, m.rev, nil, op, reply)) then
                return false
            end
        elseif op and not record_op(h, co, op) then
            return false
        end
        stop_c(h)
        pmeta[h] = nil
        return true
    end
    local text = encode(states[h])
    if text == m.last then return op == nil or record_op(h, co, op) end
    pmeta[h] = nil
    if #text > MAX_SNAPSHOT_BYTES then
        persist_failed(h, "the state save", errtable("too_large",
            format(MAX_WRITE_TEXT, "the state takes", #text)))
        return false
    end
    if not written(h, co, "the state save",
                   p_save(h, m.rev, text, op, reply)) then
        return false
    end
    pmeta[h] = { rev = m.rev + 1, last = text }
    return true
end

-- Handles one delivery of a persistent entity (kind is not STOP).
local function run_persistent(h, b, P, kind, payload, co, ctx)
    preplies[h], pdelete[h] = nil, nil
    if pmeta[h] == nil and not recover(h, b, P, co, ctx) then return end
    if kind == KIND_ACTIVATE then return end
    local msg = decode(payload)
    if type(msg) ~= "table" then
        error("bad message: not a JSON object")
    end
    local op = msg[OP_FIELD]
    if op ~= nil then
        msg[OP_FIELD] = nil
        if type(op) ~= "string" or #op == 0 or #op > OP_MAX then
            error("bad operation id (field \"" .. OP_FIELD .. "\"): a "
                  .. "string of 1 to " .. OP_MAX .. " bytes is required")
        end
        -- committed under this id already: not applied again, an ask
        -- gets the reply stored with it
        local raw = loaded(h, co, "the operation lookup", p_find(h, op))
        if not raw then return end
        if raw ~= "0" then
            if sub(raw, 1, 1) == "2" then
                local ok, rerr = reply_c(h, sub(raw, 2))
                if not ok and rerr then error(rerr, 0) end
            end
            return
        end
    end
    local ok
    if P.kind == "events" then
        ok = run_command(h, b, P, msg, ctx, co, op)
    else
        ok = run_receive(h, b, msg, ctx, co, op)
    end
    if ok then flush_reply(h) end
end

-- The ctx of the delivery `dl` reads (of type t).
local function ctx_of(dl, t)
    return new_ctx(dl.h, dl.gen, dl.shard, t)
end

function M.driver()
    local me = running()
    local dl = ffi.new("struct ms_lua_delivery")
    local prev = 0
    while true do
        local h = C.ms_lua_next(BRIDGE, prev, dl)
        if h == 0 then
            prev = 0
            yield(IDLE)
        elseif h == PARKED then
            prev = 0
            forget_parked()
        else
            current = me
            local t = dl.type
            local b = behaviors[t]
            -- the delivery's ctx, made where it is first needed: on the
            -- plain path after the decode (a C call the trace does not
            -- enter), so that the compiler can sink it when the handler
            -- does not keep it
            local ctx
            if dl.init ~= 0 then
                ctx = ctx_of(dl, t)
                activate(h, b, t, ctx)
                b = behaviors[t] -- init may have waited across a reload
            end
            local kind = dl.kind
            if migrate_from[h] ~= nil and kind ~= KIND_ACTIVATE then
                ctx = ctx or ctx_of(dl, t)
                migrate(h, b, ctx)
            end
            local P = persist[t]
            if kind == KIND_STOP then
                passivate(h, b, ctx or ctx_of(dl, t))
            elseif P then
                run_persistent(h, b, P, kind, kind ~= KIND_ACTIVATE
                               and ffi_string(dl.payload, dl.len), me,
                               ctx or ctx_of(dl, t))
            elseif kind == KIND_ACTIVATE then -- luacheck: ignore 542
                -- activation only: init ran above if it was needed
            else
                local msg = decode(ffi_string(dl.payload, dl.len))
                if type(msg) ~= "table" then
                    error("bad message: not a JSON object")
                end
                -- an in-memory type keeps nothing to check an operation
                -- id against: the id is dropped (README "Operation ids")
                if msg[OP_FIELD] ~= nil then msg[OP_FIELD] = nil end
                receive_set(h, b.receive(states[h], msg,
                                         ctx or ctx_of(dl, t)))
            end
            if detached[me] then
                detached[me] = nil
                done(h)
                prev = 0
                yield(FREE)
            else
                prev = h
            end
        end
    end
end

-- Called by the host after a handler of entity h raised `e` (its driver
-- coroutine is dead). Returns the error text and whether the entity failed
-- to activate (init raised). `kind` is the delivery's kind, 0 if unknown.
function M.on_error(h, e, kind)
    -- decide first: the error object's own __tostring may raise
    local init_failed = kind ~= KIND_STOP
        and (states[h] == nil or states[h] == INITING)
    -- a persistent entity's memory may be half-changed: recover it
    pmeta[h], preplies[h], pdelete[h] = nil, nil, nil
    if kind == KIND_STOP or init_failed then
        forget(h)
    end
    local ok, msg = pcall(tostring, e)
    if not ok then
        msg = "(an error object whose __tostring raised: "
              .. (type(msg) == "string" and msg or type(msg)) .. ")"
    elseif type(e) == "table" and type(e.message) == "string"
        and msg:find("^table: ") then
        msg = e.message -- error({code =, message =}) says what it means
    end
    return msg, init_failed
end

-- setup -------------------------------------------------------------------

-- `persistence`: nil, "events" or "state" (the type's config)
local function check_behavior(mod, persistence)
    if type(mod) ~= "table" then
        return nil, "the module must return a table, got " .. type(mod)
    end
    if persistence == "events" then
        if type(mod.command) ~= "function" then
            return nil, "the module has no command(state, cmd, ctx) "
                .. "function (persistence = \"events\")"
        end
        if type(mod.apply) ~= "function" then
            return nil, "the module has no apply(state, event) function "
                .. "(persistence = \"events\")"
        end
    elseif type(mod.receive) ~= "function" then
        return nil, "the module has no receive(state, msg, ctx) function"
    end
    for _, f in ipairs({ "init", "stopped" }) do
        if mod[f] ~= nil and type(mod[f]) ~= "function" then
            return nil, "'" .. f .. "' must be a function"
        end
    end
    return mod
end

-- Loads every behavior. `types` is the config's entity_list (index 0-based
-- in C order). Returns a list of {index=, name=, err=} for modules that
-- failed; those types stay unavailable.
function M.start(opts)
    node_name = opts.node
    decoder.decode_max_depth(opts.json_max_depth)
    encoder.set_max_depth(opts.json_max_depth)
    local failed = {}
    for i, t in ipairs(opts.types) do
        local idx = i - 1
        type_ids[t.name] = idx
        local proto = { type = t.name, node = node_name }
        for k, f in pairs(Ctx) do proto[k] = f end
        if t.persistence then
            persist[idx] = { kind = t.persistence, name = t.name,
                             every = t.snapshot_every or 0,
                             delete = t.delete_events_on_snapshot == true }
            proto.reply = persistent_reply
            if t.persistence == "state" then
                proto.delete = persistent_delete
            end
        end
        protos[idx] = proto
        modules[idx] = t.module
        if t.partitioner then
            partitioners[idx] = { t.partitioner, t.shard_count, t.name }
        end
        local ok, mod = pcall(require, t.module)
        local err
        if ok then
            mod, err = check_behavior(mod, t.persistence)
        else
            mod, err = nil, tostring(mod)
        end
        if mod then
            behaviors[idx] = mod
            set_quiet_stop(idx, mod)
        else
            failed[#failed + 1] = { index = idx, name = t.name,
                                    module = t.module, err = err }
        end
    end
    return failed
end

-- Hot reload: replaces the behavior of every type whose module is
-- `module_name` by `mod` (the module's new value), after the same shape
-- check as at start. Live entities keep their state and run `mod` from
-- their next message; those active now are first passed through
-- mod.migrate(state, old_version, ctx) if it exists, where old_version is
-- the old module's `version` field, else its load count (1 for the module
-- as the node started it). A type whose module failed to load at start
-- stays unavailable. Returns the list of type names swapped and the new
-- version (mod.version or its load count), or nil and the reason (then
-- nothing changed).
function M.swap_behavior(module_name, mod)
    -- each type running the module checks what its persistence needs
    local _, err = check_behavior(mod)
    for idx, name in pairs(modules) do
        if name == module_name then
            _, err = check_behavior(mod, persist[idx] and persist[idx].kind)
            if err then break end
        end
    end
    if err then return nil, err end
    if mod.migrate ~= nil and type(mod.migrate) ~= "function" then
        return nil, "'migrate' must be a function"
    end
    local idxs = {}
    for idx, name in pairs(modules) do
        if name == module_name and behaviors[idx] then
            idxs[#idxs + 1] = idx
        end
    end
    if #idxs == 0 then
        return nil, "no entity type of this node runs module '"
            .. tostring(module_name) .. "'"
    end
    table.sort(idxs)
    local names, version = {}, nil
    for i, idx in ipairs(idxs) do
        local old, count = behaviors[idx], loads[idx] or 1
        local old_version = old.version
        if old_version == nil then old_version = count end
        -- the active entities of the type: those with a state, and those
        -- whose init has not returned yet (INITING)
        for h in pairs(states) do
            if migrate_from[h] == nil and
                C.ms_lua_entity_type(BRIDGE, h, u32_out) == idx then
                migrate_from[h] = old_version
            end
        end
        behaviors[idx] = mod
        set_quiet_stop(idx, mod)
        loads[idx] = count + 1
        names[i] = protos[idx].type
        version = mod.version
        if version == nil then version = count + 1 end
    end
    return names, version
end

-- true when table t holds a number a double cannot be (1e999 decodes to
-- infinity): no reply could carry it again
local function non_finite(t)
    for _, x in pairs(t) do
        if type(x) == "number" and (x ~= x or x == huge or x == -huge) then
            return true
        elseif type(x) == "table" and non_finite(x) then
            return true
        end
    end
    return false
end

-- lua-cjson's verdict on an incoming payload: nil when it decodes to an
-- object, else a code ("bad_json" | "not_object") and the reason. It only
-- explains: the node's strict check (runtime/core/jsoncheck.c) decides
-- alone, and refuses what lua-cjson would take leniently (`1.`, raw
-- control characters...), so this runs only for what it refused.
function M.check(payload)
    local ok, v = pcall(decode, payload)
    if not ok then return "bad_json", tostring(v) end
    if type(v) ~= "table" or not find(payload, "^%s*{") then
        return "not_object", "the message must be a JSON object, got "
            .. (type(v) == "table" and "an array" or type(v))
    end
    if non_finite(v) then
        return "bad_json", "a number is too large for a double"
    end
    return nil
end

-- Number of entities with Lua state (for tests and the bench).
function M.state_count()
    local n = 0
    for _ in pairs(states) do n = n + 1 end
    return n
end

return M
