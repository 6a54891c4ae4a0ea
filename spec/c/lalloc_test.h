/* lalloc_test.h -- what the allocator tests share: a byte pattern by
 * seed, to fill a block and to check that its contents survived, and a
 * VM on an allocator. Include after lalloc.h (or lalloc.c). */
#ifndef MS_SPEC_LALLOC_TEST_H
#define MS_SPEC_LALLOC_TEST_H
#include <stddef.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

static void fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(seed + i * 7);
}

static int same(const unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(seed + i * 7))
            return 0;
    return 1;
}

/* A VM on allocator a through f (ms_lalloc_f, or a wrapper of it), its
 * libraries open; NULL, a freed, when LuaJIT refuses the allocator. */
static lua_State *vm_on(struct ms_lalloc *a, lua_Alloc f)
{
    lua_State *L = lua_newstate(f, a);
    if (!L) {
        ms_lalloc_free(a);
        return NULL;
    }
    luaL_openlibs(L);
    return L;
}
#endif
