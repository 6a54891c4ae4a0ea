/*
 * The states' addresses (runtime/lua/leaf.c): what a delivery prefetches.
 * core.state_at keeps the address of an entity's state table by handle,
 * growing its array as handles grow and forgetting on anything but a
 * table; core.keep_states names host.lua's states table, from which
 * ms__bridge_restated_flush takes the addresses of the states that
 * handlers returned (noted through the FFI in the bridge's `restated`,
 * as host.lua does). A wrong address would not break a message (a
 * prefetch reads nothing), so these checks are the only place it shows.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>
#include <uv.h>

#include "../../runtime/lua/bridge_int.h"
#include "check.h"

static lua_State *L;
static struct ms_bridge *b;

static void run(const char *code)
{
    if (luaL_dostring(L, code) != 0) {
        fprintf(stderr, "lua: %s\n", lua_tostring(L, -1));
        CHECK(0);
    }
}

/* the error of `code`, which must raise */
static const char *fails(const char *code)
{
    CHECK(luaL_dostring(L, code) != 0);
    const char *e = lua_tostring(L, -1);
    lua_pop(L, 1);
    return e ? e : "";
}

/* the address of global `name` (a table) */
static const void *addr_of(const char *name)
{
    lua_getglobal(L, name);
    CHECK(lua_type(L, -1) == LUA_TTABLE);
    const void *p = lua_topointer(L, -1);
    lua_pop(L, 1);
    return p;
}

static void test_state_at(void)
{
    run("core = require 'moonshard.core'; t5 = {} t7 = {} big = {}");
    CHECK(ms__bridge_state_addr(b, 5) == NULL);
    CHECK(ms__bridge_state_addr(b, 0) == NULL);
    run("core.state_at(5, t5) core.state_at(7, t7)");
    CHECK(ms__bridge_state_addr(b, 5) == addr_of("t5"));
    CHECK(ms__bridge_state_addr(b, 7) == addr_of("t7"));
    CHECK(ms__bridge_state_addr(b, 6) == NULL);
    uint32_t cap = b->nstate_addr;
    CHECK(cap > 7);
    /* a handle past the array grows it, and keeps what was there */
    run("core.state_at(100000, big)");
    CHECK(b->nstate_addr > 100000);
    CHECK(ms__bridge_state_addr(b, 100000) == addr_of("big"));
    CHECK(ms__bridge_state_addr(b, 5) == addr_of("t5"));
    CHECK(ms__bridge_state_addr(b, 99999) == NULL);
    CHECK(ms__bridge_state_addr(b, b->nstate_addr) == NULL);
    /* forgetting past the array does not grow it */
    cap = b->nstate_addr;
    run("core.state_at(5000000, nil)");
    CHECK(b->nstate_addr == cap);
    /* anything but a table forgets */
    run("core.state_at(5, nil)");
    CHECK(ms__bridge_state_addr(b, 5) == NULL);
    run("core.state_at(7, 'a string')");
    CHECK(ms__bridge_state_addr(b, 7) == NULL);
    /* handle 0 and those past MS_STATE_ADDR_MAX: nothing kept, no error
     * (an entity's activation must not fail on its handle) */
    run("core.state_at(0, t5) core.state_at(0, nil)");
    CHECK(ms__bridge_state_addr(b, 0) == NULL);
    cap = b->nstate_addr;
    run("core.state_at(2^28, t5) core.state_at(2^32 - 1, t5)");
    CHECK(b->nstate_addr == cap);
    CHECK(ms__bridge_state_addr(b, 1u << 28) == NULL);
    /* not a handle */
    CHECK(strstr(fails("core.state_at(-1, t5)"), "not an entity handle"));
    CHECK(strstr(fails("core.state_at(2^32, t5)"), "not an entity handle"));
    CHECK(strstr(fails("core.state_at('x', t5)"), "number expected"));
    CHECK(ms__bridge_state_addr_set(b, 0, b) < 0);
    CHECK(ms__bridge_state_addr_set(b, MS_STATE_ADDR_MAX, b) < 0);
}

static void test_restated(void)
{
    /* no states table named yet: a flush only empties the list */
    b->restated.h[0] = 9;
    b->restated.n = 1;
    ms__bridge_restated_flush(b);
    CHECK(b->restated.n == 0);
    CHECK(ms__bridge_state_addr(b, 9) == NULL);

    /* as host.lua does: name the table, note handles through the FFI */
    run("states = {} core.keep_states(states)"
        " a = {} c = {} states[9] = a states[11] = c states[200000] = a"
        " ffi = require 'ffi'"
        " ffi.cdef(('struct ms_lua_restated { uint32_t n; uint32_t h[%d]; };')"
        "   :format(core.RESTATED_MAX))"
        " R = ffi.cast('struct ms_lua_restated *', core.RESTATED)"
        " R.h[0] = 9 R.h[1] = 11 R.h[2] = 12 R.h[3] = 200000 R.n = 4");
    CHECK(b->restated.n == 4);
    run("core.state_at(12, {})"); /* 12 has no state by flush time */
    CHECK(ms__bridge_state_addr(b, 12) != NULL);
    ms__bridge_restated_flush(b);
    CHECK(b->restated.n == 0);
    CHECK(ms__bridge_state_addr(b, 9) == addr_of("a"));
    CHECK(ms__bridge_state_addr(b, 11) == addr_of("c"));
    CHECK(ms__bridge_state_addr(b, 12) == NULL);
    CHECK(ms__bridge_state_addr(b, 200000) == addr_of("a"));
    /* a state replaced again: the flush reads the table as it is now */
    run("d = {} states[9] = d R.h[0] = 9 R.n = 1");
    ms__bridge_restated_flush(b);
    CHECK(ms__bridge_state_addr(b, 9) == addr_of("d"));
    /* a count past the array (a broken writer) reads no further than it */
    run("R.n = 100000");
    ms__bridge_restated_flush(b);
    CHECK(b->restated.n == 0);
    CHECK(strstr(fails("core.keep_states({})"), "called twice"));
    CHECK(strstr(fails("core.keep_states(1)"), "table expected"));
    CHECK(lua_gettop(L) == 0);
}

/* host.lua's on_error, which driver.c's abandon() calls with the handle
 * of the delivery that was running, 0 when none was (a driver that died
 * outside a delivery: `if (h)` there): its forget() sets no address and
 * must not raise, or the error logged is state_at's instead of the
 * handler's. A bridge of its own: host.lua names its states table. */
static void test_on_error_no_entity(uv_loop_t *loop, const char *home)
{
    struct ms_bridge *b2;
    CHECK(ms_bridge_new(&b2, loop, home) == 0);
    lua_State *L2 = b2->L;
    if (luaL_dostring(L2, "local host = require 'moonshard.host'"
                          " return host.on_error(0, 'boom', 0)") != 0) {
        fprintf(stderr, "on_error(0): %s\n", lua_tostring(L2, -1));
        CHECK(0);
    } else {
        CHECK(lua_tostring(L2, -2) && strcmp(lua_tostring(L2, -2), "boom") == 0);
    }
    ms_bridge_free(b2);
}

int main(void)
{
    uv_loop_t loop;
    CHECK(uv_loop_init(&loop) == 0);
    const char *home = getenv("MOONSHARD_HOME");
    CHECK(ms_bridge_new(&b, &loop, home ? home : ".") == 0);
    L = b->L;
    test_state_at();
    test_restated();
    test_on_error_no_entity(&loop, home ? home : ".");
    ms_bridge_free(b);
    CHECK(uv_loop_close(&loop) == 0);
    CHECK_DONE();
}
