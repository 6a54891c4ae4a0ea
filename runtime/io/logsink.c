/*
 * logsink.c -- stderr and the wall clock for the core's log lines.
 */
#include "logsink.h"

#include <errno.h>
#include <stdint.h>
#include <unistd.h>

#include <uv.h>

#include "../core/log.h"

/* Writes all of a line to fd 2, in one write(2) when it can. */
static void to_stderr(void *data, const char *line, size_t len)
{
    (void)data;
    while (len > 0) {
        ssize_t w = write(2, line, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        line += w;
        len -= (size_t)w;
    }
}

static int64_t wall_ms(void *data)
{
    (void)data;
    uv_timeval64_t tv;
    if (uv_gettimeofday(&tv) != 0)
        return 0;
    return (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

void ms_io_log_install(void)
{
    ms_log_set_clock(wall_ms, NULL);
    ms_log_set_sink(to_stderr, NULL);
}
