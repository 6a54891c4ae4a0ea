/*
 * The bridge VM's allocator (runtime/lua/lalloc.c) out of memory: lalloc.c
 * is built into this test with libc's malloc and realloc behind a switch
 * that makes them fail (a realloc only when it would grow the block:
 * glibc shrinks in place). A block that cannot be had is NULL, LuaJIT's
 * memory error; but a shrink never fails, by hand (between classes, from
 * libc's sizes into a class) and in a VM: a full collection while memory
 * is out shrinks a suspended coroutine's stack (816 bytes to 472: a class
 * when classes went up to 512 bytes, libc's since they stop at 128) and
 * must neither raise an error nor break the coroutine.
 */
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "check.h"

static int oom; /* 1: libc has no memory for the allocator */

static void *test_malloc(size_t n)
{
    return oom ? NULL : malloc(n);
}

static void *test_realloc(void *p, size_t n)
{
    return oom && malloc_usable_size(p) < n ? NULL : realloc(p, n);
}

#define malloc test_malloc
#define realloc test_realloc
#include "../../runtime/lua/lalloc.c"
#undef malloc
#undef realloc

#include "lalloc_test.h"

/* Takes every block of size's class there is without a new slab (with
 * oom set): the class is empty after. Returns how many (into held). */
static size_t drain(struct ms_lalloc *a, size_t size, void **held,
                    size_t cap)
{
    size_t n = 0;
    void *p;
    while (n < cap && (p = ms_lalloc_f(a, NULL, 0, size)) != NULL)
        held[n++] = p;
    return n;
}

static void by_hand(void)
{
    struct ms_lalloc *a = ms_lalloc_new();
    CHECK(a != NULL);
    enum { CAP = MS_LALLOC_SLAB / 16 };
    static void *held[CAP];

    unsigned char *small = ms_lalloc_f(a, NULL, 0, 120); /* class 8 */
    unsigned char *large = ms_lalloc_f(a, NULL, 0, 1000); /* libc's */
    CHECK(small && large);
    fill(small, 120, 1);
    fill(large, 1000, 2);

    oom = 1;
    CHECK(ms_lalloc_f(a, NULL, 0, 5000) == NULL); /* libc's: none */
    size_t n40 = drain(a, 40, held, CAP);
    CHECK(ms_lalloc_f(a, NULL, 0, 40) == NULL); /* a class: none */
    CHECK(ms_lalloc_f(a, small, 120, 300) == NULL); /* growing: none */
    CHECK(same(small, 120, 1));

    /* into a class it has no block of: in place */
    unsigned char *s2 = ms_lalloc_f(a, small, 120, 40);
    CHECK(s2 == small && same(s2, 40, 1));
    /* the rest of the old block (80 bytes) is free for its class */
    void *tail = ms_lalloc_f(a, NULL, 0, 80);
    CHECK(tail == small + 48);

    size_t n480 = drain(a, 100, held + n40, CAP - n40);
    unsigned char *l2 = ms_lalloc_f(a, large, 1000, 100);
    CHECK(l2 != NULL && same(l2, 100, 2));
    CHECK(l2 && ((uintptr_t)l2 & 15) == 0);
    oom = 0;

    /* every block given back as LuaJIT would, then all freed (ASan's
     * leak check in .ci/sanitize sees the libc block turned slab) */
    ms_lalloc_f(a, s2, 40, 0);
    ms_lalloc_f(a, tail, 80, 0);
    ms_lalloc_f(a, l2, 100, 0);
    for (size_t i = 0; i < n40; i++)
        ms_lalloc_f(a, held[i], 40, 0);
    for (size_t i = n40; i < n40 + n480; i++)
        ms_lalloc_f(a, held[i], 100, 0);
    ms_lalloc_free(a);
}

/* a full collection, called protected */
static int full_gc(lua_State *L)
{
    lua_gc(L, LUA_GCCOLLECT, 0);
    return 0;
}

static const char coroutines[] =
    "local function deep(k) if k == 0 then return 0 end\n"
    "  return 1 + deep(k - 1) end\n"
    "cos = {}\n"
    "for i = 1, 20 do\n"
    "  cos[i] = coroutine.create(function()\n"
    "    deep(25)\n" /* the stack grows to 102 slots (816 bytes) */
    "    local n = 0\n"
    "    while true do n = n + 1; coroutine.yield(n) end\n"
    "  end)\n"
    "  assert(coroutine.resume(cos[i]))\n"
    "end\n";

static const char resume[] =
    "for i = 1, #cos do\n"
    "  local ok, n = coroutine.resume(cos[i])\n"
    "  assert(ok and n == 2, 'coroutine ' .. i .. ': ' .. tostring(n))\n"
    "end\n";

static void vm_shrinks(void)
{
    struct ms_lalloc *a = ms_lalloc_new();
    lua_State *L = vm_on(a, ms_lalloc_f);
    CHECK(L != NULL);
    if (!L)
        return;
    lua_gc(L, LUA_GCSTOP, 0); /* the stacks shrink in the collection below */
    CHECK(luaL_dostring(L, coroutines) == 0);
    enum { CAP = MS_LALLOC_SLAB / 16 };
    static void *held[CAP];
    lua_pushcfunction(L, full_gc); /* (lua_cpcall would allocate) */
    oom = 1;
    size_t n = drain(a, 472, held, CAP); /* the stacks' smaller class */
    int rc = lua_pcall(L, 0, 0, 0);
    oom = 0;
    if (rc != 0)
        fprintf(stderr, "full collection: %s\n",
                lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "?");
    CHECK(rc == 0);
    if (rc != 0)
        lua_pop(L, 1);
    for (size_t i = 0; i < n; i++)
        ms_lalloc_f(a, held[i], 472, 0);
    lua_gc(L, LUA_GCRESTART, 0);
    rc = luaL_dostring(L, resume);
    if (rc != 0)
        fprintf(stderr, "resume: %s\n", lua_tostring(L, -1));
    CHECK(rc == 0);
    lua_close(L);
    ms_lalloc_free(a);
}

int main(void)
{
    by_hand();
    vm_shrinks();
    CHECK_DONE();
}
