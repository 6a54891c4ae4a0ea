/*
 * leaf.c -- moonshard.core, the functions a handler's ctx calls: they
 * enqueue into the dispatcher or send through the router and never call
 * back into Lua (STYLE: core.* functions are leaves); and ms_lua_next,
 * which hands the driver its next delivery through the LuaJIT FFI. Each
 * function finds its bridge in its upvalue.
 */
#include "bridge_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "../io/router.h"
#include "json_encode.h"

/* The bridge of a moonshard.core function (its upvalue). */
static struct ms_bridge *bridge_of(lua_State *L)
{
    return lua_touserdata(L, lua_upvalueindex(1));
}

/* The log fields naming entity h: type=, shard=, id=, each escaped. */
void ms__bridge_entity_fields(struct ms_bridge *b, uint32_t h, char *buf,
                              size_t len)
{
    int type;
    const char *id;
    size_t idlen;
    uint32_t shard;
    if (ms_dispatch_entity(b->d, h, &type, &id, &idlen, &shard)) {
        size_t o = ms_log_field_s(buf, len, 0, "type",
                                  ms_dispatch_type_name(b->d, type));
        o = ms_log_field_u(buf, len, o, "shard", shard);
        ms_log_field(buf, len, o, "id", id, idlen);
    } else {
        ms_log_field_u(buf, len, 0, "handle", h);
    }
}

static int push_err(lua_State *L, int err)
{
    lua_pushnil(L);
    lua_pushstring(L, ms_errname(err));
    lua_pushstring(L, ms_strerror(err));
    return 3;
}

/* Finishes entity h's current message: timing, then the dispatcher
 * (static, so that the delivery loop below gets it inline). */
static void finish(struct ms_bridge *b, uint32_t h)
{
    uint64_t took_ms = (ms__bridge_clock_ns() - b->cur_start_ns) / 1000000;
    int type;
    const char *id;
    size_t idlen;
    uint32_t shard;
    if (took_ms >= b->min_slow_ms &&
        ms_dispatch_entity(b->d, h, &type, &id, &idlen, &shard) &&
        took_ms >= b->cfg->types[type].slow_handler_ms) {
        char f[ENTITY_FIELDS_MAX];
        ms__bridge_entity_fields(b, h, f, sizeof f);
        ms_log(MS_LOG_WARN, f, "slow handler: %llu ms",
               (unsigned long long)took_ms);
        b->slow++;
        ms_dispatch_counters(b->d)->slow_handlers++;
    }
    ms_dispatch_done(b->d, h, ms__bridge_now_ms(b));
    b->handled++;
}

void ms__bridge_finish(struct ms_bridge *b, uint32_t h)
{
    finish(b, h);
}

/* ---- moonshard.core leaf functions ----------------------------------- */

/*
 * The delivery record the driver reads through the LuaJIT FFI; its
 * declaration in lua/moonshard/host.lua must match. Calling this leaf
 * through the FFI keeps the driver loop in one compiled trace (a classic
 * lua_CFunction call would end the trace on every message).
 */
struct ms_lua_delivery {
    uint32_t h;
    int32_t kind;
    int32_t init;
    int32_t type;
    uint32_t shard;
    uint32_t idlen;
    uint32_t len;
    uint32_t gen;       /* the activation's generation (a ctx keeps it) */
    const char *payload;
    const char *id;
};

/* Exported for the FFI: finishes `prev` (if not 0), then fills `out` with
 * the next delivery and returns its handle, or returns 0 when the round's
 * budget is spent or nothing is ready. Never calls into Lua. `bridge` is
 * core.BRIDGE, the bridge of the VM that calls. */
uint32_t ms_lua_next(void *bridge, uint32_t prev,
                     struct ms_lua_delivery *out);
static uint32_t lua_next_delivery(struct ms_bridge *b, uint32_t prev,
                                  struct ms_lua_delivery *out);

uint32_t ms_lua_next(void *bridge, uint32_t prev,
                     struct ms_lua_delivery *out)
{
    struct ms_bridge *b = bridge;
    b->in_next = 1;
    uint32_t h = lua_next_delivery(b, prev, out);
    b->in_next = 0;
    return h;
}

static uint32_t lua_next_delivery(struct ms_bridge *b, uint32_t prev,
                                  struct ms_lua_delivery *out)
{
    if (prev)
        finish(b, prev);
    b->cur_h = 0;
    const uint32_t *parked;
    if (ms_dispatch_parked(b->d, &parked))
        return MS_LUA_PARKED; /* forget those states first */
    struct ms_delivery dl;
    if (b->budget <= 0 || !ms_dispatch_next(b->d, &dl)) {
        ms_running_idle(&b->running);
        return 0;
    }
    b->budget--;
    /* the entity's state, which the handler reads after the payload's
     * decode: two lines, since its table's 64-byte header starts 16-byte
     * aligned and so crosses into the next line three times in four (that
     * line also holds a colocated array part, {1, 2, 3}; LuaJIT allocates
     * a hash part apart, which is not prefetched); a cold entity's state
     * was the largest single stall of a delivery (README "Where the time
     * goes") */
    const char *st = ms__bridge_state_addr(b, dl.h);
    if (st) {
        __builtin_prefetch(st);
        __builtin_prefetch(st + 64);
    }
    b->cur_h = dl.h;
    b->cur_kind = dl.kind;
    b->ask_corr = 0;
    b->cur_start_ns = ms__bridge_clock_ns();
    ms_running_set(&b->running, MS_RUN_HANDLER, (int)dl.type, dl.shard,
                   dl.id, dl.idlen, b->cur_start_ns);
    out->h = dl.h;
    out->kind = dl.kind;
    out->init = dl.init;
    out->type = (int32_t)dl.type;
    out->shard = dl.shard;
    out->idlen = (uint32_t)dl.idlen;
    out->len = (uint32_t)dl.len;
    out->gen = dl.gen;
    out->payload = dl.payload;
    out->id = dl.id;
    return dl.h;
}

/* Exported for the FFI: 0 when (h, gen), a ctx's, names no activation
 * that is still active (a ctx kept past its entity's passivation; the
 * handle may name another entity by now); 1 when it is active and its
 * handler runs now; 2 when it is active but another entity's handler
 * (or none) runs now (a persistent entity's ctx:reply and ctx:delete,
 * kept in Lua until the commit, refuse it: the leaf functions check the
 * running handler themselves). */
int32_t ms_lua_ctx_live(void *bridge, uint32_t h, uint32_t gen);

int32_t ms_lua_ctx_live(void *bridge, uint32_t h, uint32_t gen)
{
    struct ms_bridge *b = bridge;
    if (!ms_dispatch_live(b->d, h, gen))
        return 0;
    return h == b->cur_h ? 1 : 2;
}

/* Exported for the FFI: the id of the activation (h, gen) (ctx.id reads
 * it here, so that an entity's id is kept once, in the dispatcher's
 * record), its length in *len; NULL when that activation is gone. */
const char *ms_lua_entity_id(void *bridge, uint32_t h, uint32_t gen,
                             uint32_t *len);

const char *ms_lua_entity_id(void *bridge, uint32_t h, uint32_t gen,
                             uint32_t *len)
{
    struct ms_bridge *b = bridge;
    int type;
    const char *id;
    size_t idlen;
    uint32_t shard;
    if (!ms_dispatch_live(b->d, h, gen) ||
        !ms_dispatch_entity(b->d, h, &type, &id, &idlen, &shard))
        return NULL;
    *len = (uint32_t)idlen;
    return id;
}

/* Exported for the FFI: the type index of entity h and its shard in
 * *shard (a hot reload picks the entities of a type with it), or -1 when
 * h names no entity. */
int32_t ms_lua_entity_type(void *bridge, uint32_t h, uint32_t *shard);

int32_t ms_lua_entity_type(void *bridge, uint32_t h, uint32_t *shard)
{
    struct ms_bridge *b = bridge;
    int type;
    const char *id;
    size_t idlen;
    if (!ms_dispatch_entity(b->d, h, &type, &id, &idlen, shard))
        return -1;
    return type;
}

/* Milliseconds from a Lua number already checked by host.lua to be in
 * [0, MAX_DELAY_MS]; clamped again so that no cast is undefined. */
#define MAX_DELAY_MS (366.0 * 86400 * 1000)

static uint64_t to_ms(lua_Number v)
{
    if (!(v >= 0))
        return 0;
    return v > MAX_DELAY_MS ? (uint64_t)MAX_DELAY_MS : (uint64_t)v;
}

/* The leaf functions act for the entity whose handler runs now; a ctx
 * used from elsewhere (kept in a module table, used by another entity)
 * is refused. */
static uint32_t self_handle(struct ms_bridge *b, lua_State *L)
{
    uint32_t h = (uint32_t)luaL_checkinteger(L, 1);
    if (h != b->cur_h || h == 0)
        luaL_error(L, "this ctx belongs to another entity's handler");
    return h;
}

/* core.done(h): a detached coroutine finished its message. */
static int l_done(lua_State *L)
{
    struct ms_bridge *b = bridge_of(L);
    finish(b, (uint32_t)luaL_checkinteger(L, 1));
    return 0;
}

/* core.fail(h, message, init_failed) */
static int l_fail(lua_State *L)
{
    struct ms_bridge *b = bridge_of(L);
    uint32_t h = (uint32_t)luaL_checkinteger(L, 1);
    const char *msg = luaL_checkstring(L, 2);
    ms_dispatch_fail(b->d, h, msg, lua_toboolean(L, 3));
    return 0;
}

/* core.reply(h, json) -> true | false, err */
static int l_reply(lua_State *L)
{
    struct ms_bridge *b = bridge_of(L);
    size_t len;
    uint32_t h = self_handle(b, L);
    const char *json = luaL_checklstring(L, 2, &len);
    int rc = ms_dispatch_reply(b->d, h, json, len, ms__bridge_clock_ns() / 1000000);
    if (rc < 0) {
        lua_pushboolean(L, 0);
        lua_pushstring(L, rc == MS_E2BIG
                              ? "ctx:reply: the reply is above the message "
                                "size limit"
                              : "ctx:reply called twice for one message");
        return 2;
    }
    lua_pushboolean(L, 1);
    return 1;
}

/* ctx:reply's answer to entity h's message: 0, or what host.lua turns
 * into the error: 1 the reply is above the size limit, 2 a second reply,
 * 3 h is not the entity whose handler runs now. */
static int reply_json(struct ms_bridge *b, uint32_t h, const char *json,
                      size_t len)
{
    if (h != b->cur_h || h == 0)
        return 3;
    b->in_leaf = 1; /* a completion only writes or enqueues: no Lua */
    int rc = ms_dispatch_reply(b->d, h, json, len,
                               ms__bridge_clock_ns() / 1000000);
    b->in_leaf = 0;
    if (rc < 0)
        return rc == MS_E2BIG ? 1 : 2;
    return 0;
}

struct reply_sink {
    struct ms_bridge *b;
    uint32_t h;
};

static int reply_sink(void *data, const char *json, size_t len)
{
    struct reply_sink *r = data;
    return reply_json(r->b, r->h, json, len);
}

/* Exported for the FFI: ctx:reply of a reply host.lua wrote itself (a
 * flat object, lua/moonshard/flat_reply.lua), the JSON in json[0..len);
 * codes as reply_json's. */
int32_t ms_lua_reply(void *bridge, uint32_t h, const uint8_t *json,
                     size_t len);

int32_t ms_lua_reply(void *bridge, uint32_t h, const uint8_t *json,
                     size_t len)
{
    return reply_json(bridge, h, (const char *)json, len);
}

/* Exported for the FFI: the handles of the entities a handoff passivated
 * quietly (ms_dispatch_set_quiet_stop), *n of them, whose states the
 * driver forgets before ms_lua_release_parked; after ms_lua_next returned
 * MS_LUA_PARKED. */
const uint32_t *ms_lua_parked(void *bridge, uint32_t *n);

const uint32_t *ms_lua_parked(void *bridge, uint32_t *n)
{
    struct ms_bridge *b = bridge;
    const uint32_t *h;
    *n = ms_dispatch_parked(b->d, &h);
    return h;
}

/* Exported for the FFI: the parked states are forgotten; their handles
 * (and addresses) are free for new entities. */
void ms_lua_release_parked(void *bridge);

void ms_lua_release_parked(void *bridge)
{
    struct ms_bridge *b = bridge;
    const uint32_t *h;
    uint32_t n = ms_dispatch_parked(b->d, &h);
    for (uint32_t i = 0; i < n; i++)
        (void)ms__bridge_state_addr_set(b, h[i], NULL);
    ms_dispatch_release_parked(b->d);
}

/* Exported for the FFI: whether a handoff may stop type t's idle entities
 * without a delivery (ms_dispatch_set_quiet_stop); host.lua says so while
 * the type's behavior runs nothing at a stop. */
void ms_lua_quiet_stop(void *bridge, int32_t type, int32_t on);

void ms_lua_quiet_stop(void *bridge, int32_t type, int32_t on)
{
    struct ms_bridge *b = bridge;
    ms_dispatch_set_quiet_stop(b->d, type, on);
}

/* core.reply_msg(h, msg) -> code: ctx:reply(msg), encoded straight into
 * the reply (no Lua string of it is made: on a local ask that was a
 * string and its garbage per reply); codes as reply_json's. Raises the
 * encoder's error for a message it cannot write. */
static int l_reply_msg(lua_State *L)
{
    struct reply_sink r;
    r.b = bridge_of(L);
    r.h = (uint32_t)luaL_checkinteger(L, 1);
    int depth = r.b->cfg && r.b->cfg->json_max_depth > 0
                    ? r.b->cfg->json_max_depth : 64;
    lua_settop(L, 2);
    lua_pushinteger(L, ms_json_encode_to(L, 2, lua_upvalueindex(2), depth,
                                         reply_sink, &r));
    return 1;
}

/* The shard a Lua sender computed with the type's partitioner (argument
 * `arg`, nil for types without one) is remembered for the id, so that the
 * router and the dispatcher, which ask for it next, get it without a call
 * back into Lua (STYLE: core.* functions are leaves). Returns 0, or
 * MS_EPARTITION for a shard out of range. */
static int given_shard(struct ms_bridge *b, lua_State *L, int arg, int type, const char *id,
                       size_t idlen)
{
    if (lua_isnoneornil(L, arg) || idlen == 0 || idlen > MS_MAX_ID)
        return 0; /* a bad id is refused by the send itself */
    lua_Number v = luaL_checknumber(L, arg);
    if (!b->cfg || type < 0 || type >= b->cfg->ntypes || v < 0 ||
        v >= (lua_Number)b->cfg->types[type].shard_count ||
        v != (lua_Number)(uint32_t)v)
        return MS_EPARTITION;
    b->pc_type = type;
    b->pc_len = idlen;
    memcpy(b->pc_id, id, idlen);
    b->pc_shard = (uint32_t)v;
    return 0;
}

/* The one check of a send from Lua, at this edge: the shard the sender
 * gave (argument `arg`) is taken, the destination resolved (type, id,
 * shard) and the payload's size checked once; the router and the
 * dispatcher take the result. Returns 0 or a negative code. */
static int dest_of(struct ms_bridge *b, lua_State *L, int arg, int type,
                   const char *id, size_t idlen, size_t len,
                   struct ms_dest *dst)
{
    if (b->in_partition || given_shard(b, L, arg, type, id, idlen) < 0)
        return MS_EPARTITION;
    if (!b->router)
        return MS_ECANCELED; /* the node is closing */
    b->in_leaf = 1; /* the partitioner reads the given shard: no Lua */
    int rc = ms_dispatch_resolve_send(b->d, type, id, idlen, len, dst);
    b->in_leaf = 0;
    return rc;
}

/* core.tell(type, id, json[, shard]) -> true | nil, code, message */
static int l_tell(lua_State *L)
{
    struct ms_bridge *b = bridge_of(L);
    size_t idlen, len;
    int type = (int)luaL_checkinteger(L, 1);
    const char *id = luaL_checklstring(L, 2, &idlen);
    const char *json = luaL_checklstring(L, 3, &len);
    struct ms_dest dst;
    int rc = dest_of(b, L, 4, type, id, idlen, len, &dst);
    if (rc < 0)
        return push_err(L, rc);
    b->in_leaf = 1; /* sends only enqueue: no Lua from here */
    rc = ms_router_tell(b->router, &dst, json, len);
    b->in_leaf = 0;
    if (rc < 0)
        return push_err(L, rc);
    lua_pushboolean(L, 1);
    return 1;
}

/* core.stop_entity(type, id[, shard]) -> true | nil, code, message: an
 * ordered stop request (ref:stop()), routed like a tell. */
static int l_stop_entity(lua_State *L)
{
    struct ms_bridge *b = bridge_of(L);
    size_t idlen;
    int type = (int)luaL_checkinteger(L, 1);
    const char *id = luaL_checklstring(L, 2, &idlen);
    struct ms_dest dst;
    int rc = dest_of(b, L, 3, type, id, idlen, 0, &dst);
    if (rc < 0)
        return push_err(L, rc);
    b->in_leaf = 1;
    rc = ms_router_stop(b->router, &dst);
    b->in_leaf = 0;
    if (rc < 0)
        return push_err(L, rc);
    lua_pushboolean(L, 1);
    return 1;
}

/* core.ask(type, id, json, timeout_ms[, shard]) -> corr | nil, code,
 * message. The waiter is the entity whose handler runs now. */
static int l_ask(lua_State *L)
{
    struct ms_bridge *b = bridge_of(L);
    size_t idlen, len;
    int type = (int)luaL_checkinteger(L, 1);
    const char *id = luaL_checklstring(L, 2, &idlen);
    const char *json = luaL_checklstring(L, 3, &len);
    uint64_t timeout_ms = to_ms(luaL_checknumber(L, 4));
    if (b->cur_h == 0)
        return luaL_error(L, "ask is only possible inside a handler");
    struct ms_waiter w = {NULL, NULL, b->cur_h};
    uint64_t t = timeout_ms ? timeout_ms : 1;
    struct ms_dest dst;
    int rc = dest_of(b, L, 5, type, id, idlen, len, &dst);
    if (rc < 0)
        return push_err(L, rc);
    b->in_leaf = 1;
    int64_t corr = ms_router_ask(b->router, &dst, json, len, t, &w);
    b->in_leaf = 0;
    if (corr < 0)
        return push_err(L, (int)corr);
    b->ask_corr = (uint64_t)corr;
    lua_pushnumber(L, (lua_Number)corr);
    return 1;
}

/* core.activate(type, id, timeout_ms[, shard]) -> corr | nil, code,
 * message: an ask answered {"created":...}; the running entity waits like
 * an ask. */
static int l_activate(lua_State *L)
{
    struct ms_bridge *b = bridge_of(L);
    size_t idlen;
    int type = (int)luaL_checkinteger(L, 1);
    const char *id = luaL_checklstring(L, 2, &idlen);
    uint64_t timeout_ms = to_ms(luaL_checknumber(L, 3));
    if (b->cur_h == 0)
        return luaL_error(L, "activate is only possible inside a handler");
    struct ms_waiter w = {NULL, NULL, b->cur_h};
    struct ms_dest dst;
    int rc = dest_of(b, L, 4, type, id, idlen, 0, &dst);
    if (rc < 0)
        return push_err(L, rc);
    b->in_leaf = 1;
    int64_t corr = ms_router_activate(b->router, &dst,
                                      timeout_ms ? timeout_ms : 1, &w);
    b->in_leaf = 0;
    if (corr < 0)
        return push_err(L, (int)corr);
    b->ask_corr = (uint64_t)corr;
    lua_pushnumber(L, (lua_Number)corr);
    return 1;
}

/* Pushes the text a control-API writer produces (grown once if needed). */
static int push_json(lua_State *L, size_t need, char *small, size_t cap,
                     size_t (*again)(char *, size_t, void *), void *ctx)
{
    if (need < cap) {
        lua_pushlstring(L, small, need);
        return 1;
    }
    char *big = malloc(need + 1);
    if (!big)
        return luaL_error(L, "out of memory");
    again(big, need + 1, ctx);
    lua_pushlstring(L, big, need);
    free(big);
    return 1;
}

struct jctx {
    struct ms_bridge *b;
    int type;
};

static size_t again_alloc(char *buf, size_t len, void *ctx)
{
    struct jctx *j = ctx;
    return ms_router_allocations_json(j->b->router, j->type, buf, len);
}

static size_t again_stats(char *buf, size_t len, void *ctx)
{
    struct jctx *j = ctx;
    return j->b->reports.stats(j->b->reports.data, buf, len);
}

/* core.owner(type, id[, shard]) -> JSON {"shard":..,"owner":..|null} or
 * {"code":..,"message":..} */
static int l_owner(lua_State *L)
{
    struct ms_bridge *b = bridge_of(L);
    size_t idlen;
    int type = (int)luaL_checkinteger(L, 1);
    const char *id = luaL_checklstring(L, 2, &idlen);
    if (!b->router)
        return luaL_error(L, "owner_for needs a running node");
    char buf[1024], *big = NULL;
    if (b->in_partition)
        return luaL_error(L, "a partitioner cannot send, ask or look up "
                             "owners");
    if (given_shard(b, L, 3, type, id, idlen) < 0)
        return luaL_error(L, "the shard is out of range");
    b->in_leaf = 1;
    size_t n = b->reports.owner(b->reports.data, type, id, idlen, buf,
                                sizeof buf);
    if (n >= sizeof buf && (big = malloc(n + 1)) != NULL)
        n = b->reports.owner(b->reports.data, type, id, idlen, big, n + 1);
    b->in_leaf = 0;
    lua_pushlstring(L, big ? big : buf, n < sizeof buf || big ? n
                                                              : sizeof buf - 1);
    free(big);
    return 1;
}

/* core.allocations(type) -> JSON of the plan */
static int l_allocations(lua_State *L)
{
    struct ms_bridge *b = bridge_of(L);
    struct jctx j = {b, (int)luaL_checkinteger(L, 1)};
    if (!b->router)
        return luaL_error(L, "allocations needs a running node");
    char small[4096];
    size_t n = ms_router_allocations_json(b->router, j.type, small,
                                          sizeof small);
    return push_json(L, n, small, sizeof small, again_alloc, &j);
}

/* core.stats() -> JSON of the node's counters */
static int l_stats(lua_State *L)
{
    struct ms_bridge *b = bridge_of(L);
    if (!b->router)
        return luaL_error(L, "stats needs a running node");
    char small[4096];
    size_t n = b->reports.stats(b->reports.data, small, sizeof small);
    struct jctx j = {b, -1};
    return push_json(L, n, small, sizeof small, again_stats, &j);
}

/* core.reconcile(): the coordinator runs a rebalance round soon (a no-op
 * on other nodes, and without a node) */
static int l_reconcile(lua_State *L)
{
    struct ms_bridge *b = bridge_of(L);
    (void)L;
    if (b->router)
        ms_router_reconcile(b->router);
    return 0;
}

/* core.after(h, ms, json) -> timer id | nil, message */
static int l_after(lua_State *L)
{
    struct ms_bridge *b = bridge_of(L);
    size_t len;
    uint32_t h = self_handle(b, L);
    uint64_t ms = to_ms(luaL_checknumber(L, 2));
    const char *json = luaL_checklstring(L, 3, &len);
    int64_t id = ms_dispatch_after(b->d, h, ms, json, len, ms__bridge_now_ms(b));
    if (id < 0) {
        lua_pushnil(L);
        lua_pushstring(L, ms_strerror((int)id));
        return 2;
    }
    lua_pushnumber(L, (lua_Number)id);
    return 1;
}

/* core.cancel(h, timer) -> boolean */
static int l_cancel(lua_State *L)
{
    struct ms_bridge *b = bridge_of(L);
    uint32_t h = self_handle(b, L);
    lua_Number v = luaL_optnumber(L, 2, 0);
    int64_t id = v >= 1 && v < 9e15 ? (int64_t)v : 0;
    lua_pushboolean(L, ms_dispatch_cancel(b->d, h, id));
    return 1;
}

/* core.stop(h) */
static int l_stop(lua_State *L)
{
    struct ms_bridge *b = bridge_of(L);
    ms_dispatch_stop_self(b->d, self_handle(b, L));
    return 0;
}

/* core.log(h, level, text) */
static int l_log(lua_State *L)
{
    struct ms_bridge *b = bridge_of(L);
    uint32_t h = (uint32_t)luaL_checkinteger(L, 1);
    int level = ms_log_level(luaL_checkstring(L, 2));
    if (level < 0)
        return luaL_error(L, "bad log level '%s' (debug, info, warn, error)",
                          lua_tostring(L, 2));
    size_t len;
    const char *text = luaL_checklstring(L, 3, &len);
    char f[ENTITY_FIELDS_MAX];
    ms__bridge_entity_fields(b, h, f, sizeof f);
    ms_log_text(level, f, text, len);
    return 0;
}

/* core.type_index(name) -> index | nil */
static int l_type_index(lua_State *L)
{
    struct ms_bridge *b = bridge_of(L);
    size_t len;
    const char *name = luaL_checklstring(L, 1, &len);
    int t = ms_dispatch_type_index(b->d, name, len);
    if (t < 0)
        return 0;
    lua_pushinteger(L, t);
    return 1;
}

int ms__bridge_state_addr_set(struct ms_bridge *b, uint32_t h, const void *p)
{
    if (h == 0 || h >= MS_STATE_ADDR_MAX)
        return -1;
    if (h >= b->nstate_addr) {
        if (!p)
            return 0; /* nothing kept there */
        uint32_t n = b->nstate_addr ? b->nstate_addr : 1024;
        while (n <= h)
            n *= 2;
        const void **a = realloc(b->state_addr, (size_t)n * sizeof *a);
        if (!a)
            return -1;
        memset(a + b->nstate_addr, 0,
               (size_t)(n - b->nstate_addr) * sizeof *a);
        b->state_addr = a;
        b->nstate_addr = n;
    }
    b->state_addr[h] = p;
    return 0;
}

const void *ms__bridge_state_addr(const struct ms_bridge *b, uint32_t h)
{
    return h < b->nstate_addr ? b->state_addr[h] : NULL;
}

void ms__bridge_restated_flush(struct ms_bridge *b)
{
    uint32_t n = b->restated.n;
    b->restated.n = 0;
    if (n == 0 || b->states_ref == LUA_NOREF)
        return;
    if (n > MS_RESTATED_MAX)
        n = MS_RESTATED_MAX;
    lua_State *L = b->L;
    lua_rawgeti(L, LUA_REGISTRYINDEX, b->states_ref);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t h = b->restated.h[i];
        lua_rawgeti(L, -1, (int)h);
        (void)ms__bridge_state_addr_set(
            b, h, lua_type(L, -1) == LUA_TTABLE ? lua_topointer(L, -1) : NULL);
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
}

/* core.keep_states(states): the table of host.lua whose entries
 * ms__bridge_restated_flush reads. Once. */
static int l_keep_states(lua_State *L)
{
    struct ms_bridge *b = bridge_of(L);
    luaL_checktype(L, 1, LUA_TTABLE);
    if (b->states_ref != LUA_NOREF)
        return luaL_error(L, "core.keep_states: called twice");
    lua_settop(L, 1);
    b->states_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    return 0;
}

/* core.state_at(h, state): keeps the address of entity h's state table
 * (anything else than a table forgets it) for the prefetch of its
 * deliveries. The address is only ever prefetched, never read: one kept
 * after the table is gone costs a useless prefetch, nothing more. An
 * array that cannot grow leaves the entity without a prefetch, and so
 * do handle 0 (host.lua's on_error forgets it when a driver died outside
 * a delivery: driver.c abandon) and the handles from MS_STATE_ADDR_MAX
 * on; this raises only when h cannot be a handle at all. */
static int l_state_at(lua_State *L)
{
    struct ms_bridge *b = bridge_of(L);
    lua_Integer h = luaL_checkinteger(L, 1);
    if (h < 0 || h > (lua_Integer)UINT32_MAX)
        return luaL_argerror(L, 1, "not an entity handle");
    (void)ms__bridge_state_addr_set(b, (uint32_t)h,
                                    lua_type(L, 2) == LUA_TTABLE
                                        ? lua_topointer(L, 2)
                                        : NULL);
    return 0;
}

int ms__bridge_open_core(lua_State *L)
{
    static const luaL_Reg fns[] = {
        {"done", l_done},     {"fail", l_fail},
        {"reply", l_reply},   {"tell", l_tell},     {"ask", l_ask},
        {"after", l_after},   {"cancel", l_cancel}, {"stop", l_stop},
        {"stop_entity", l_stop_entity},
        {"log", l_log},       {"now", ms__bridge_l_now},
        {"type_index", l_type_index},
        {"activate", l_activate},     {"owner", l_owner},
        {"allocations", l_allocations}, {"stats", l_stats},
        {"reconcile", l_reconcile},   {"state_at", l_state_at},
        {"keep_states", l_keep_states},
        {NULL, NULL},
    };
    void *b = lua_touserdata(L, lua_upvalueindex(1));
    lua_newtable(L);
    for (const luaL_Reg *f = fns; f->name; f++) {
        lua_pushlightuserdata(L, b); /* each function's bridge */
        lua_pushcclosure(L, f->func, 1);
        lua_setfield(L, -2, f->name);
    }
    /* reply_msg's second upvalue: the encoder's "__jsontype" key */
    lua_pushlightuserdata(L, b);
    lua_pushliteral(L, "__jsontype");
    lua_pushcclosure(L, l_reply_msg, 2);
    lua_setfield(L, -2, "reply_msg");
    ms__bridge_open_persist(L, b);
    /* for ms_lua_next, called through the FFI by the driver */
    lua_pushlightuserdata(L, b);
    lua_setfield(L, -2, "BRIDGE");
    lua_pushlightuserdata(L, &ms__bridge_tok_ask);
    lua_setfield(L, -2, "ASK");
    lua_pushlightuserdata(L, &ms__bridge_tok_idle);
    lua_setfield(L, -2, "IDLE");
    lua_pushlightuserdata(L, &ms__bridge_tok_free);
    lua_setfield(L, -2, "FREE");
    /* host.lua declares struct ms_lua_delivery for the FFI and checks its
     * size against this one */
    lua_pushinteger(L, (lua_Integer)sizeof(struct ms_lua_delivery));
    lua_setfield(L, -2, "DELIVERY_SIZE");
    lua_pushlightuserdata(L, &((struct ms_bridge *)b)->restated);
    lua_setfield(L, -2, "RESTATED");
    lua_pushinteger(L, MS_RESTATED_MAX);
    lua_setfield(L, -2, "RESTATED_MAX");
    lua_pushinteger(L, (lua_Integer)MS_LUA_PARKED);
    lua_setfield(L, -2, "PARKED");
    return 1;
}
