/* pattern.h -- a byte pattern by seed, to fill a block and to check that
 * its contents survived (the allocator tests). */
#ifndef MS_SPEC_PATTERN_H
#define MS_SPEC_PATTERN_H
#include <stddef.h>

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
#endif
