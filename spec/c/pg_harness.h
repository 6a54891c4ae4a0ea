/* pg_harness.h -- what the C tests that need PostgreSQL share: a
 * throwaway server that spec/helpers/pg_server.sh starts on 127.0.0.1
 * (a guard stops it should the test die first) and that the test stops
 * by its folder, a log sink that keeps every line (to check that no
 * password reaches the log), and running the loop until a flag is set.
 * Include once, in the test's .c file, after uv.h. */
#ifndef MS_SPEC_PG_HARNESS_H
#define MS_SPEC_PG_HARNESS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

static uv_loop_t *loop;
static char server_dir[512];
static char conninfo[512];
static char password[128];
static char port[16];

/* every log line, to check that no password reaches the log */
static char logbuf[1 << 16];
static size_t loglen;

static inline void sink(void *data, const char *line, size_t len)
{
    (void)data;
    fwrite(line, 1, len, stderr);
    if (loglen + len < sizeof logbuf) {
        memcpy(logbuf + loglen, line, len);
        loglen += len;
        logbuf[loglen] = '\0';
    }
}

/* -- the server ------------------------------------------------------- */

static inline void chomp(char *s) { s[strcspn(s, "\n")] = '\0'; }

static inline int server_start(void)
{
    char cmd[1024], pid[32];
    /* the guard stops the server should this test die before it does */
    snprintf(cmd, sizeof cmd, "%s start %d", MS_PG_SERVER_SH, (int)getpid());
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    int ok = fgets(server_dir, sizeof server_dir, p) &&
             fgets(port, sizeof port, p) && fgets(pid, sizeof pid, p) &&
             fgets(conninfo, sizeof conninfo, p);
    if (pclose(p) != 0 || !ok)
        return -1;
    chomp(server_dir);
    chomp(port);
    chomp(conninfo);
    const char *pw = strstr(conninfo, "password=");
    if (!pw)
        return -1;
    snprintf(password, sizeof password, "%s", pw + 9);
    password[strcspn(password, " ")] = '\0';
    return 0;
}

static inline int server_do(const char *verb)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s %s '%s' >/dev/null", MS_PG_SERVER_SH, verb,
             server_dir);
    return system(cmd);
}

static inline void server_cleanup(void)
{
    if (server_dir[0]) {
        server_do("stop");
        server_dir[0] = '\0';
    }
}

/* -- running the loop -------------------------------------------------- */

/* uv_stop: a guard that fires in the timer phase of an iteration would
 * otherwise leave UV_RUN_ONCE polling with no timeout, for ever when the
 * pool's sockets stay quiet */
static inline void on_guard(uv_timer_t *t)
{
    *(int *)t->data = 1;
    uv_stop(t->loop);
}

/* Runs the loop until *flag is set or timeout_ms passed; returns *flag. */
static inline int wait_for(const int *flag, int timeout_ms)
{
    uv_timer_t t;
    int expired = 0;
    uv_timer_init(loop, &t);
    t.data = &expired;
    uv_timer_start(&t, on_guard, (uint64_t)timeout_ms, 0);
    while (!*flag && !expired)
        uv_run(loop, UV_RUN_ONCE);
    uv_close((uv_handle_t *)&t, NULL);
    uv_run(loop, UV_RUN_NOWAIT);
    return *flag;
}

static inline void idle_for(int ms)
{
    int never = 0;
    wait_for(&never, ms);
}

#endif
