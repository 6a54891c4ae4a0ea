/*
 * The collector's pace (runtime/lua/vm.c, gc_headroom_mb) out of memory:
 * a LuaJIT state whose allocator refuses, on demand, every new object of
 * the size of the sentinel (an empty userdata). The sentinel's finalizer
 * then cannot leave a new sentinel: the collection that ran it must not
 * fail (in a node it runs inside a handler, or unprotected in the idle GC
 * step), the pause must fall back to LuaJIT's (not stay a pause made for
 * a smaller heap), and the pace must come back (the next settle arms a
 * sentinel again) once memory is there. Also: lua_close with `closing`
 * set runs no pace code. And the settle: garbage made between a cycle's
 * end and the end of the round does not count against the next cycle's
 * headroom.
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

/* Garbage, about `kb` KB of it, counted: returns the heap's growth
 * (0 when a cycle ended meanwhile: *cycled set). */
static size_t litter(lua_State *L, struct ms_gc_pace *g, int kb, int *cycled)
{
    uint64_t c0 = g->cycles;
    size_t h0 = (size_t)lua_gc(L, LUA_GCCOUNT, 0);
    char code[160];
    snprintf(code, sizeof code,
             "local r = {} for i = 1, %d do r[i %% 64] = {i, i, i, i} end",
             kb * 1024 / 80);
    CHECK(luaL_dostring(L, code) == 0);
    *cycled = g->cycles != c0;
    size_t h1 = (size_t)lua_gc(L, LUA_GCCOUNT, 0);
    return *cycled || h1 < h0 ? 0 : h1 - h0;
}

/* A live heap of about 3 MB and 16 MB of headroom. After a cycle's end,
 * a round makes 8 MB of garbage; the settle at its end puts the next
 * cycle 16 MB (the headroom) after that, not 16 MB after the cycle's
 * end. The collector's steps are made so large (stepmul) that
 * a cycle ends as soon as it starts. */
static void settle_case(void)
{
    lua_State *L = luaL_newstate();
    luaL_openlibs(L);
    struct ms_gc_pace g;
    memset(&g, 0, sizeof g);
    grow(L, 2);
    CHECK(ms_gc_pace_set(L, &g, 16) == 0);
    lua_gc(L, LUA_GCSETSTEPMUL, 1000000);
    lua_gc(L, LUA_GCCOLLECT, 0);
    CHECK(g.settle == 1);
    int cycled;
    size_t round = litter(L, &g, 8192, &cycled);
    CHECK(!cycled && round > 6 * 1024);
    ms__gc_pace_settle(L, &g);
    CHECK(g.settle == 0);
    size_t after = 0;
    for (int i = 0; i < 200; i++) {
        after += litter(L, &g, 128, &cycled);
        if (cycled)
            break;
    }
    CHECK(cycled);
    /* without the settle, about 8 MB (16 less the round's 8) */
    int ok = after > 12 * 1024 && after < 20 * 1024;
    CHECK(ok);
    if (!ok)
        fprintf(stderr, "garbage before the next cycle: %zu KB\n", after);
    g.closing = 1;
    lua_close(L);
}

int main(void)
{
    settle_case();

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
    CHECK(g.pause == 600); /* 64 MB over a heap of some 100 KB: the cap */
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
    CHECK(g.pause == 600);
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
