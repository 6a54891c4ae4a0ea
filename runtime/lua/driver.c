/*
 * driver.c -- the behaviors loaded and run. Driver coroutines: Lua's
 * moonshard.host.driver loops over ms_lua_next (leaf.c). The bridge
 * resumes the current driver; when it yields IDLE the round is over; when
 * it yields ASK the entity being handled keeps that coroutine (its handle
 * -> registry ref in `co_of`) and a fresh driver continues; when a resumed
 * entity finishes, its coroutine yields FREE and returns to the pool. A
 * coroutine that raises is abandoned: its message fails, the entity goes
 * on.
 */
#include "bridge_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

/* Sentinels yielded by driver coroutines; their addresses are the keys. */
char ms__bridge_tok_ask, ms__bridge_tok_idle, ms__bridge_tok_free;

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
        if (cfg->types[i].persistence != MS_PERSIST_NONE) {
            lua_pushstring(L, cfg->types[i].persistence == MS_PERSIST_STATE
                                  ? "state"
                                  : "events");
            lua_setfield(L, -2, "persistence");
            lua_pushinteger(L, (lua_Integer)cfg->types[i].snapshot_every);
            lua_setfield(L, -2, "snapshot_every");
            lua_pushboolean(L, cfg->types[i].delete_events_on_snapshot);
            lua_setfield(L, -2, "delete_events_on_snapshot");
        }
        if (i < b->npart && b->part_ref[i] != LUA_NOREF) {
            lua_rawgeti(L, LUA_REGISTRYINDEX, b->part_ref[i]);
            lua_setfield(L, -2, "partitioner");
        }
        lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "types");
    if (ms__bridge_call_module(b, "moonshard.host", "start", 1, 1, err,
                               errlen) < 0)
        return MS_EINVAL;
    /* stack: failed */
    int n = (int)lua_objlen(L, -1);
    for (int i = 1; i <= n; i++) {
        lua_rawgeti(L, -1, i);
        lua_getfield(L, -1, "index");
        int t = (int)lua_tointeger(L, -1);
        lua_pop(L, 1);
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
    if (ms__bridge_pcall(b, 1, 1, err, errlen) < 0)
        return MS_EINVAL;
    lua_getfield(L, -1, "driver");
    b->driver_fn = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_getfield(L, -1, "check");
    b->check_fn = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_getfield(L, -1, "on_error");
    b->on_error_fn = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_settop(L, top);
    if (ms_bridge_gc_pace(b, cfg->gc_headroom_mb) < 0) {
        snprintf(err, errlen, "out of memory: the collector's pace");
        return MS_ENOMEM;
    }
    return 0;
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
        if (tok == &ms__bridge_tok_idle)
            return R_IDLE;
        if (tok == &ms__bridge_tok_ask)
            return R_ASK;
        if (tok == &ms__bridge_tok_free)
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
    ms__bridge_entity_fields(b, h, f, sizeof f);
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
    if (ms__bridge_pcall(b, 3, 2, err, sizeof err) == 0) {
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
        ms__bridge_finish(b, h);
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
        b->cur_start_ns = ms__bridge_clock_ns();
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
    ms__bridge_restated_flush(b);
    ms__gc_pace_settle(L, &b->gc);
    return b->handled;
}
