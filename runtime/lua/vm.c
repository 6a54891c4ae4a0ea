/*
 * vm.c -- the bridge's LuaJIT VM: its creation with the package paths and
 * preloads, the one protected-call wrapper, calls into Lua modules, the
 * GC, and what runs now for the watchdog (see bridge_int.h for the map of
 * the bridge).
 */
#include "bridge_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <lauxlib.h>
#include <lualib.h>

#include "json_encode.h"
#include "lalloc.h"

/* ---- what runs now, for the watchdog --------------------------------- */

/* A handler's own calls stay the handler's: see bridge_int.h. */
int ms__bridge_mark(struct ms_bridge *b, int kind, int type,
                    const char *text, size_t len)
{
    if (!ms_running_is_idle(&b->running))
        return 0;
    ms_running_set(&b->running, kind, type, 0, text, len,
                   ms__bridge_clock_ns());
    return 1;
}

void ms__bridge_unmark(struct ms_bridge *b, int marked)
{
    if (marked)
        ms_running_idle(&b->running);
}

/* ---- the one protected-call wrapper --------------------------------- */

/* stack in: fn, args...   out: results... (or nothing) */
int ms__bridge_pcall(struct ms_bridge *b, int nargs, int nres, char *err,
                     size_t errlen)
{
    static const char what[] = "Lua code of the host";
    lua_State *L = b->L;
    int base = lua_gettop(L) - nargs;
    lua_rawgeti(L, LUA_REGISTRYINDEX, b->traceback_fn);
    lua_insert(L, base); /* stack: traceback, fn, args... */
    int marked = ms__bridge_mark(b, MS_RUN_LUA, -1, what, sizeof what - 1);
    int rc = lua_pcall(L, nargs, nres, base);
    ms__bridge_unmark(b, marked);
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

/* ---- lifecycle --------------------------------------------------------- */

/* core.now() -> wall-clock seconds */
int ms__bridge_l_now(lua_State *L)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    lua_pushnumber(L, (lua_Number)tv.tv_sec + tv.tv_usec / 1e6);
    return 1;
}

static int open_clock(lua_State *L)
{
    lua_newtable(L);
    lua_pushcfunction(L, ms__bridge_l_now);
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
                        const char *arg, int gc_headroom_mb, char **out,
                        char *err, size_t errlen)
{
    lua_State *L = luaL_newstate();
    if (!L)
        return MS_ENOMEM;
    struct ms_gc_pace pace = {0};
    luaL_openlibs(L);
    if (gc_headroom_mb > 0 && ms_gc_pace_set(L, &pace, gc_headroom_mb) < 0) {
        pace.closing = 1;
        lua_close(L);
        return MS_ENOMEM;
    }
    /* the runtime's encoder, for a baseline that encodes as the runtime
     * does (bench/floor.lua) */
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "preload");
    lua_pushcfunction(L, ms_json_encode_open);
    lua_setfield(L, -2, "moonshard.encoder");
    lua_pop(L, 2);
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
    pace.closing = 1;
    lua_close(L);
    return rc;
}

/* An error outside any protected call (luaL_newstate's panic, which
 * lua_newstate does not set): said, then LuaJIT exits the process. */
static int on_panic(lua_State *L)
{
    const char *s = lua_tostring(L, -1);
    fprintf(stderr, "moonshard: Lua error outside a protected call: %s\n",
            s ? s : "?");
    fflush(stderr);
    return 0;
}

/* lua_pcall body (stack: kb): one incremental step of the collector, for
 * the idle step. A step runs finalizers (a behavior's ffi.gc function, whose
 * error LuaJIT passes on) and can be out of memory (the string table's
 * shrink takes a new one): unprotected, either error went to the panic
 * function, which ends the process. Returns whether it ended a cycle. */
static int gc_step_call(lua_State *L)
{
    lua_pushboolean(L, lua_gc(L, LUA_GCSTEP, (int)lua_tointeger(L, 1)));
    return 1;
}

int ms_bridge_new(struct ms_bridge **out, uv_loop_t *loop, const char *home)
{
    struct ms_bridge *b = calloc(1, sizeof *b);
    if (!b)
        return MS_ENOMEM;
    /* the VM's allocator keeps its pages (lalloc.c); LuaJIT refuses
     * one of ours where its objects must sit low in memory (64-bit
     * builds without GC64): its own allocator then */
    b->lalloc = ms_lalloc_new();
    b->L = b->lalloc ? lua_newstate(ms_lalloc_f, b->lalloc) : NULL;
    if (b->L) {
        lua_atpanic(b->L, on_panic);
    } else {
        ms_lalloc_free(b->lalloc);
        b->lalloc = NULL;
        b->L = luaL_newstate();
    }
    if (!b->L) {
        free(b);
        return MS_ENOMEM;
    }
    b->loop = loop;
    b->cur_driver = LUA_NOREF;
    b->event_hook = LUA_NOREF;
    b->states_ref = LUA_NOREF;
    b->pc_type = -1;
    snprintf(b->home, sizeof b->home, "%s", home);
    lua_State *L = b->L;
    luaL_openlibs(L);
    /* stack: package.preload */
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "preload");
    lua_pushlightuserdata(L, b); /* the leaf functions' bridge */
    lua_pushcclosure(L, ms__bridge_open_core, 1);
    lua_setfield(L, -2, "moonshard.core");
    lua_pushcfunction(L, ms_json_encode_open);
    lua_setfield(L, -2, "moonshard.encoder");
    lua_pop(L, 2);
    set_paths(L, home);
    lua_getglobal(L, "debug");
    lua_getfield(L, -1, "traceback");
    b->traceback_fn = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_pop(L, 1);
    lua_pushcfunction(L, gc_step_call);
    b->gc_step_fn = luaL_ref(L, LUA_REGISTRYINDEX);
    *out = b;
    return 0;
}

void ms_bridge_free(struct ms_bridge *b)
{
    if (!b)
        return;
    b->gc.closing = 1; /* lua_close runs the sentinel's finalizer */
    lua_close(b->L);
    ms_lalloc_free(b->lalloc);
    free(b->co_of);
    free(b->state_addr);
    free(b->part_ref);
    free(b->part_fails);
    free(b);
}

/* stack in: args...  out: results... */
int ms__bridge_call_module(struct ms_bridge *b, const char *module,
                           const char *fn, int nargs, int nres, char *err,
                           size_t errlen)
{
    lua_State *L = b->L;
    lua_getglobal(L, "require");
    lua_pushstring(L, module);
    int rc = ms__bridge_pcall(b, 1, 1, err, errlen);
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
    return ms__bridge_pcall(b, nargs, nres, err, errlen);
}

int ms__bridge_call_labelled(struct ms_bridge *b, const char *module,
                             const char *fn, const char *type_name,
                             int nargs, int nres, char *err, size_t errlen)
{
    char what[MS_RUNNING_TEXT_MAX];
    int n = snprintf(what, sizeof what, "%s.%s%s%s", module, fn,
                     type_name ? " of " : "", type_name ? type_name : "");
    size_t len = n < 0 ? 0 : (size_t)n >= sizeof what ? sizeof what - 1
                                                       : (size_t)n;
    int marked = ms__bridge_mark(b, MS_RUN_LUA, -1, what, len);
    int rc = ms__bridge_call_module(b, module, fn, nargs, nres, err, errlen);
    ms__bridge_unmark(b, marked);
    return rc;
}

void ms_bridge_set_router(struct ms_bridge *b, struct ms_router *r,
                          const struct ms_bridge_reports *reports)
{
    b->router = r;
    if (reports)
        b->reports = *reports;
}

/* The Lua heap in bytes, live and garbage. */
static size_t heap_bytes(lua_State *L)
{
    return (size_t)lua_gc(L, LUA_GCCOUNT, 0) * 1024 +
           (size_t)lua_gc(L, LUA_GCCOUNTB, 0);
}

int ms_bridge_gc_step(struct ms_bridge *b, int kb)
{
    lua_State *L = b->L;
    /* stack: gc_step_call, kb (no allocation: a registry ref, lua_pcall) */
    lua_rawgeti(L, LUA_REGISTRYINDEX, b->gc_step_fn);
    lua_pushinteger(L, kb);
    int done = 0;
    if (lua_pcall(L, 1, 1, 0) == 0) {
        done = lua_toboolean(L, -1);
    } else {
        const char *msg = lua_tostring(L, -1);
        ms_log(MS_LOG_ERROR, NULL, "Lua collector step: %s",
               msg ? msg : "(error object is not a string)");
    }
    lua_pop(L, 1);
    ms__gc_pace_settle(L, &b->gc);
    return done;
}

/* ---- the collector's pace -------------------------------------------
 *
 * LuaJIT starts a collection cycle when its heap reaches `pause` percent
 * of what the last cycle left (200: each time the heap doubles). A cycle
 * marks every live object and sweeps every object, so its cost grows
 * with the live heap, and the garbage it frees with the pause. A node's
 * live heap is mostly its entities' states, which every cycle walks
 * again: with 100,000 Counter states (about 12 MB) a cycle came every
 * 12 MB of message garbage, and the collector was the largest item of a
 * message's time (README "Where the time goes").
 *
 * So the node lets up to gc_headroom_mb of garbage build up between
 * cycles, and up to five times the live heap: after each cycle the pause
 * becomes 100 * (live + headroom) / live, within 200 (LuaJIT's doubling,
 * for a heap larger than the headroom: the headroom bounds what the
 * policy adds to the node's memory) and 600. The cap keeps a small
 * heap's garbage within the caches: on a node with 100 entities, 64 MB of
 * garbage between cycles made each allocation touch memory the caches no
 * longer held, and the remote asks of `bench all` were slower than with
 * LuaJIT's pause (0.82-0.96 of Redis against 0.95-1.12 with the cap, in
 * three pairs), while a cycle over so small a heap costs little.
 *
 * It is set once a cycle, in two steps. A sentinel, an empty userdata
 * that nothing holds, has a finalizer (gc_sentinel) that runs in the
 * cycle's last phase, before LuaJIT computes the next threshold (its
 * estimate of the live heap times the pause), and leaves a new sentinel
 * for the next cycle. The finalizer sees only the heap's total, which
 * also holds what was allocated while the cycle ran (on a small live
 * heap, several times the live heap), so the pause it sets from it
 * starts the next cycle early. When the handlers' round ends
 * (ms_bridge_run) or an idle step (ms_bridge_gc_step) does, the pace
 * settles: LUA_GCRESTART with -1 sets the threshold to the heap's total
 * now times the pause, that is to the total plus the headroom (or five
 * times the total, or the total again, at the bounds). A cycle
 * that began in between (a round allocating more than that early
 * threshold) is put off by at most one headroom of garbage.
 * gc_headroom_mb = 0: LuaJIT's pause stays as it is (the sentinel still
 * counts the cycles, for GET /v1/stats).
 *
 * Out of memory for the next sentinel, the cycle ends without one: the
 * pause falls back to LuaJIT's (a pause made for this heap, kept while the
 * live heap grows, would let it grow by that factor: 5 MB live and 64 MB
 * of headroom is 600%, and a live heap of 100 MB would then wait for 600
 * MB), and each settle tries again. The arming is a protected call: its
 * error reaches neither the handler whose allocation ran the cycle nor
 * the idle step. */
#define GC_PAUSE_BASE 200 /* LuaJIT's default (LUAI_GCPAUSE) */
#define GC_PAUSE_MAX 600  /* garbage at most 5 times the live heap */

static void gc_arm(lua_State *L, struct ms_gc_pace *g)
{
    lua_newuserdata(L, 0);
    lua_rawgeti(L, LUA_REGISTRYINDEX, g->mt);
    lua_setmetatable(L, -2);
    lua_pop(L, 1);
}

/* The pause that starts the next cycle when `headroom` bytes of garbage
 * came on top of `live` (from GC_PAUSE_BASE to GC_PAUSE_MAX). */
static int gc_pause_for(size_t live, size_t headroom)
{
    if (live < 1024) /* no division by 0 */
        live = 1024;
    double p = 100.0 * ((double)live + (double)headroom) / (double)live;
    if (p > GC_PAUSE_MAX)
        return GC_PAUSE_MAX;
    if (p < GC_PAUSE_BASE)
        return GC_PAUSE_BASE;
    return (int)p;
}

static void gc_set_pause(lua_State *L, struct ms_gc_pace *g)
{
    g->pause = gc_pause_for(heap_bytes(L), g->headroom);
    lua_gc(L, LUA_GCSETPAUSE, g->pause);
}

/* lua_cpcall body (stack: the pace, a light userdata) */
static int gc_arm_call(lua_State *L)
{
    gc_arm(L, lua_touserdata(L, 1));
    return 0;
}

/* Leaves a sentinel for the next cycle; out of memory none, LuaJIT's
 * pause, and a settle to try again (see above). */
static void gc_rearm(lua_State *L, struct ms_gc_pace *g)
{
    if (lua_cpcall(L, gc_arm_call, g) == 0) {
        g->armed = 1;
        return;
    }
    lua_pop(L, 1); /* the error */
    g->armed = 0;
    g->settle = 1;
    if (g->headroom > 0) {
        g->pause = GC_PAUSE_BASE;
        lua_gc(L, LUA_GCSETPAUSE, GC_PAUSE_BASE);
    }
}

void ms__gc_pace_settle(lua_State *L, struct ms_gc_pace *g)
{
    if (!g->settle)
        return;
    if (!g->armed) {
        gc_rearm(L, g);
        if (!g->armed)
            return; /* still out of memory: after the next round */
    }
    g->settle = 0;
    if (g->headroom == 0)
        return;
    gc_set_pause(L, g);
    /* threshold = heap now * pause / 100 = heap now + headroom */
    lua_gc(L, LUA_GCRESTART, -1);
}

/* __gc of the sentinel (upvalue 1: the pace); runs once a cycle. LuaJIT
 * stops GC steps while a finalizer runs, so allocating here is safe. */
static int gc_sentinel(lua_State *L)
{
    struct ms_gc_pace *g = lua_touserdata(L, lua_upvalueindex(1));
    if (g->closing)
        return 0;
    g->cycles++;
    gc_rearm(L, g);
    if (g->armed && g->headroom > 0) {
        gc_set_pause(L, g);
        g->settle = 1;
    }
    return 0;
}

/* lua_cpcall body (stack: the pace): the sentinel's metatable, and the
 * first sentinel */
static int gc_pace_call(lua_State *L)
{
    struct ms_gc_pace *g = lua_touserdata(L, 1);
    lua_createtable(L, 0, 1);
    lua_pushlightuserdata(L, g);
    lua_pushcclosure(L, gc_sentinel, 1);
    lua_setfield(L, -2, "__gc");
    g->mt = luaL_ref(L, LUA_REGISTRYINDEX);
    gc_arm(L, g);
    return 0;
}

int ms_gc_pace_set(lua_State *L, struct ms_gc_pace *g, int headroom_mb)
{
    if (g->mt != 0) /* set once, before the first message */
        return 0;
    g->headroom = headroom_mb > 0 ? (size_t)headroom_mb << 20 : 0;
    /* the pause in use (LuaJIT's default unless set), read by setting it */
    g->pause = lua_gc(L, LUA_GCSETPAUSE, GC_PAUSE_BASE);
    lua_gc(L, LUA_GCSETPAUSE, g->pause);
    if (lua_cpcall(L, gc_pace_call, g) != 0) {
        lua_pop(L, 1); /* out of memory */
        return MS_ENOMEM;
    }
    g->armed = 1;
    if (g->headroom > 0)
        gc_set_pause(L, g);
    return 0;
}

int ms_bridge_gc_pace(struct ms_bridge *b, int headroom_mb)
{
    return ms_gc_pace_set(b->L, &b->gc, headroom_mb);
}

void ms_bridge_gc_stats(struct ms_bridge *b, struct ms_bridge_gc *out)
{
    out->heap = heap_bytes(b->L);
    out->cycles = b->gc.cycles;
    out->pause = b->gc.pause;
    out->headroom = b->gc.headroom;
}

size_t ms_bridge_gc_full(struct ms_bridge *b)
{
    lua_gc(b->L, LUA_GCCOLLECT, 0);
    return heap_bytes(b->L);
}

int ms_bridge_check(struct ms_bridge *b, const char *json, size_t len,
                    char *err, size_t errlen)
{
    lua_State *L = b->L;
    static const char what[] = "moonshard.host.check";
    lua_rawgeti(L, LUA_REGISTRYINDEX, b->check_fn);
    lua_pushlstring(L, json, len);
    int marked = ms__bridge_mark(b, MS_RUN_LUA, -1, what, sizeof what - 1);
    int called = ms__bridge_pcall(b, 1, 2, err, errlen);
    ms__bridge_unmark(b, marked);
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
    int rc = ms__bridge_call_labelled(b, module, fn, NULL, 1, 1, err, errlen);
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

uint64_t ms_bridge_slow_count(struct ms_bridge *b)
{
    return b->slow;
}

const struct ms_running *ms_bridge_running(struct ms_bridge *b)
{
    return &b->running;
}
