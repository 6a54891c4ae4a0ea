/*
 * The collector's pace (runtime/lua/vm.c, gc_headroom_mb) out of memory:
 * a LuaJIT state whose allocator refuses, on demand, every new object of
 * the size of the sentinel (an empty userdata). The sentinel's finalizer
 * then cannot leave a new sentinel: the collection that ran it must not
 * fail (in a node it runs inside a handler, or unprotected in the idle GC
 * step), the pause must fall back to LuaJIT's (not stay a pause made for
 * a smaller heap), and the pace must come back (the next settle arms a
 * sentinel again) once memory is there. Also: lua_close with `closing`
 * set runs no pace code.
 */
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "../../runtime/lua/bridge_int.h"
#include "check.h"

static size_t refuse_size; /* 0: allocate all */
static size_t last_new;    /* the size of the last new object */
static int refused;

static void *alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
    (void)ud;
    (void)osize;
    if (nsize == 0) {
        free(ptr);
        return NULL;
    }
    if (ptr == NULL) {
        last_new = nsize;
        if (refuse_size && nsize == refuse_size) {
            refused++;
            return NULL;
        }
    }
    return realloc(ptr, nsize);
}

static int collect(lua_State *L)
{
    lua_gc(L, LUA_GCCOLLECT, 0);
    return 0;
}

/* A live heap of about `mb` MB, as global `live`. */
static void grow(lua_State *L, int mb)
{
    char code[128];
    snprintf(code, sizeof code,
             "live = {} for i = 1, %d do live[i] = {i, i, i, i} end",
             mb * 16384);
    CHECK(luaL_dostring(L, code) == 0);
}

int main(void)
{
    lua_State *L = lua_newstate(alloc, NULL);
    if (!L) {
        fprintf(stderr, "this LuaJIT takes no allocator (not GC64?)\n");
        return 1;
    }
    luaL_openlibs(L);
    /* the size of an empty userdata, as the sentinel is */
    lua_newuserdata(L, 0);
    size_t udata = last_new;
    lua_pop(L, 1);

    struct ms_gc_pace g;
    memset(&g, 0, sizeof g);
    CHECK(ms_gc_pace_set(L, &g, 64) == 0);
    CHECK(g.pause > 1000); /* 64 MB over a heap of some 100 KB */
    lua_gc(L, LUA_GCCOLLECT, 0);
    CHECK(g.cycles == 1);

    /* out of memory for the next sentinel: the collection succeeds */
    lua_pushcfunction(L, collect); /* allocated before the refusals */
    refuse_size = udata;
    int rc = lua_pcall(L, 0, 0, 0);
    CHECK(rc == 0);
    if (rc != 0)
        lua_pop(L, 1);
    CHECK(refused > 0);
    CHECK(g.cycles == 2);
    /* no sentinel, so no pause set for the heap each cycle: LuaJIT's */
    CHECK(g.pause == 200);
    CHECK(lua_gc(L, LUA_GCSETPAUSE, 200) == 200);
    ms__gc_pace_settle(L, &g); /* still out of memory: tries, no harm */
    CHECK(g.pause == 200);
    CHECK(lua_gc(L, LUA_GCSETPAUSE, 200) == 200);

    /* memory is back: the settle after the next round arms a sentinel,
     * which counts the cycles and sets the pause again */
    refuse_size = 0;
    ms__gc_pace_settle(L, &g);
    CHECK(g.pause > 1000);
    lua_gc(L, LUA_GCCOLLECT, 0);
    CHECK(g.cycles == 3);
    grow(L, 128); /* a live heap twice the headroom: LuaJIT's doubling */
    CHECK(g.cycles > 3); /* its own cycles, counted */
    uint64_t cycles = g.cycles;
    lua_gc(L, LUA_GCCOLLECT, 0);
    CHECK(g.cycles == cycles + 1);
    CHECK(g.pause == 200);

    g.closing = 1; /* lua_close runs the sentinel's finalizer */
    lua_close(L);
    CHECK(g.cycles == cycles + 1);
    CHECK_DONE();
}
