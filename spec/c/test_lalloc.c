/*
 * The bridge VM's allocator (runtime/lua/lalloc.c): blocks by hand (each
 * class's alignment, contents kept across a resize between classes and to
 * and from libc's sizes, a freed block reused); then a LuaJIT VM on it,
 * behind a shadow that records every block's size, running tables grown
 * and shrunk, strings of every small size and larger, coroutines, cdata
 * (an aligned type too), closures and compiled loops, string.buffer,
 * table.new/clear/clone, ffi.gc, parse errors, the debug library, a deep
 * stack grown and shrunk: LuaJIT must give back the size it was given for
 * every block (the allocator has no header to find it), and lua_close
 * must free all of them. Last, the
 * same churn twice takes no new slab the second time (freed blocks are
 * reused).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "../../runtime/lua/lalloc.h"
#include "check.h"
#include "lalloc_test.h"

/* ---- the shadow: every live block's size, by address ------------------ */

#define SHADOW_CAP (1u << 22)
static uintptr_t *sh_key; /* 0: empty, 1: deleted */
static size_t *sh_size;
static long live_blocks, size_mismatch, unaligned, unknown_free;

static size_t sh_slot(uintptr_t p)
{
    return (size_t)((p >> 4) * 0x9e3779b97f4a7c15ULL >> 42) &
           (SHADOW_CAP - 1);
}

static void sh_put(void *ptr, size_t size)
{
    uintptr_t p = (uintptr_t)ptr;
    size_t i = sh_slot(p);
    while (sh_key[i] > 1)
        i = (i + 1) & (SHADOW_CAP - 1);
    sh_key[i] = p;
    sh_size[i] = size;
    live_blocks++;
}

/* The recorded size of ptr, removed; (size_t)-1 when it is not there. */
static size_t sh_take(void *ptr)
{
    uintptr_t p = (uintptr_t)ptr;
    for (size_t i = sh_slot(p); sh_key[i]; i = (i + 1) & (SHADOW_CAP - 1)) {
        if (sh_key[i] == p) {
            sh_key[i] = 1;
            live_blocks--;
            return sh_size[i];
        }
    }
    return (size_t)-1;
}

static void *shadow_f(void *ud, void *ptr, size_t osize, size_t nsize)
{
    if (ptr) {
        size_t was = sh_take(ptr);
        if (was == (size_t)-1)
            unknown_free++;
        else if (was != osize)
            size_mismatch++;
    }
    void *n = ms_lalloc_f(ud, ptr, osize, nsize);
    if (n) {
        if (((uintptr_t)n & 15) != 0)
            unaligned++;
        sh_put(n, nsize);
    } else if (ptr && nsize) {
        sh_put(ptr, osize); /* a failed resize keeps the old block */
    }
    return n;
}

/* ---- blocks by hand ---------------------------------------------------- */


static void by_hand(void)
{
    struct ms_lalloc *a = ms_lalloc_new();
    CHECK(a != NULL);
    CHECK(ms_lalloc_f(a, NULL, 0, 0) == NULL);

    /* every small size: aligned, writable, distinct */
    unsigned char *blk[MS_LALLOC_SMALL + 1];
    for (size_t n = 1; n <= MS_LALLOC_SMALL; n++) {
        blk[n] = ms_lalloc_f(a, NULL, 0, n);
        CHECK(blk[n] != NULL);
        CHECK(((uintptr_t)blk[n] & 15) == 0);
        fill(blk[n], n, (unsigned)n);
    }
    for (size_t n = 1; n <= MS_LALLOC_SMALL; n++)
        CHECK(same(blk[n], n, (unsigned)n));

    /* a freed block is the next of its class */
    void *p = blk[40];
    CHECK(ms_lalloc_f(a, p, 40, 0) == NULL);
    CHECK(ms_lalloc_f(a, NULL, 0, 33) == p); /* 33..48: one class */
    blk[40] = p;
    fill(blk[40], 40, 40); /* its first word was the free list's link */

    /* within a class: the same block; across: contents kept */
    CHECK(ms_lalloc_f(a, blk[40], 40, 48) == blk[40]);
    unsigned char *q = ms_lalloc_f(a, blk[40], 40, 200);
    CHECK(q != NULL && same(q, 40, 40));
    fill(q, 200, 9);
    q = ms_lalloc_f(a, q, 200, 100000); /* to libc's */
    CHECK(q != NULL && same(q, 200, 9));
    fill(q, 100000, 3);
    q = ms_lalloc_f(a, q, 100000, 300000); /* libc's realloc */
    CHECK(q != NULL && same(q, 100000, 3));
    q = ms_lalloc_f(a, q, 300000, 64); /* back to a class */
    CHECK(q != NULL && same(q, 64, 3) && ((uintptr_t)q & 15) == 0);
    q = ms_lalloc_f(a, q, 64, 24); /* shrinking to a smaller class */
    CHECK(q != NULL && same(q, 24, 3));
    CHECK(ms_lalloc_f(a, q, 24, 0) == NULL);
    for (size_t n = 1; n <= MS_LALLOC_SMALL; n++)
        if (n != 40)
            CHECK(same(blk[n], n, (unsigned)n));
    for (size_t n = 1; n <= MS_LALLOC_SMALL; n++)
        if (n != 40)
            ms_lalloc_f(a, blk[n], n, 0);

    /* past a slab: more slabs, nothing lost at their edges */
    size_t before = ms_lalloc_slab_bytes(a);
    enum { BIG = MS_LALLOC_SMALL - 6, MANY = 3 * MS_LALLOC_SLAB / BIG };
    static unsigned char *many[MANY];
    for (int i = 0; i < MANY; i++) {
        many[i] = ms_lalloc_f(a, NULL, 0, BIG);
        CHECK(many[i] != NULL);
        fill(many[i], BIG, (unsigned)i);
    }
    CHECK(ms_lalloc_slab_bytes(a) > before);
    for (int i = 0; i < MANY; i++)
        CHECK(same(many[i], BIG, (unsigned)i));
    ms_lalloc_free(a);
    ms_lalloc_free(NULL);
}

/* ---- a LuaJIT VM on it ----------------------------------------------- */

static const char workload[] =
    "local ffi = require 'ffi'\n"
    "local t = {}\n"
    "for i = 1, 100000 do t[i] = { i, tostring(i), { x = i } } end\n"
    "for i = 1, 100000, 2 do t[i] = nil end\n"
    "collectgarbage()\n"
    "local h = {}\n" /* a hash part grown past libc's size, then emptied */
    "for i = 1, 5000 do h['k' .. i] = i end\n"
    "for i = 1, 5000 do h['k' .. i] = nil end\n"
    "h.z = 1\n"
    "local s = {}\n"
    "for i = 1, 1200 do s[i] = string.rep('x', i) end\n"
    "for i = 1, 1200 do s[i] = s[i] .. '!' end\n"
    "local buf = {}\n"
    "for i = 1, 3000 do buf[#buf + 1] = i end\n"
    "local joined = table.concat(buf, ',')\n"
    "assert(#joined > 10000)\n"
    "for i = 1, 2000 do\n"
    "  local co = coroutine.wrap(function(a)\n"
    "    local b = coroutine.yield(a + 1)\n"
    "    return b * 2\n"
    "  end)\n"
    "  assert(co(i) == i + 1 and co(3) == 6)\n"
    "end\n"
    "ffi.cdef 'typedef struct { double d; } __attribute__((aligned(64))) al_t;'\n"
    "for i = 1, 2000 do\n"
    "  local c = ffi.new('char[?]', i)\n"
    "  c[i - 1] = 7\n"
    "  local al = ffi.new('al_t')\n"
    "  assert(tonumber(ffi.cast('uintptr_t', ffi.cast('void *', al))) % 64 == 0)\n"
    "end\n"
    "local fs = {}\n"
    "for i = 1, 1000 do fs[i] = function() return i end end\n"
    "local sum = 0\n"
    "for i = 1, 3000000 do sum = sum + (i % 7) end\n"
    "assert(sum > 0)\n"
    "for i = 1, 200000 do local x = { value = i } sum = sum + x.value end\n"
    /* OpenResty's and LuaJIT 2.1's extras, the parser's error paths, the
     * debug library, finalizers, stacks grown and shrunk */
    "local buffer = require 'string.buffer'\n"
    "for i = 1, 500 do\n"
    "  local b = buffer.new(i % 300)\n"
    "  for j = 1, i % 40 do b:put(string.rep('a', j)) end\n"
    "  b:get(10); b:skip(3); b:reserve(700); b:commit(5); b:tostring()\n"
    "  if i % 3 == 0 then b:free() else b:set(string.rep('z', i)) end\n"
    "  assert(buffer.decode(buffer.encode({ a = i, { 1, 'x' } })).a == i)\n"
    "end\n"
    "local tnew, tclear = require 'table.new', require 'table.clear'\n"
    "local ok, tclone = pcall(require, 'table.clone')\n"
    "for i = 1, 3000 do\n"
    "  local x = tnew(i % 70, i % 33)\n"
    "  for j = 1, i % 90 do x[j] = j end\n"
    "  for j = 1, i % 40 do x['k' .. j] = j end\n"
    "  if ok then local c = tclone(x); c[#c + 1] = 1 end\n"
    "  tclear(x); x[1] = 1\n"
    "  local u = { 1, 2, 3 }\n"
    "  for j = 4, 4 + i % 40 do u[j] = j end\n"
    "end\n"
    "for i = 1, 2000 do\n"
    "  ffi.gc(ffi.new('char[?]', i % 600 + 1), function() end)\n"
    "  loadstring('x = ' .. string.rep('{', i % 300))\n"
    "  pcall(error, { i })\n"
    "end\n"
    "local function deep(n) if n == 0 then return 0 end\n"
    "  return 1 + deep(n - 1) end\n"
    "deep(5000); collectgarbage(); collectgarbage()\n"
    "debug.sethook(function() end, 'c', 100)\n"
    "for i = 1, 300 do debug.getinfo(1, 'nSlu'); debug.traceback('x') end\n"
    "debug.sethook()\n"
    "local d = string.dump(function(x) return x + 1 end)\n"
    "for i = 1, 100 do assert(loadstring(d)(i) == i + 1) end\n"
    "t, h, s, fs = nil, nil, nil, nil\n"
    "collectgarbage()\n"
    "return 'done'\n";

static void vm_on_it(void)
{
    sh_key = calloc(SHADOW_CAP, sizeof *sh_key);
    sh_size = calloc(SHADOW_CAP, sizeof *sh_size);
    CHECK(sh_key && sh_size);
    if (!sh_key || !sh_size)
        return;
    struct ms_lalloc *a = ms_lalloc_new();
    lua_State *L = vm_on(a, shadow_f);
    CHECK(L != NULL);
    if (!L)
        return;
    int rc = luaL_dostring(L, workload);
    if (rc != 0)
        fprintf(stderr, "workload: %s\n", lua_tostring(L, -1));
    CHECK(rc == 0);
    CHECK(rc == 0 && strcmp(lua_tostring(L, -1), "done") == 0);
    lua_close(L);
    CHECK(live_blocks == 0);  /* lua_close freed every block */
    CHECK(size_mismatch == 0);
    CHECK(unknown_free == 0);
    CHECK(unaligned == 0);
    if (live_blocks || size_mismatch || unknown_free || unaligned)
        fprintf(stderr, "live %ld, size mismatches %ld, unknown %ld, "
                "unaligned %ld\n", live_blocks, size_mismatch,
                unknown_free, unaligned);
    ms_lalloc_free(a);
    free(sh_key);
    free(sh_size);
}

/* The same garbage twice: the second round takes no new slab. */
static void reuse(void)
{
    struct ms_lalloc *a = ms_lalloc_new();
    lua_State *L = vm_on(a, ms_lalloc_f);
    CHECK(L != NULL);
    if (!L)
        return;
    static const char churn[] =
        "live = live or {}\n"
        "for i = 1, 20000 do live[i] = { n = i } end\n"
        "for r = 1, 20 do\n"
        "  for i = 1, 20000 do local m = { type = 'get', id = i }\n"
        "    local reply = { value = m.id } end\n"
        "end\n"
        "collectgarbage()\n";
    /* the first makes `live`; each later one starts from the same heap */
    CHECK(luaL_dostring(L, churn) == 0);
    CHECK(luaL_dostring(L, churn) == 0);
    size_t second = ms_lalloc_slab_bytes(a);
    for (int i = 0; i < 3; i++) {
        CHECK(luaL_dostring(L, churn) == 0);
        CHECK(ms_lalloc_slab_bytes(a) == second);
    }
    /* and the churn is many slabs' worth: had freed blocks not been
     * reused, each round would have taken more */
    CHECK(second < 64u * MS_LALLOC_SLAB);
    lua_close(L);
    ms_lalloc_free(a);
}

/* G6: a mix of sizes that drifts (strings 16 bytes longer each phase,
 * all dropped between phases) takes slabs only while its sizes are a
 * class's: past MS_LALLOC_SMALL the slabs stop growing (libc's blocks
 * from there), however long the drift goes on. */
static void drift(void)
{
    struct ms_lalloc *a = ms_lalloc_new();
    lua_State *L = vm_on(a, ms_lalloc_f);
    CHECK(L != NULL);
    if (!L)
        return;
    size_t at_small = 0;
    for (int ph = 1; ph <= 30; ph++) {
        char code[256];
        int len = ph * 16 - 10; /* the string's bytes; its block is more */
        snprintf(code, sizeof code,
                 "local t, pad = {}, string.rep('x', %d)\n"
                 "for i = 1, 20000 do t[i] = pad .. i end\n"
                 "t = nil collectgarbage() collectgarbage()\n", len);
        CHECK(luaL_dostring(L, code) == 0);
        if (len <= MS_LALLOC_SMALL)
            at_small = ms_lalloc_slab_bytes(a);
    }
    CHECK(at_small > 0);
    CHECK(ms_lalloc_slab_bytes(a) == at_small);
    lua_close(L);
    ms_lalloc_free(a);
}

int main(void)
{
    by_hand();
    vm_on_it();
    reuse();
    drift();
    CHECK_DONE();
}
