/*
 * event_hook.c -- the config's on_member_event hook, called with each
 * membership event (see bridge.h, ms_bridge_member_event).
 *
 * Isolation, as for handlers: the call goes through the one protected
 * call (an error is logged with its traceback and counted, and the next
 * event is called as usual), is published to the watchdog, and is timed.
 * Unlike a handler, a hook has a budget: a count hook, set only for the
 * call, raises an error once MS_EVENT_HOOK_BUDGET_MS have passed, and
 * then again at every instruction until the call is over (a pcall of the
 * hook's own cannot keep it running: the error escapes at the first
 * instruction outside it; debug.traceback, the handler of the call, is C
 * and runs no instruction). LuaJIT runs no hook inside compiled code,
 * so moonshard.events.prepare turns the JIT off for the hook function,
 * the functions it defines and those in its upvalues.
 */
#include "bridge_int.h"

#include <stdio.h>
#include <string.h>

#include <lauxlib.h>

#define COUNT_EVERY 1000 /* VM instructions between budget checks */

/* The registry key of the bridge, for the count hook (which gets only
 * the lua_State). */
static char bridge_key;

void ms__bridge_set_event_hook(struct ms_bridge *b)
{
    lua_State *L = b->L;
    char err[512];
    /* stack: hook */
    lua_pushvalue(L, -1);
    if (ms__bridge_call_module(b, "moonshard.events", "prepare", 1, 0, err,
                               sizeof err) < 0)
        ms_log(MS_LOG_WARN, NULL, "on_member_event: %s (its calls are "
               "watched by the watchdog only)", err);
    if (b->event_hook != LUA_NOREF)
        luaL_unref(L, LUA_REGISTRYINDEX, b->event_hook);
    b->event_hook = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_pushlightuserdata(L, &bridge_key);
    lua_pushlightuserdata(L, b);
    lua_rawset(L, LUA_REGISTRYINDEX);
}

static void budget_hook(lua_State *L, lua_Debug *ar)
{
    (void)ar;
    lua_pushlightuserdata(L, &bridge_key);
    lua_rawget(L, LUA_REGISTRYINDEX);
    struct ms_bridge *b = lua_touserdata(L, -1);
    lua_pop(L, 1);
    if (b && ms__bridge_clock_ns() >= b->hook_deadline_ns) {
        if (!b->hook_timed_out) {
            b->hook_timed_out = 1;
            b->hook_stats.timeouts++;
            /* the hook may catch the error (a retry loop around pcall):
             * from now on every instruction raises it again, so that it
             * climbs out of every pcall of the hook's own */
            lua_sethook(L, budget_hook, LUA_MASKCOUNT, 1);
        }
        /* no position: the hook is somewhere in its loop */
        lua_pushfstring(L, "on_member_event ran past its budget of %d ms",
                        MS_EVENT_HOOK_BUDGET_MS);
        lua_error(L);
    }
}

int ms_bridge_has_member_hook(struct ms_bridge *b)
{
    return b->event_hook != LUA_NOREF;
}

void ms_bridge_member_hook_stats(struct ms_bridge *b,
                                 struct ms_bridge_hook_stats *out)
{
    *out = b->hook_stats;
}

int ms_bridge_member_event(struct ms_bridge *b, const char *json,
                           size_t len)
{
    static const char what[] = "on_member_event";
    if (b->event_hook == LUA_NOREF)
        return 0;
    lua_State *L = b->L;
    char err[1024];
    b->hook_stats.calls++;
    /* stack: events.call args: hook, json */
    lua_rawgeti(L, LUA_REGISTRYINDEX, b->event_hook);
    lua_pushlstring(L, json, len);
    int marked = ms__bridge_mark(b, MS_RUN_LUA, -1, what, sizeof what - 1);
    uint64_t start = ms__bridge_clock_ns();
    b->hook_deadline_ns = start + (uint64_t)MS_EVENT_HOOK_BUDGET_MS * 1000000;
    b->hook_timed_out = 0;
    lua_sethook(L, budget_hook, LUA_MASKCOUNT, COUNT_EVERY);
    int rc = ms__bridge_call_module(b, "moonshard.events", "call", 2, 0, err,
                                    sizeof err);
    lua_sethook(L, NULL, 0, 0);
    ms__bridge_unmark(b, marked);
    uint64_t took_ms = (ms__bridge_clock_ns() - start) / 1000000;
    if (rc < 0) {
        b->hook_stats.errors++;
        ms_log(MS_LOG_ERROR, NULL, "on_member_event failed: %s", err);
    } else if (took_ms >= MS_EVENT_HOOK_SLOW_MS) {
        b->hook_stats.slow++;
        ms_log(MS_LOG_WARN, NULL, "slow on_member_event: %llu ms",
               (unsigned long long)took_ms);
    }
    return rc;
}
