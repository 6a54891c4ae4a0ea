/* running.h: what the loop publishes for the watchdog. A view read back
 * holds exactly what was set, for every id length; a reader on another
 * thread never sees a publication torn between two writes. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "../../runtime/core/running.h"
#include "check.h"

static void round_trip(void)
{
    static struct ms_running r;
    char id[MS_RUNNING_TEXT_MAX + 20];
    for (size_t i = 0; i < sizeof id; i++)
        id[i] = (char)(i * 37 + 11);
    for (size_t len = 0; len <= sizeof id; len++) {
        /* the bytes right after the id differ: they must not be read */
        ms_running_set(&r, MS_RUN_HANDLER, 3, 7, id, len, 1000 + len);
        struct ms_running_view v;
        memset(&v, 0x5a, sizeof v);
        CHECK(ms_running_read(&r, &v) == 1);
        CHECK(v.kind == MS_RUN_HANDLER && v.type == 3 && v.shard == 7);
        CHECK(v.len == len && v.since_ns == 1000 + len);
        size_t n = len < MS_RUNNING_TEXT_MAX ? len : MS_RUNNING_TEXT_MAX;
        CHECK(memcmp(v.text, id, n) == 0);
        CHECK((v.seq & 1) == 0);
    }
    uint32_t before = atomic_load(&r.seq);
    ms_running_idle(&r);
    struct ms_running_view v;
    CHECK(ms_running_read(&r, &v) == 1);
    CHECK(v.kind == MS_RUN_IDLE && v.seq == before + 2);
    CHECK(ms_running_is_idle(&r));
}

/* The writer publishes ids whose every byte, and whose shard and length,
 * come from one counter; a consistent view agrees with itself. */
static struct ms_running shared;
static atomic_int done;

static void *writer(void *arg)
{
    (void)arg;
    char id[64];
    for (uint32_t k = 1; !atomic_load(&done); k++) {
        size_t len = 1 + k % 63;
        memset(id, (int)(k & 0xff), len);
        ms_running_set(&shared, MS_RUN_HANDLER, (int)(k % 5), k, id, len,
                       k);
        if (k % 7 == 0)
            ms_running_idle(&shared);
        if (k % 64 == 0)
            sched_yield(); /* on a busy machine the reader must get
                              stretches without a write, as a real
                              loop between handlers gives it */
    }
    return NULL;
}

static void concurrent(void)
{
    pthread_t t;
    CHECK(pthread_create(&t, NULL, writer, NULL) == 0);
    int reads = 0, torn = 0;
    for (int i = 0; i < 2000000 && reads < 20000; i++) {
        struct ms_running_view v;
        if (!ms_running_read(&shared, &v))
            continue;
        reads++;
        if (v.kind == MS_RUN_IDLE || v.shard == 0)
            continue;
        uint32_t k = v.shard;
        int ok = v.len == 1 + k % 63 && v.since_ns == k &&
                 v.type == (int)(k % 5);
        for (size_t j = 0; ok && j < v.len && j < MS_RUNNING_TEXT_MAX; j++)
            ok = (unsigned char)v.text[j] == (k & 0xff);
        torn += !ok;
    }
    atomic_store(&done, 1);
    pthread_join(t, NULL);
    CHECK(reads > 0);
    CHECK(torn == 0);
}

int main(void)
{
    round_trip();
    concurrent();
    CHECK_DONE();
}
