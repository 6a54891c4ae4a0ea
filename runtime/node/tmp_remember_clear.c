/*
 * tmp_remember_clear.c -- TEMP: replaced by the lead at merge (the real
 * ms_node_remember_clear lives in runtime/node/node_remember.c). Until
 * then no shard is ever failed, so nothing is cleared.
 */
#include "../moonshard.h"

int ms_node_remember_clear(struct ms_node *n, const char *type, size_t len,
                           uint32_t shard)
{
    (void)n;
    (void)type;
    (void)len;
    (void)shard;
    return 0; /* TEMP: replaced by the lead at merge */
}
