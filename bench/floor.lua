-- floor: the bare floor `moonshard-bench local` compares against: a
-- LuaJIT loop that decodes the same JSON payload and calls the same
-- behavior's receive on a state found by id, with no runtime around it.
-- The host runs it in a fresh Lua VM of its own.

local cjson = require "cjson"
local now = require("moonshard.clock").now

local M = {}

-- arg: "MODULE IDS MESSAGES PAYLOAD" -> "messages_per_second"
function M.floor(arg)
    local module, ids, messages, payload = arg:match("^(%S+) (%d+) (%d+) (.*)$")
    ids, messages = tonumber(ids), tonumber(messages)
    local behavior = require(module)
    local decode = cjson.new().decode
    local ctx = { reply = function() end }
    local names, states = {}, {}
    for i = 1, ids do
        names[i] = "c-" .. i
        states[names[i]] = behavior.init(ctx)
    end
    local receive = behavior.receive
    local t0 = now()
    for i = 1, messages do
        local st = states[names[(i - 1) % ids + 1]]
        receive(st, decode(payload), ctx)
    end
    local t = now() - t0
    return tostring(messages / t)
end

-- Same argument: the floor from bytes. A message reaches a runtime as
-- bytes, its entity's id as bytes too: this loop takes both from C memory
-- each message (ffi.string, which interns them as Lua strings) before it
-- finds the state and decodes; the bare floor above uses ids and a
-- payload interned before its clock starts. (The runtime finds the state
-- another way, by a hash of the id's bytes in C: this is a decomposition
-- of the floor's advantage, not a bound on the runtime.)
-- With the payload of an ask, ctx:reply encodes its reply with the
-- runtime's own encoder (moonshard.encoder), as an ask must.
function M.bytes(arg)
    local module, ids, messages, payload = arg:match("^(%S+) (%d+) (%d+) (.*)$")
    ids, messages = tonumber(ids), tonumber(messages)
    local ffi = require "ffi"
    local ffi_string = ffi.string
    local encode = require("moonshard.encoder").encode
    local behavior = require(module)
    local decode = cjson.new().decode
    local ctx = { reply = function(_, msg) encode(msg) end }
    local STRIDE = 32
    local idbuf = ffi.new("char[?]", ids * STRIDE)
    local idlen = ffi.new("uint8_t[?]", ids)
    local states = {}
    for i = 1, ids do
        local name = "c-" .. i
        ffi.copy(idbuf + (i - 1) * STRIDE, name, #name)
        idlen[i - 1] = #name
        states[name] = behavior.init(ctx)
    end
    -- a string initializer copies the string and its terminating zero,
    -- whatever the size of a char[?]: room for both
    local plen = #payload
    local pbuf = ffi.new("char[?]", plen + 1, payload)
    local receive = behavior.receive
    local t0 = now()
    for i = 1, messages do
        local k = (i - 1) % ids
        local st = states[ffi_string(idbuf + k * STRIDE, idlen[k])]
        receive(st, decode(ffi_string(pbuf, plen)), ctx)
    end
    local t = now() - t0
    return tostring(messages / t)
end

-- Same argument, then the flags " ask" for asks, " shuffled" for the
-- entities visited in a fixed random order (see bench/queue.c), and
-- " activated" for states made as a runtime makes them (below): the queue
-- floor, the least that a runtime of moonshard's shape adds to the bare
-- floor (bench/queue.c). A sender hands each message over as bytes: C
-- hashes the id, finds its entity in a C table and copies the payload
-- into a FIFO; this loop pops it, takes the payload as a Lua string,
-- decodes it and calls receive on the entity's state. An ask's reply is
-- encoded (moonshard.encoder) and copied back to the asker, found by its
-- correlation id; on the way it interns the reply as a Lua string
-- (hashed, then found or made), which the runtime's ctx:reply does not:
-- a little more than the least, there (its asks make 4 Lua allocations
-- an ask, the same reply each time, so found, not made). The
-- clock starts after a full collection, as the runtime's rounds do. No
-- shards, activation, timers, limit, statistics or timeouts: a bound for
-- this machine, not a runtime.
--
-- Its states are made before its clock starts, as the bare floor's are:
-- back to back, or, with " activated", each by its entity's first
-- message, as an activation on a first message makes them: that message
-- decoded, a ctx made (kept until 64 later), init, and receive of the
-- message; the garbage of those lies between the states in memory, as it
-- does in a runtime (the same 5 allocations an entity as a node's
-- activation, counted with a uprobe on lj_alloc_malloc).
local queue_cdef = false
function M.queue(arg)
    local module, ids, messages, payload, flags =
        arg:match("^(%S+) (%d+) (%d+) (%b{})(.*)$")
    ids, messages = tonumber(ids), tonumber(messages)
    local ask, shuffled, activated = false, false, false
    for flag in flags:gmatch("%S+") do
        if flag == "ask" then ask = true
        elseif flag == "shuffled" then shuffled = true
        elseif flag == "activated" then activated = true
        else error("queue floor: unknown flag " .. flag) end
    end
    local ffi = require "ffi"
    if not queue_cdef then
        ffi.cdef [[
struct ms_qf_msg { uint32_t h; uint32_t len; uint32_t corr;
                   const char *payload; };
void *ms__qf_new(long nids, int shuffled);
void ms__qf_free(void *q);
int ms__qf_send(void *q, int k, const char *payload, uint32_t len,
                int ask);
uint32_t ms__qf_next(void *q, struct ms_qf_msg *out);
int ms__qf_reply(void *q, uint32_t corr, const char *json, uint32_t len);
uint64_t ms__qf_replies(const void *q);
size_t ms__qf_msg_size(void);
struct ms_qf_ctx { uint32_t h; uint32_t g; uint16_t shard; uint16_t t; };
]]
        queue_cdef = true
    end
    local C, ffi_string = ffi.C, ffi.string
    assert(ffi.sizeof("struct ms_qf_msg") == C.ms__qf_msg_size(),
           "struct ms_qf_msg differs between floor.lua and queue.c")
    local q = C.ms__qf_new(ids, shuffled and 1 or 0)
    if q == nil then
        error("queue floor: not enough memory, or too many ids")
    end
    -- freed by the GC if an error ends this function (lua_close runs it)
    q = ffi.gc(q, C.ms__qf_free)
    local encode = require("moonshard.encoder").encode
    local behavior = require(module)
    local decode = cjson.new().decode
    local m = ffi.new("struct ms_qf_msg")
    local ctx = { reply = function(_, msg)
        local s = encode(msg)
        if C.ms__qf_reply(q, m.corr, s, #s) ~= 0 then
            error("queue floor: a reply to no waiting ask, or too long")
        end
    end }
    local states = {}
    local receive = behavior.receive
    if activated then
        local kept, ctx_t = {}, ffi.typeof("struct ms_qf_ctx") -- luacheck: ignore 241
        local first = '{"type":"incr"}'
        for h = 1, ids do
            local msg = decode(first)
            local c = ctx_t(h, 1, 0, 0)
            kept[h % 64] = c
            states[h] = behavior.init(c)
            receive(states[h], msg, c)
        end
    else
        for h = 1, ids do states[h] = behavior.init(ctx) end
    end
    local plen, flag = #payload, ask and 1 or 0
    local CHUNK = 1000
    -- as the runtime's rounds start after a full collection (local.c):
    -- the garbage of the states' making is not collected on the clock
    collectgarbage()
    local t0 = now()
    local left = messages
    while left > 0 do
        local k = C.ms__qf_send(q, left < CHUNK and left or CHUNK, payload,
                                plen, flag)
        if k < 0 then error("queue floor: the payload does not fit") end
        if k == 0 then error("queue floor: the FIFO is full") end
        left = left - k
        while C.ms__qf_next(q, m) ~= 0 do
            receive(states[m.h], decode(ffi_string(m.payload, m.len)), ctx)
        end
    end
    local t = now() - t0
    local replies = tonumber(C.ms__qf_replies(q))
    C.ms__qf_free(ffi.gc(q, nil))
    if ask and replies ~= messages then
        error(("queue floor: %d replies to %d asks"):format(replies, messages))
    end
    return tostring(messages / t)
end

-- Same argument: the rate of the floor's cjson.decode of the payload alone
-- (what the floor's loop is made of, printed beside it).
function M.decode(arg)
    local messages, payload = arg:match("^%S+ %d+ (%d+) (.*)$")
    messages = tonumber(messages)
    local decode = cjson.new().decode
    local t0 = now()
    for _ = 1, messages do
        decode(payload)
    end
    return tostring(messages / (now() - t0))
end

return M
