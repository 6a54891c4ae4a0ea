/* The deadline heap: order, FIFO ties, removal from the middle. */
#include "../../runtime/core/timerq.h"
#include "check.h"

int main(void)
{
    struct ms_timerq q;
    struct ms_timer t[100] = {{0}};
    ms_timerq_init(&q);
    for (int i = 0; i < 100; i++)
        CHECK(ms_timerq_push(&q, &t[i], (uint64_t)((i * 37) % 50)) == 0);
    ms_timerq_remove(&q, &t[10]);
    ms_timerq_remove(&q, &t[10]); /* twice is a no-op */
    CHECK(ms_timerq_pop_due(&q, 0) != NULL); /* due 0: i = 0 and 50 */
    uint64_t last = 0;
    int n = 1;
    struct ms_timer *x, *prev = NULL;
    while ((x = ms_timerq_pop_due(&q, 1000))) {
        CHECK(x->due_ms >= last);
        if (prev && prev->due_ms == x->due_ms)
            CHECK(prev->seq < x->seq); /* equal deadlines fire FIFO */
        last = x->due_ms;
        prev = x;
        CHECK(x != &t[10]);
        n++;
    }
    CHECK(n == 99);
    CHECK(ms_timerq_peek(&q) == NULL);
    CHECK(ms_timerq_push(&q, &t[1], 500) == 0);
    CHECK(ms_timerq_pop_due(&q, 499) == NULL);
    CHECK(ms_timerq_pop_due(&q, 500) == &t[1]);
    ms_timerq_free(&q);
    CHECK_DONE();
}
