/* FNV-1a 64 against published test vectors (Fowler/Noll/Vo reference). */
#include <string.h>

#include "../../runtime/moonshard.h"
#include "check.h"

static uint64_t h(const char *s)
{
    return ms_fnv1a64(s, strlen(s));
}

int main(void)
{
    CHECK(h("") == 0xcbf29ce484222325ULL);
    CHECK(h("a") == 0xaf63dc4c8601ec8cULL);
    CHECK(h("b") == 0xaf63df4c8601f1a5ULL);
    CHECK(h("foobar") == 0x85944171f73967e8ULL);
    CHECK(ms_shard_of("foobar", 6, 64) == (uint32_t)(0x85944171f73967e8ULL % 64));
    CHECK(ms_shard_of("", 0, 1) == 0);
    for (int i = 0; i < 1000; i++) {
        char id[16];
        int n = snprintf(id, sizeof id, "id-%d", i);
        CHECK(ms_shard_of(id, (size_t)n, 7) < 7);
    }
    CHECK_DONE();
}
