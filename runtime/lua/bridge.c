/*
 * bridge.c -- the node's LuaJIT VM and the moonshard.core leaf functions.
 *
 * Driver coroutines: Lua's moonshard.host.driver loops over core.next().
 * The bridge resumes the current driver; when it yields IDLE the round is
 * over; when it yields ASK the entity being handled keeps that coroutine
 * (its handle -> registry ref in `co_of`) and a fresh driver continues;
 * when a resumed entity finishes, its coroutine yields FREE and returns to
 * the pool.
 */
#include "bridge.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "../core/log.h"
#include "../io/router.h"
#include "json_encode.h"
#include "../core/running.h"

#define POOL_MAX 16
/* type=, shard= and id= of an entity: an id escapes to 4 bytes a byte */
#define ENTITY_FIELDS_MAX (128 + 4 * MS_LOG_VALUE_MAX)

struct ms_bridge {
    lua_State *L;
    uv_loop_t *loop;
    struct ms_dispatch *d;
    const struct ms_config *cfg;
    char home[512];

    int driver_fn;     /* registry ref: moonshard.host.driver */
    int check_fn;      /* registry ref: moonshard.host.check */
    int on_error_fn;   /* registry ref: moonshard.host.on_error */
    int traceback_fn;  /* registry ref: debug.traceback */
    int cur_driver;    /* registry ref of the driver in use, or LUA_NOREF */
    int pool[POOL_MAX];
    int npool;
    struct waiting *co_of; /* [handle] -> its coroutine waiting in an ask */
    uint32_t nco;

    uint32_t cur_h;       /* entity whose handler runs now */
    int cur_kind;         /* its delivery's kind */
    uint64_t ask_corr;    /* the ask the running handler issued last */
    uint64_t cur_start_ns;
    int budget;
    int handled;
    uint64_t slow;
    uint64_t min_slow_ms; /* smallest slow_handler_ms of all types */
    struct ms_router *router; /* the one send path; NULL: closing */
    struct ms_bridge_reports reports;

    /* partitioners of the types that have one (see ms_bridge_partition) */
    int *part_ref;        /* [type] registry ref, or LUA_NOREF */
    uint64_t *part_fails; /* [type] failures, for the log */
    int npart;
    int in_leaf;          /* inside a core.* send or owner lookup */
    int in_next;          /* inside ms_lua_next (an FFI call) */
    int in_partition;     /* a partitioner runs */
    int pc_type;          /* last answer: type, id, shard */
    size_t pc_len;
    uint32_t pc_shard;
    char pc_id[MS_MAX_ID];

    /* what runs now, for the watchdog thread (see running.h) */
    struct ms_running running;
};

/* An entity suspended in an ask: its coroutine, the kind of the message
 * it was handling, and the ask it waits for. A finished ask resumes the
 * coroutine only if it is that ask (an ask abandoned by a handler that
 * went on, or died, must not answer a later one). */
struct waiting {
    int ref;
    int kind;
    uint64_t corr;
};

static struct ms_bridge *B; /* the leaf functions' bridge */

/* Sentinels yielded by driver coroutines; their addresses are the keys. */
static char tok_ask, tok_idle, tok_free;

/* ---- what runs now, for the watchdog --------------------------------- */

static uint64_t clock_ns(void);

/* Publishes Lua code other than a handler as running (see running.h),
 * unless something is published already (a handler's own calls stay the
 * handler's). Returns whether it published, for unmark. */
static int mark(int kind, int type, const char *text, size_t len)
{
    if (!ms_running_is_idle(&B->running))
        return 0;
    ms_running_set(&B->running, kind, type, 0, text, len, clock_ns());
    return 1;
}

static void unmark(int marked)
{
    if (marked)
        ms_running_idle(&B->running);
}

/* ---- the one protected-call wrapper --------------------------------- */

/* Calls the function below `nargs` arguments on the stack with a
 * traceback handler. Returns 0 with `nres` results on the stack, or a
 * negative code with the error text in `err` and the stack restored.
 * stack in: fn, args...   out: results... (or nothing) */
static int pcall(lua_State *L, int nargs, int nres, char *err, size_t errlen)
{
    static const char what[] = "Lua code of the host";
    int base = lua_gettop(L) - nargs;
    lua_rawgeti(L, LUA_REGISTRYINDEX, B->traceback_fn);
    lua_insert(L, base); /* stack: traceback, fn, args... */
    int marked = mark(MS_RUN_LUA, -1, what, sizeof what - 1);
    int rc = lua_pcall(L, nargs, nres, base);
    unmark(marked);
    lua_remove(L, base);
    if (rc == 0)
        return 0;
    const char *msg = lua_tostring(L, -1);
    if (err)
        snprintf(err, errlen, "%s%s",
                 rc == LUA_ERRMEM ? "out of memory: " :
                 rc == LUA_ERRERR ? "error in error handler: " : "",
                 msg ? msg : "(error object is not a string)");
    lua_pop(L, 1);
    return rc == LUA_ERRMEM ? MS_ENOMEM : MS_EINVAL;
}

/* ---- helpers --------------------------------------------------------- */

/* Handler timing only needs to see slow handlers (>= milliseconds), so
 * the coarse monotonic clock is enough and costs a few nanoseconds. */
static uint64_t clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t now_ms(void)
{
    return uv_now(B->loop);
}

/* The log fields naming entity h: type=, shard=, id=, each escaped. */
static void entity_fields(uint32_t h, char *buf, size_t len)
{
    int type;
    const char *id;
    size_t idlen;
    uint32_t shard;
    if (ms_dispatch_entity(B->d, h, &type, &id, &idlen, &shard)) {
        size_t o = ms_log_field_s(buf, len, 0, "type",
                                  ms_dispatch_type_name(B->d, type));
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

/* Finishes entity h's current message: timing, then the dispatcher. */
static void finish(uint32_t h)
{
    uint64_t took_ms = (clock_ns() - B->cur_start_ns) / 1000000;
    int type;
    const char *id;
    size_t idlen;
    uint32_t shard;
    if (took_ms >= B->min_slow_ms &&
        ms_dispatch_entity(B->d, h, &type, &id, &idlen, &shard) &&
        took_ms >= B->cfg->types[type].slow_handler_ms) {
        char f[ENTITY_FIELDS_MAX];
        entity_fields(h, f, sizeof f);
        ms_log(MS_LOG_WARN, f, "slow handler: %llu ms",
               (unsigned long long)took_ms);
        B->slow++;
        ms_dispatch_counters(B->d)->slow_handlers++;
    }
    ms_dispatch_done(B->d, h, now_ms());
    B->handled++;
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
    const char *payload;
    const char *id;
};

/* Exported for the FFI: finishes `prev` (if not 0), then fills `out` with
 * the next delivery and returns its handle, or returns 0 when the round's
 * budget is spent or nothing is ready. Never calls into Lua. */
uint32_t ms_lua_next(uint32_t prev, struct ms_lua_delivery *out);
static uint32_t lua_next_delivery(uint32_t prev,
                                  struct ms_lua_delivery *out);

uint32_t ms_lua_next(uint32_t prev, struct ms_lua_delivery *out)
{
    B->in_next = 1;
    uint32_t h = lua_next_delivery(prev, out);
    B->in_next = 0;
    return h;
}

static uint32_t lua_next_delivery(uint32_t prev, struct ms_lua_delivery *out)
{
    if (prev)
        finish(prev);
    B->cur_h = 0;
    struct ms_delivery dl;
    if (B->budget <= 0 || !ms_dispatch_next(B->d, &dl)) {
        ms_running_idle(&B->running);
        return 0;
    }
    B->budget--;
    B->cur_h = dl.h;
    B->cur_kind = dl.kind;
    B->ask_corr = 0;
    B->cur_start_ns = clock_ns();
    ms_running_set(&B->running, MS_RUN_HANDLER, (int)dl.type, dl.shard,
                   dl.id, dl.idlen, B->cur_start_ns);
    out->h = dl.h;
    out->kind = dl.kind;
    out->init = dl.init;
    out->type = (int32_t)dl.type;
    out->shard = dl.shard;
    out->idlen = (uint32_t)dl.idlen;
    out->len = (uint32_t)dl.len;
    out->payload = dl.payload;
    out->id = dl.id;
    return dl.h;
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
static uint32_t self_handle(lua_State *L)
{
    uint32_t h = (uint32_t)luaL_checkinteger(L, 1);
    if (h != B->cur_h || h == 0)
        luaL_error(L, "this ctx belongs to another entity's handler");
    return h;
}

/* core.done(h): a detached coroutine finished its message. */
static int l_done(lua_State *L)
{
    finish((uint32_t)luaL_checkinteger(L, 1));
    return 0;
}

/* core.fail(h, message, init_failed) */
static int l_fail(lua_State *L)
{
    uint32_t h = (uint32_t)luaL_checkinteger(L, 1);
    const char *msg = luaL_checkstring(L, 2);
    ms_dispatch_fail(B->d, h, msg, lua_toboolean(L, 3));
    return 0;
}

/* core.reply(h, json) -> true | false, err */
static int l_reply(lua_State *L)
{
    size_t len;
    uint32_t h = self_handle(L);
    const char *json = luaL_checklstring(L, 2, &len);
    int rc = ms_dispatch_reply(B->d, h, json, len, clock_ns() / 1000000);
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

/* The shard a Lua sender computed with the type's partitioner (argument
 * `arg`, nil for types without one) is remembered for the id, so that the
 * router and the dispatcher, which ask for it next, get it without a call
 * back into Lua (STYLE: core.* functions are leaves). Returns 0, or
 * MS_EPARTITION for a shard out of range. */
static int given_shard(lua_State *L, int arg, int type, const char *id,
                       size_t idlen)
{
    if (lua_isnoneornil(L, arg) || idlen == 0 || idlen > MS_MAX_ID)
        return 0; /* a bad id is refused by the send itself */
    lua_Number v = luaL_checknumber(L, arg);
    if (!B->cfg || type < 0 || type >= B->cfg->ntypes || v < 0 ||
        v >= (lua_Number)B->cfg->types[type].shard_count ||
        v != (lua_Number)(uint32_t)v)
        return MS_EPARTITION;
    B->pc_type = type;
    B->pc_len = idlen;
    memcpy(B->pc_id, id, idlen);
    B->pc_shard = (uint32_t)v;
    return 0;
}

/* core.tell(type, id, json[, shard]) -> true | nil, code, message */
static int l_tell(lua_State *L)
{
    size_t idlen, len;
    int type = (int)luaL_checkinteger(L, 1);
    const char *id = luaL_checklstring(L, 2, &idlen);
    const char *json = luaL_checklstring(L, 3, &len);
    if (B->in_partition || given_shard(L, 4, type, id, idlen) < 0)
        return push_err(L, MS_EPARTITION);
    B->in_leaf = 1; /* sends only enqueue: no Lua from here */
    int rc = B->router ? ms_router_tell(B->router, type, id, idlen, json, len)
                       : MS_ECANCELED;
    B->in_leaf = 0;
    if (rc < 0)
        return push_err(L, rc);
    lua_pushboolean(L, 1);
    return 1;
}

/* core.ask(type, id, json, timeout_ms[, shard]) -> corr | nil, code,
 * message. The waiter is the entity whose handler runs now. */
static int l_ask(lua_State *L)
{
    size_t idlen, len;
    int type = (int)luaL_checkinteger(L, 1);
    const char *id = luaL_checklstring(L, 2, &idlen);
    const char *json = luaL_checklstring(L, 3, &len);
    uint64_t timeout_ms = to_ms(luaL_checknumber(L, 4));
    if (B->cur_h == 0)
        return luaL_error(L, "ask is only possible inside a handler");
    struct ms_waiter w = {NULL, NULL, B->cur_h};
    uint64_t t = timeout_ms ? timeout_ms : 1;
    if (B->in_partition || given_shard(L, 5, type, id, idlen) < 0)
        return push_err(L, MS_EPARTITION);
    B->in_leaf = 1;
    int64_t corr = B->router ? ms_router_ask(B->router, type, id, idlen, json,
                                             len, t, &w)
                             : MS_ECANCELED;
    B->in_leaf = 0;
    if (corr < 0)
        return push_err(L, (int)corr);
    B->ask_corr = (uint64_t)corr;
    lua_pushnumber(L, (lua_Number)corr);
    return 1;
}

/* core.activate(type, id, timeout_ms[, shard]) -> corr | nil, code,
 * message: an ask answered {"created":...}; the running entity waits like
 * an ask. */
static int l_activate(lua_State *L)
{
    size_t idlen;
    int type = (int)luaL_checkinteger(L, 1);
    const char *id = luaL_checklstring(L, 2, &idlen);
    uint64_t timeout_ms = to_ms(luaL_checknumber(L, 3));
    if (B->cur_h == 0)
        return luaL_error(L, "activate is only possible inside a handler");
    struct ms_waiter w = {NULL, NULL, B->cur_h};
    if (B->in_partition || given_shard(L, 4, type, id, idlen) < 0)
        return push_err(L, MS_EPARTITION);
    B->in_leaf = 1;
    int64_t corr = B->router ? ms_router_activate(B->router, type, id, idlen,
                                                  timeout_ms ? timeout_ms : 1,
                                                  &w)
                             : MS_ECANCELED;
    B->in_leaf = 0;
    if (corr < 0)
        return push_err(L, (int)corr);
    B->ask_corr = (uint64_t)corr;
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
    int type;
    const char *id;
    size_t idlen;
};

static size_t again_alloc(char *buf, size_t len, void *ctx)
{
    return ms_router_allocations_json(B->router, ((struct jctx *)ctx)->type,
                                      buf, len);
}

static size_t again_stats(char *buf, size_t len, void *ctx)
{
    (void)ctx;
    return B->reports.stats(B->reports.data, buf, len);
}

/* core.owner(type, id[, shard]) -> JSON {"shard":..,"owner":..|null} or
 * {"code":..,"message":..} */
static int l_owner(lua_State *L)
{
    size_t idlen;
    int type = (int)luaL_checkinteger(L, 1);
    const char *id = luaL_checklstring(L, 2, &idlen);
    if (!B->router)
        return luaL_error(L, "owner_for needs a running node");
    char buf[1024], *big = NULL;
    if (B->in_partition)
        return luaL_error(L, "a partitioner cannot send, ask or look up "
                             "owners");
    if (given_shard(L, 3, type, id, idlen) < 0)
        return luaL_error(L, "the shard is out of range");
    B->in_leaf = 1;
    size_t n = B->reports.owner(B->reports.data, type, id, idlen, buf,
                                sizeof buf);
    if (n >= sizeof buf && (big = malloc(n + 1)) != NULL)
        n = B->reports.owner(B->reports.data, type, id, idlen, big, n + 1);
    B->in_leaf = 0;
    lua_pushlstring(L, big ? big : buf, n < sizeof buf || big ? n
                                                              : sizeof buf - 1);
    free(big);
    return 1;
}

/* core.allocations(type) -> JSON of the plan */
static int l_allocations(lua_State *L)
{
    struct jctx j = {(int)luaL_checkinteger(L, 1), NULL, 0};
    if (!B->router)
        return luaL_error(L, "allocations needs a running node");
    char small[4096];
    size_t n = ms_router_allocations_json(B->router, j.type, small,
                                          sizeof small);
    return push_json(L, n, small, sizeof small, again_alloc, &j);
}

/* core.stats() -> JSON of the node's counters */
static int l_stats(lua_State *L)
{
    if (!B->router)
        return luaL_error(L, "stats needs a running node");
    char small[4096];
    size_t n = B->reports.stats(B->reports.data, small, sizeof small);
    return push_json(L, n, small, sizeof small, again_stats, NULL);
}

/* core.reconcile(): the coordinator runs a rebalance round soon (a no-op
 * on other nodes, and without a node) */
static int l_reconcile(lua_State *L)
{
    (void)L;
    if (B->router)
        ms_router_reconcile(B->router);
    return 0;
}

/* core.after(h, ms, json) -> timer id | nil, message */
static int l_after(lua_State *L)
{
    size_t len;
    uint32_t h = self_handle(L);
    uint64_t ms = to_ms(luaL_checknumber(L, 2));
    const char *json = luaL_checklstring(L, 3, &len);
    int64_t id = ms_dispatch_after(B->d, h, ms, json, len, now_ms());
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
    uint32_t h = self_handle(L);
    lua_Number v = luaL_optnumber(L, 2, 0);
    int64_t id = v >= 1 && v < 9e15 ? (int64_t)v : 0;
    lua_pushboolean(L, ms_dispatch_cancel(B->d, h, id));
    return 1;
}

/* core.stop(h) */
static int l_stop(lua_State *L)
{
    ms_dispatch_stop_self(B->d, self_handle(L));
    return 0;
}

/* core.log(h, level, text) */
static int l_log(lua_State *L)
{
    uint32_t h = (uint32_t)luaL_checkinteger(L, 1);
    int level = ms_log_level(luaL_checkstring(L, 2));
    if (level < 0)
        return luaL_error(L, "bad log level '%s' (debug, info, warn, error)",
                          lua_tostring(L, 2));
    size_t len;
    const char *text = luaL_checklstring(L, 3, &len);
    char f[ENTITY_FIELDS_MAX];
    entity_fields(h, f, sizeof f);
    ms_log_text(level, f, text, len);
    return 0;
}

/* core.now() -> wall-clock seconds */
static int l_now(lua_State *L)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    lua_pushnumber(L, (lua_Number)tv.tv_sec + tv.tv_usec / 1e6);
    return 1;
}

/* core.type_index(name) -> index | nil */
static int l_type_index(lua_State *L)
{
    size_t len;
    const char *name = luaL_checklstring(L, 1, &len);
    int t = ms_dispatch_type_index(B->d, name, len);
    if (t < 0)
        return 0;
    lua_pushinteger(L, t);
    return 1;
}

static int open_core(lua_State *L)
{
    static const luaL_Reg fns[] = {
        {"done", l_done},     {"fail", l_fail},
        {"reply", l_reply},   {"tell", l_tell},     {"ask", l_ask},
        {"after", l_after},   {"cancel", l_cancel}, {"stop", l_stop},
        {"log", l_log},       {"now", l_now},
        {"type_index", l_type_index},
        {"activate", l_activate},     {"owner", l_owner},
        {"allocations", l_allocations}, {"stats", l_stats},
        {"reconcile", l_reconcile},
        {NULL, NULL},
    };
    lua_newtable(L);
    luaL_register(L, NULL, fns);
    lua_pushlightuserdata(L, &tok_ask);
    lua_setfield(L, -2, "ASK");
    lua_pushlightuserdata(L, &tok_idle);
    lua_setfield(L, -2, "IDLE");
    lua_pushlightuserdata(L, &tok_free);
    lua_setfield(L, -2, "FREE");
    /* host.lua declares struct ms_lua_delivery for the FFI and checks its
     * size against this one */
    lua_pushinteger(L, (lua_Integer)sizeof(struct ms_lua_delivery));
    lua_setfield(L, -2, "DELIVERY_SIZE");
    return 1;
}

/* ---- lifecycle --------------------------------------------------------- */

static int open_clock(lua_State *L)
{
    lua_newtable(L);
    lua_pushcfunction(L, l_now);
    lua_setfield(L, -2, "now");
    return 1;
}

/* package.path: lua/, entities/ first (the config's folder is added by
 * moonshard.config when the script loads); moonshard.clock preloaded. */
static void set_paths(lua_State *L, const char *home)
{
    /* stack: package */
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "path");
    lua_pushfstring(L, "%s/lua/?.lua;%s/lua/?/init.lua;%s/entities/?.lua;%s",
                    home, home, home, lua_tostring(L, -1));
    lua_setfield(L, -3, "path");
    lua_pop(L, 1);
    lua_getfield(L, -1, "preload");
    lua_pushcfunction(L, open_clock);
    lua_setfield(L, -2, "moonshard.clock");
    lua_pop(L, 2);
}

int ms_lua_run_isolated(const char *home, const char *module, const char *fn,
                        const char *arg, char **out, char *err, size_t errlen)
{
    lua_State *L = luaL_newstate();
    if (!L)
        return MS_ENOMEM;
    luaL_openlibs(L);
    set_paths(L, home);
    int rc = MS_EINVAL;
    *out = NULL;
    /* stack: require, module -> mod */
    lua_getglobal(L, "require");
    lua_pushstring(L, module);
    if (lua_pcall(L, 1, 1, 0) != 0) {
        snprintf(err, errlen, "%s", lua_tostring(L, -1));
        goto done;
    }
    lua_getfield(L, -1, fn);
    lua_pushstring(L, arg);
    if (lua_pcall(L, 1, 1, 0) != 0) {
        snprintf(err, errlen, "%s", lua_tostring(L, -1));
        goto done;
    }
    *out = strdup(lua_tostring(L, -1) ? lua_tostring(L, -1) : "");
    rc = *out ? 0 : MS_ENOMEM;
done:
    lua_close(L);
    return rc;
}

int ms_bridge_new(struct ms_bridge **out, uv_loop_t *loop, const char *home)
{
    if (B)
        return MS_EINVAL;
    struct ms_bridge *b = calloc(1, sizeof *b);
    if (!b)
        return MS_ENOMEM;
    b->L = luaL_newstate();
    if (!b->L) {
        free(b);
        return MS_ENOMEM;
    }
    b->loop = loop;
    b->cur_driver = LUA_NOREF;
    b->pc_type = -1;
    snprintf(b->home, sizeof b->home, "%s", home);
    lua_State *L = b->L;
    luaL_openlibs(L);
    /* stack: package.preload */
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "preload");
    lua_pushcfunction(L, open_core);
    lua_setfield(L, -2, "moonshard.core");
    lua_pushcfunction(L, ms_json_encode_open);
    lua_setfield(L, -2, "moonshard.encoder");
    lua_pop(L, 2);
    set_paths(L, home);
    lua_getglobal(L, "debug");
    lua_getfield(L, -1, "traceback");
    b->traceback_fn = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_pop(L, 1);
    B = b;
    *out = b;
    return 0;
}

void ms_bridge_free(struct ms_bridge *b)
{
    if (!b)
        return;
    lua_close(b->L);
    free(b->co_of);
    free(b->part_ref);
    free(b->part_fails);
    free(b);
    if (B == b)
        B = NULL;
}

/* Calls require(name).fn with the stack arguments; leaves `nres` results.
 * stack in: args...  out: results... */
static int call_module(lua_State *L, const char *module, const char *fn,
                       int nargs, int nres, char *err, size_t errlen)
{
    lua_getglobal(L, "require");
    lua_pushstring(L, module);
    int rc = pcall(L, 1, 1, err, errlen);
    if (rc < 0) {
        lua_pop(L, nargs);
        return rc;
    }
    lua_getfield(L, -1, fn);
    lua_remove(L, -2);
    if (!lua_isfunction(L, -1)) {
        snprintf(err, errlen, "%s.%s is not a function", module, fn);
        lua_pop(L, nargs + 1);
        return MS_EINVAL;
    }
    lua_insert(L, -1 - nargs); /* stack: fn, args... */
    return pcall(L, nargs, nres, err, errlen);
}

static void copy_field(lua_State *L, int idx, const char *k, char *dst,
                       size_t len)
{
    lua_getfield(L, idx, k);
    const char *s = lua_tostring(L, -1);
    snprintf(dst, len, "%s", s ? s : "");
    lua_pop(L, 1);
}

static lua_Number num_field(lua_State *L, int idx, const char *k)
{
    lua_getfield(L, idx, k);
    lua_Number v = lua_tonumber(L, -1);
    lua_pop(L, 1);
    return v;
}

/* Loads and validates the config script at `path` (moonshard.config).
 * Returns 0 with the config table pushed, or MS_ECONFIG with the reason in
 * `err` and the stack as it was. */
static int push_config(lua_State *L, const char *path, char *err,
                       size_t errlen)
{
    int top = lua_gettop(L);
    lua_pushstring(L, path);
    if (call_module(L, "moonshard.config", "load", 1, 2, err, errlen) < 0)
        return MS_ECONFIG;
    if (lua_isnil(L, -2)) {
        snprintf(err, errlen, "%s", lua_tostring(L, -1));
        lua_settop(L, top);
        return MS_ECONFIG;
    }
    lua_pop(L, 1);
    return 0;
}

/* Room for the partitioner refs of n types (the refs of an earlier load
 * are released). */
static int part_alloc(struct ms_bridge *b, int n)
{
    for (int i = 0; i < b->npart; i++)
        luaL_unref(b->L, LUA_REGISTRYINDEX, b->part_ref[i]);
    free(b->part_ref);
    free(b->part_fails);
    b->npart = 0;
    b->pc_type = -1;
    b->part_ref = malloc(((size_t)n + 1) * sizeof *b->part_ref);
    b->part_fails = calloc((size_t)n + 1, sizeof *b->part_fails);
    if (!b->part_ref || !b->part_fails)
        return MS_ENOMEM;
    for (int i = 0; i < n; i++)
        b->part_ref[i] = LUA_NOREF;
    b->npart = n;
    return 0;
}

/* Logs a partitioner failure: the first ones, then every power of two. */
static int part_fail(struct ms_bridge *b, int type, const char *id,
                     size_t idlen, const char *fmt, const char *what)
{
    uint64_t n = ++b->part_fails[type];
    if (ms_log_due(n)) {
        char why[400]; /* fmt's words and `what` (< 300 bytes) */
        snprintf(why, sizeof why, fmt, what);
        ms_log(MS_LOG_ERROR, NULL, "the partitioner of %s failed for id "
               "'%.*s' (%llu time%s so far): %s; the message is refused",
               b->cfg && b->cfg->types ? b->cfg->types[type].name : "?",
               (int)(idlen > 64 ? 64 : idlen), id, (unsigned long long)n,
               n == 1 ? "" : "s", why);
    }
    return MS_EPARTITION;
}

int ms_bridge_partition(void *data, int type, const char *id, size_t idlen,
                        uint32_t shard_count, uint32_t *shard)
{
    struct ms_bridge *b = data;
    if (type < 0 || type >= b->npart || b->part_ref[type] == LUA_NOREF)
        return MS_EPARTITION;
    if (b->in_partition)
        return part_fail(b, type, id, idlen, "%s",
                         "a partitioner cannot send, ask or look up "
                         "owners");
    if (b->pc_type == type && b->pc_len == idlen &&
        memcmp(b->pc_id, id, idlen) == 0) {
        *shard = b->pc_shard;
        return 0;
    }
    /* C enters Lua only from the loop's own callbacks (HTTP, frames),
     * through the protected call; a send from Lua gave its shard */
    if (b->in_leaf || b->in_next)
        return part_fail(b, type, id, idlen, "%s",
                         "no shard was given by the Lua sender");
    lua_State *L = b->L;
    int top = lua_gettop(L);
    char err[300];
    lua_rawgeti(L, LUA_REGISTRYINDEX, b->part_ref[type]);
    lua_pushlstring(L, id, idlen);
    lua_pushinteger(L, (lua_Integer)shard_count);
    b->in_partition = 1;
    int marked = mark(MS_RUN_PARTITIONER, type, id, idlen);
    int called = pcall(L, 2, 1, err, sizeof err);
    unmark(marked);
    b->in_partition = 0;
    if (called < 0) {
        err[strcspn(err, "\n")] = 0; /* the message, not the traceback */
        lua_settop(L, top);
        return part_fail(b, type, id, idlen, "it raised: %s", err);
    }
    lua_Number v = lua_tonumber(L, -1);
    int ok = lua_type(L, -1) == LUA_TNUMBER && v >= 0 &&
             v < (lua_Number)shard_count && v == (lua_Number)(uint32_t)v;
    if (!ok) {
        char got[64];
        snprintf(got, sizeof got, "%s", lua_type(L, -1) == LUA_TNUMBER
                                            ? lua_tostring(L, -1)
                                            : luaL_typename(L, -1));
        char fmt[128];
        snprintf(fmt, sizeof fmt, "it returned %%s, not an integer in "
                 "0..%u", shard_count - 1);
        lua_settop(L, top);
        return part_fail(b, type, id, idlen, fmt, got);
    }
    lua_settop(L, top);
    *shard = (uint32_t)v;
    if (idlen <= sizeof b->pc_id) {
        b->pc_type = type;
        b->pc_len = idlen;
        memcpy(b->pc_id, id, idlen);
        b->pc_shard = *shard;
    }
    return 0;
}

int ms_bridge_load_config(struct ms_bridge *b, const char *path,
                          const char *node_name, struct ms_config *cfg,
                          char *err, size_t errlen)
{
    lua_State *L = b->L;
    int top = lua_gettop(L);
    memset(cfg, 0, sizeof *cfg);
    if (push_config(L, path, err, errlen) < 0)
        return MS_ECONFIG;
    int c = lua_gettop(L); /* stack: cfg */
    lua_pushvalue(L, c);
    if (node_name)
        lua_pushstring(L, node_name);
    else
        lua_pushnil(L);
    if (call_module(L, "moonshard.config", "find_node", 2, 2, err,
                    errlen) < 0) {
        lua_settop(L, top);
        return MS_ECONFIG;
    }
    if (lua_isnil(L, -2)) {
        snprintf(err, errlen, "%s", lua_tostring(L, -1));
        lua_settop(L, top);
        return MS_ECONFIG;
    }
    lua_pop(L, 1);
    int nd = lua_gettop(L); /* stack: cfg, node */
    snprintf(cfg->path, sizeof cfg->path, "%s", path);
    copy_field(L, c, "cluster", cfg->cluster, sizeof cfg->cluster);
    copy_field(L, nd, "name", cfg->node_name, sizeof cfg->node_name);
    copy_field(L, nd, "listen", cfg->listen, sizeof cfg->listen);
    char http[128];
    copy_field(L, nd, "http", http, sizeof http);
    char *colon = strrchr(http, ':');
    if (colon) {
        *colon = 0;
        char *h = http;
        if (*h == '[') { /* [::1] */
            h++;
            h[strlen(h) - 1] = 0;
        }
        snprintf(cfg->http_host, sizeof cfg->http_host, "%s", h);
        cfg->http_port = atoi(colon + 1);
    }
    lua_getfield(L, c, "nodes");
    cfg->nnodes = (int)lua_objlen(L, -1);
    for (int i = 1; i <= cfg->nnodes; i++) {
        lua_rawgeti(L, -1, i);
        if (lua_rawequal(L, -1, nd))
            cfg->node_index = i - 1;
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    copy_field(L, c, "secret", cfg->secret, sizeof cfg->secret);
    copy_field(L, c, "admin_token", cfg->admin_token,
               sizeof cfg->admin_token);
    lua_getfield(L, c, "admin_remote");
    cfg->admin_remote = lua_toboolean(L, -1);
    lua_pop(L, 1);
    lua_getfield(L, c, "seeds");
    for (int i = 1; lua_istable(L, -1) && i <= (int)lua_objlen(L, -1) &&
                    cfg->nseeds < 16;
         i++) {
        lua_rawgeti(L, -1, i);
        snprintf(cfg->seeds[cfg->nseeds++], sizeof cfg->seeds[0], "%s",
                 lua_tostring(L, -1) ? lua_tostring(L, -1) : "");
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    lua_getfield(L, nd, "roles");
    for (int i = 1; lua_istable(L, -1) && i <= (int)lua_objlen(L, -1); i++) {
        lua_rawgeti(L, -1, i);
        size_t used = strlen(cfg->roles);
        snprintf(cfg->roles + used, sizeof cfg->roles - used, "%s%s",
                 used ? "," : "", lua_tostring(L, -1) ? lua_tostring(L, -1)
                                                      : "");
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    lua_getfield(L, c, "limits");
    cfg->max_message = (size_t)num_field(L, -1, "max_message_bytes");
    cfg->json_max_depth = (int)num_field(L, -1, "json_max_depth");
    cfg->http_timeout_ms = (uint64_t)num_field(L, -1, "http_timeout_ms");
    cfg->http_connections = (int)num_field(L, -1, "http_connections");
    lua_pop(L, 1);
    cfg->gc_step_kb = (int)num_field(L, c, "gc_step_kb");
    cfg->handoff_timeout_ms = (uint64_t)num_field(L, c, "handoff_timeout_ms");
    cfg->rebalance_interval_ms =
        (uint64_t)num_field(L, c, "rebalance_interval_ms");
    cfg->stuck_handler_ms = (uint64_t)num_field(L, c, "stuck_handler_ms");
    cfg->stuck_handler_exit_ms =
        (uint64_t)num_field(L, c, "stuck_handler_exit_ms");
    lua_getfield(L, c, "entity_list");
    int el = lua_gettop(L);
    cfg->ntypes = (int)lua_objlen(L, el);
    cfg->types = calloc((size_t)cfg->ntypes + 1, sizeof *cfg->types);
    if (!cfg->types || part_alloc(b, cfg->ntypes) < 0) {
        lua_settop(L, top);
        return MS_ENOMEM;
    }
    for (int i = 0; i < cfg->ntypes; i++) {
        struct ms_type_config *t = &cfg->types[i];
        lua_rawgeti(L, el, i + 1);
        copy_field(L, -1, "name", t->name, sizeof t->name);
        copy_field(L, -1, "module", t->module, sizeof t->module);
        t->shard_count = (uint32_t)num_field(L, -1, "shard_count");
        t->idle_timeout_ms = (uint64_t)num_field(L, -1, "idle_timeout_ms");
        t->max_pending = (uint32_t)num_field(L, -1, "max_pending");
        t->slow_handler_ms = (uint32_t)num_field(L, -1, "slow_handler_ms");
        char on_error[16];
        copy_field(L, -1, "on_error", on_error, sizeof on_error);
        t->on_error_stop = strcmp(on_error, "stop") == 0;
        copy_field(L, -1, "allocation_id", t->allocation_id,
                   sizeof t->allocation_id);
        copy_field(L, -1, "partition_id", t->partition_id,
                   sizeof t->partition_id);
        lua_getfield(L, -1, "partitioner");
        if (lua_isfunction(L, -1) && b->part_ref[i] == LUA_NOREF) {
            t->custom_partition = 1;
            b->part_ref[i] = luaL_ref(L, LUA_REGISTRYINDEX);
        } else {
            t->custom_partition = lua_isfunction(L, -1);
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
    }
    b->cfg = cfg; /* names in logs until ms_bridge_start */
    /* the coordinator's strategies come from this config */
    lua_pushvalue(L, c);
    call_module(L, "moonshard.alloc", "configure", 1, 0, err, errlen);
    lua_settop(L, top);
    return 0;
}

int ms_bridge_node_names(struct ms_bridge *b, const char *path,
                         char names[][64], int max, char *err, size_t errlen)
{
    lua_State *L = b->L;
    int top = lua_gettop(L);
    if (push_config(L, path, err, errlen) < 0)
        return MS_ECONFIG;
    lua_getfield(L, -1, "nodes");
    int n = (int)lua_objlen(L, -1);
    if (n > max)
        n = max;
    for (int i = 0; i < n; i++) {
        lua_rawgeti(L, -1, i + 1);
        copy_field(L, -1, "name", names[i], 64);
        lua_pop(L, 1);
    }
    lua_settop(L, top);
    return n;
}

int ms_bridge_start(struct ms_bridge *b, struct ms_dispatch *d,
                    const struct ms_config *cfg, char *err, size_t errlen)
{
    lua_State *L = b->L;
    int top = lua_gettop(L);
    b->d = d;
    b->cfg = cfg;
    b->min_slow_ms = UINT64_MAX;
    for (int i = 0; i < cfg->ntypes; i++)
        if (cfg->types[i].slow_handler_ms < b->min_slow_ms)
            b->min_slow_ms = cfg->types[i].slow_handler_ms;
    /* stack: opts */
    lua_createtable(L, 0, 3);
    lua_pushstring(L, cfg->node_name);
    lua_setfield(L, -2, "node");
    lua_pushinteger(L, cfg->json_max_depth);
    lua_setfield(L, -2, "json_max_depth");
    lua_createtable(L, cfg->ntypes, 0);
    for (int i = 0; i < cfg->ntypes; i++) {
        lua_createtable(L, 0, 4);
        lua_pushstring(L, cfg->types[i].name);
        lua_setfield(L, -2, "name");
        lua_pushstring(L, cfg->types[i].module);
        lua_setfield(L, -2, "module");
        lua_pushinteger(L, (lua_Integer)cfg->types[i].shard_count);
        lua_setfield(L, -2, "shard_count");
        if (i < b->npart && b->part_ref[i] != LUA_NOREF) {
            lua_rawgeti(L, LUA_REGISTRYINDEX, b->part_ref[i]);
            lua_setfield(L, -2, "partitioner");
        }
        lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "types");
    if (call_module(L, "moonshard.host", "start", 1, 1, err, errlen) < 0)
        return MS_EINVAL;
    /* stack: failed */
    int n = (int)lua_objlen(L, -1);
    for (int i = 1; i <= n; i++) {
        lua_rawgeti(L, -1, i);
        int t = (int)num_field(L, -1, "index");
        lua_getfield(L, -1, "err");
        char f[ENTITY_FIELDS_MAX];
        ms_log_field_s(f, sizeof f, 0, "type", cfg->types[t].name);
        ms_log(MS_LOG_ERROR, f,
               "behavior module '%s' failed to load, the type is "
               "unavailable: %s",
               cfg->types[t].module, lua_tostring(L, -1));
        ms_dispatch_set_unavailable(d, t, 1);
        lua_pop(L, 2);
    }
    lua_settop(L, top);
    lua_getglobal(L, "require");
    lua_pushstring(L, "moonshard.host");
    if (pcall(L, 1, 1, err, errlen) < 0)
        return MS_EINVAL;
    lua_getfield(L, -1, "driver");
    b->driver_fn = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_getfield(L, -1, "check");
    b->check_fn = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_getfield(L, -1, "on_error");
    b->on_error_fn = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_settop(L, top);
    return 0;
}

/* call_module, published for the watchdog as "module.fn" (and the entity
 * type it is for, when not NULL). */
static int call_labelled(lua_State *L, const char *module, const char *fn,
                         const char *type_name, int nargs, int nres,
                         char *err, size_t errlen)
{
    char what[MS_RUNNING_TEXT_MAX];
    int n = snprintf(what, sizeof what, "%s.%s%s%s", module, fn,
                     type_name ? " of " : "", type_name ? type_name : "");
    size_t len = n < 0 ? 0 : (size_t)n >= sizeof what ? sizeof what - 1
                                                       : (size_t)n;
    int marked = mark(MS_RUN_LUA, -1, what, len);
    int rc = call_module(L, module, fn, nargs, nres, err, errlen);
    unmark(marked);
    return rc;
}

/* ---- running --------------------------------------------------------- */

/* A driver from the pool, or a new one. Returns its registry ref. */
static int take_driver(struct ms_bridge *b)
{
    if (b->npool)
        return b->pool[--b->npool];
    lua_State *L = b->L;
    lua_State *co = lua_newthread(L);
    lua_rawgeti(L, LUA_REGISTRYINDEX, b->driver_fn);
    lua_xmove(L, co, 1); /* co stack: driver */
    return luaL_ref(L, LUA_REGISTRYINDEX);
}

static void release(struct ms_bridge *b, int ref)
{
    if (b->npool < POOL_MAX)
        b->pool[b->npool++] = ref;
    else
        luaL_unref(b->L, LUA_REGISTRYINDEX, ref);
}

/* Entity h now waits in ask b->ask_corr on coroutine `ref`. */
static int keep_waiting(struct ms_bridge *b, uint32_t h, int ref, int kind)
{
    if (!h || !b->ask_corr)
        return MS_EINVAL; /* yielded ASK without an ask */
    if (h >= b->nco) {
        uint32_t n = b->nco ? b->nco : 1024;
        while (n <= h)
            n *= 2;
        struct waiting *p = realloc(b->co_of, n * sizeof *p);
        if (!p)
            return MS_ENOMEM;
        for (uint32_t i = b->nco; i < n; i++)
            p[i].ref = LUA_NOREF;
        b->co_of = p;
        b->nco = n;
    }
    b->co_of[h].ref = ref;
    b->co_of[h].kind = kind;
    b->co_of[h].corr = b->ask_corr;
    return 0;
}

enum { R_IDLE, R_ASK, R_FREE, R_DEAD };

/* Resumes coroutine `co` with `nargs` values already on its stack. On
 * R_DEAD the error value stays on co's stack for abandon(). */
static int resume(struct ms_bridge *b, lua_State *co, int nargs)
{
    int rc = lua_resume(co, nargs);
    if (rc == LUA_YIELD) {
        void *tok = lua_touserdata(co, 1);
        lua_settop(co, 0);
        if (tok == &tok_idle)
            return R_IDLE;
        if (tok == &tok_ask)
            return R_ASK;
        if (tok == &tok_free)
            return R_FREE;
        lua_pushstring(co, "a handler yielded outside of an ask; the "
                       "message is abandoned");
        (void)b;
        return R_DEAD;
    }
    return R_DEAD;
}

/* The coroutine that ran entity h's message raised (or misbehaved): log
 * the error with its traceback, let Lua clean up the entity's tables,
 * fail the message, finish it so the entity is not stuck, and drop the
 * coroutine. */
static void abandon(struct ms_bridge *b, int ref, lua_State *co, uint32_t h,
                    int kind)
{
    lua_State *L = b->L;
    int top = lua_gettop(L);
    char f[ENTITY_FIELDS_MAX], err[512];
    entity_fields(h, f, sizeof f);
    /* stack: on_error, h, e, kind */
    lua_rawgeti(L, LUA_REGISTRYINDEX, b->on_error_fn);
    lua_pushinteger(L, h);
    if (lua_gettop(co) > 0)
        lua_xmove(co, L, 1);
    else
        lua_pushstring(L, "(no error value)");
    lua_pushinteger(L, kind);
    const char *msg = "internal error";
    int init_failed = 0;
    if (pcall(L, 3, 2, err, sizeof err) == 0) {
        msg = lua_tostring(L, -2);
        init_failed = lua_toboolean(L, -1);
    } else {
        msg = err;
    }
    luaL_traceback(L, co, msg, 0);
    ms_log(MS_LOG_ERROR, f, "handler error: %s", lua_tostring(L, -1));
    lua_pop(L, 1);
    if (h) {
        ms_dispatch_fail(b->d, h, msg, init_failed);
        finish(h);
    }
    lua_settop(L, top);
    luaL_unref(L, LUA_REGISTRYINDEX, ref);
}

/* Publishes entity h's handler as running again (an ask answered). */
static void publish_entity(struct ms_bridge *b, uint32_t h)
{
    int type;
    const char *id;
    size_t idlen;
    uint32_t shard;
    if (ms_dispatch_entity(b->d, h, &type, &id, &idlen, &shard))
        ms_running_set(&b->running, MS_RUN_HANDLER, type, shard, id, idlen,
                       b->cur_start_ns);
    else
        ms_running_set(&b->running, MS_RUN_HANDLER, -1, 0, "", 0,
                       b->cur_start_ns);
}

int ms_bridge_run(struct ms_bridge *b, int budget)
{
    lua_State *L = b->L;
    b->handled = 0;
    struct ms_resume r;
    while (ms_dispatch_next_resume(b->d, &r)) {
        if (r.h >= b->nco || b->co_of[r.h].ref == LUA_NOREF ||
            b->co_of[r.h].corr != r.corr)
            continue; /* an abandoned ask */
        int ref = b->co_of[r.h].ref;
        int kind = b->co_of[r.h].kind;
        b->co_of[r.h].ref = LUA_NOREF;
        lua_rawgeti(L, LUA_REGISTRYINDEX, ref);
        lua_State *co = lua_tothread(L, -1);
        lua_pop(L, 1);
        if (r.err == 0) {
            lua_pushlstring(co, r.payload, r.len);
            lua_pushnil(co);
        } else {
            lua_pushnil(co);
            lua_pushlstring(co, r.payload, r.len);
        }
        b->cur_h = r.h;
        b->cur_kind = kind;
        b->ask_corr = 0;
        b->cur_start_ns = clock_ns();
        b->budget = budget;
        publish_entity(b, r.h);
        switch (resume(b, co, 2)) {
        case R_ASK:
            if (keep_waiting(b, r.h, ref, kind) < 0)
                abandon(b, ref, co, r.h, kind);
            break;
        case R_FREE:
            release(b, ref);
            break;
        default:
            abandon(b, ref, co, r.h, kind);
        }
        b->cur_h = 0;
        ms_running_idle(&b->running);
    }
    b->budget = budget;
    while (b->budget > 0) {
        if (b->cur_driver == LUA_NOREF)
            b->cur_driver = take_driver(b);
        int ref = b->cur_driver;
        lua_rawgeti(L, LUA_REGISTRYINDEX, ref);
        lua_State *co = lua_tothread(L, -1);
        lua_pop(L, 1);
        b->cur_h = 0;
        b->ask_corr = 0;
        int st = resume(b, co, 0);
        if (st == R_IDLE) {
            b->cur_h = 0;
            break;
        }
        b->cur_driver = LUA_NOREF;
        if (st != R_ASK ||
            keep_waiting(b, b->cur_h, ref, b->cur_kind) < 0)
            abandon(b, ref, co, b->cur_h, b->cur_kind);
        b->cur_h = 0;
        ms_running_idle(&b->running);
    }
    return b->handled;
}

void ms_bridge_set_router(struct ms_bridge *b, struct ms_router *r,
                          const struct ms_bridge_reports *reports)
{
    b->router = r;
    if (reports)
        b->reports = *reports;
}

int ms_bridge_gc_step(struct ms_bridge *b, int kb)
{
    return lua_gc(b->L, LUA_GCSTEP, kb);
}

size_t ms_bridge_gc_full(struct ms_bridge *b)
{
    lua_gc(b->L, LUA_GCCOLLECT, 0);
    return (size_t)lua_gc(b->L, LUA_GCCOUNT, 0) * 1024 +
           (size_t)lua_gc(b->L, LUA_GCCOUNTB, 0);
}

int ms_bridge_check(struct ms_bridge *b, const char *json, size_t len,
                    char *err, size_t errlen)
{
    lua_State *L = b->L;
    static const char what[] = "moonshard.host.check";
    lua_rawgeti(L, LUA_REGISTRYINDEX, b->check_fn);
    lua_pushlstring(L, json, len);
    int marked = mark(MS_RUN_LUA, -1, what, sizeof what - 1);
    int called = pcall(L, 1, 2, err, errlen);
    unmark(marked);
    if (called < 0)
        return MS_EBADJSON;
    int rc = 0;
    if (!lua_isnil(L, -2)) {
        const char *code = lua_tostring(L, -2);
        rc = code && strcmp(code, "not_object") == 0 ? MS_ENOTTABLE
                                                     : MS_EBADJSON;
        snprintf(err, errlen, "%s", lua_tostring(L, -1));
    }
    lua_pop(L, 2);
    return rc;
}

int ms_bridge_call(struct ms_bridge *b, const char *module, const char *fn,
                   const char *arg, char **out, char *err, size_t errlen)
{
    lua_State *L = b->L;
    lua_pushstring(L, arg ? arg : "");
    int rc = call_labelled(L, module, fn, NULL, 1, 1, err, errlen);
    if (rc < 0)
        return rc;
    size_t len;
    const char *s = lua_tolstring(L, -1, &len);
    *out = malloc(len + 1);
    if (*out) {
        memcpy(*out, s ? s : "", s ? len : 0);
        (*out)[s ? len : 0] = 0;
    }
    lua_pop(L, 1);
    return *out ? 0 : MS_ENOMEM;
}

int ms_bridge_allocate(struct ms_bridge *b, const char *type_name,
                       uint32_t shard, const char *view_json, char *name,
                       size_t namelen, char *err, size_t errlen)
{
    lua_State *L = b->L;
    int top = lua_gettop(L);
    lua_pushstring(L, type_name);
    lua_pushinteger(L, shard);
    lua_pushstring(L, view_json);
    int rc = call_labelled(L, "moonshard.alloc", "allocate", type_name, 3, 2,
                           err, errlen);
    if (rc < 0)
        return rc;
    if (lua_isstring(L, -2)) {
        snprintf(name, namelen, "%s", lua_tostring(L, -2));
    } else {
        snprintf(err, errlen, "%s", lua_tostring(L, -1) ? lua_tostring(L, -1)
                                                        : "no member");
        rc = MS_EINVAL;
    }
    lua_settop(L, top);
    return rc;
}

int ms_bridge_eligible(struct ms_bridge *b, const char *type_name,
                       const char *member_json)
{
    lua_State *L = b->L;
    int top = lua_gettop(L);
    char err[256];
    lua_pushstring(L, type_name);
    lua_pushstring(L, member_json);
    int yes = 1; /* a strategy that cannot say keeps the owner */
    if (call_labelled(L, "moonshard.alloc", "eligible", type_name, 2, 1,
                      err, sizeof err) == 0)
        yes = lua_toboolean(L, -1);
    else
        ms_log(MS_LOG_WARN, NULL, "eligible of %s failed: %s", type_name,
               err);
    lua_settop(L, top);
    return yes;
}

int ms_bridge_rebalance(struct ms_bridge *b, const char *type_name,
                        const char *view_json, uint32_t *out, size_t max,
                        char *err, size_t errlen)
{
    lua_State *L = b->L;
    int top = lua_gettop(L);
    lua_pushstring(L, type_name);
    lua_pushstring(L, view_json);
    int rc = call_labelled(L, "moonshard.alloc", "rebalance", type_name, 2,
                           2, err, errlen);
    if (rc < 0)
        return rc;
    if (lua_istable(L, -2)) {
        size_t n = lua_objlen(L, -2);
        rc = 0;
        for (size_t i = 1; i <= n && (size_t)rc < max; i++) {
            lua_rawgeti(L, -2, (int)i);
            out[rc++] = (uint32_t)lua_tointeger(L, -1);
            lua_pop(L, 1);
        }
    } else {
        snprintf(err, errlen, "%s", lua_tostring(L, -1) ? lua_tostring(L, -1)
                                                        : "no answer");
        rc = MS_EINVAL;
    }
    lua_settop(L, top);
    return rc;
}

uint64_t ms_bridge_slow_count(struct ms_bridge *b)
{
    return b->slow;
}

const struct ms_running *ms_bridge_running(struct ms_bridge *b)
{
    return &b->running;
}
