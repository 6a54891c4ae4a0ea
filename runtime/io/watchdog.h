/*
 * watchdog.h -- a thread that notices a stuck loop, since LuaJIT cannot
 * preempt a handler.
 *
 * The loop thread publishes what Lua it runs (runtime/core/running.h). The
 * watchdog thread reads it every MS_WATCHDOG_TICK_MS. When the same thing
 * has run for `stuck_ms`, it logs it (entity type, shard and id for a
 * handler) at WARN, then again each time the time doubles (2x, 4x, ...),
 * and once more when it finishes. It ends the process with exit status
 * MS_EXIT_STUCK (moonshard.h), after an ERROR line, when:
 *   - the stuck code has run for `exit_ms` (when not 0), or
 *   - the node was asked to stop (SIGINT or SIGTERM) and the code has run
 *     for `stuck_ms` (at once when it already had).
 * Time in which the whole process stood still (SIGSTOP, a debugger, a
 * machine that did not schedule it: a check more than 4 ticks late) does
 * not count as running.
 *
 * A stuck loop cannot run its own signal handlers, so the watchdog owns
 * SIGINT and SIGTERM once ms_watchdog_catch_signals is called: an
 * async-signal-safe handler writes the signal to a pipe that the watchdog
 * thread reads, and the first one is passed on to the loop (uv_async).
 */
#ifndef MS_IO_WATCHDOG_H
#define MS_IO_WATCHDOG_H

#include <stdint.h>
#include <uv.h>

#include "../core/config.h"
#include "../core/running.h"

#define MS_WATCHDOG_TICK_MS 50

struct ms_watchdog;

struct ms_watchdog_options {
    uint64_t stuck_ms;  /* what runs this long is stuck; > 0 */
    uint64_t exit_ms;   /* exit when stuck this long; 0: never by itself */
    const struct ms_running *running; /* borrowed; outlives the watchdog */
    const struct ms_config *cfg;      /* borrowed: entity type names */
};

/*
 * Starts the watchdog thread for the loop thread of `loop` (call on that
 * thread). Returns 0, or MS_ENOMEM / a negative libuv code when the pipe,
 * the async handle or the thread cannot be made. The watchdog lives until
 * ms_watchdog_stop. One per process.
 */
int ms_watchdog_start(struct ms_watchdog **out, uv_loop_t *loop,
                      const struct ms_watchdog_options *o);

/*
 * Takes SIGINT and SIGTERM over (from whatever handled them before): the
 * first one calls cb(data, signum) on the loop thread; later ones are
 * ignored while the loop is not stuck. `cb` is borrowed until
 * ms_watchdog_stop. Returns 0 or a negative errno code.
 */
int ms_watchdog_catch_signals(struct ms_watchdog *w,
                              void (*cb)(void *data, int signum),
                              void *data);

/*
 * Stops and joins the thread (on the loop thread), gives SIGINT and
 * SIGTERM back (ignored from now on when one was received, so a stop in
 * progress is not cut short; else as before), and closes the async
 * handle; the watchdog is freed when it is closed. NULL is a no-op.
 */
void ms_watchdog_stop(struct ms_watchdog *w);

#endif
