/*
 * persist.c -- `moonshard-bench persist [--seconds S] [--ids N]`: committed
 * asks per second of an event-sourced counter against pgbench on the same
 * throwaway PostgreSQL, in the same run (issue 11, "Benchmark").
 *
 * 1. A PostgreSQL of its own: `.ci/pg start PID` of the source tree (the
 *    demo's script: initdb into a temporary folder, a free port on
 *    127.0.0.1, the server's defaults, so synchronous_commit = on), with
 *    a guard that stops it should this process die; `.ci/pg stop` at the
 *    end.
 * 2. pgbench: a custom script of one single-row INSERT per transaction
 *    (a table shaped like moonshard_events: key, epoch, JSON text, time)
 *    at CALLERS clients, 2 threads, for S seconds (plus PGBENCH_CONNECT_S
 *    for its logins, which its tps leaves out): its tps.
 * 3. One node (`moonshard node`, from the binary beside this one or
 *    $MOONSHARD_BIN) with the type Counter event sourced (a module written
 *    beside the config: `incr` returns one event, the reply waits for its
 *    commit) on the same server; CALLERS keep-alive callers ask
 *    {"type":"incr"} through its gateway, round robin over N ids, for S
 *    seconds, after one warm-up ask per id (activation and the leases).
 *    Committed asks/s, p50/p99, and the ratio to pgbench's tps; the check:
 *    the journal holds exactly one event per answered ask.
 *
 * The moonshard half needs persistent types (issue 11's leases and
 * persistent behaviors): without them the warm-up ask is refused and the
 * bench says so and exits 1, after printing pgbench's figures.
 */
#include "bench.h"
#include "cluster.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#ifndef MS_BENCH_DIR
#define MS_BENCH_DIR "bench"
#endif

#define PG_SCRIPT MS_BENCH_DIR "/../.ci/pg"
#define CALLERS 50
#define PGBENCH_THREADS 2
#define WARMUP_TIMEOUT_S 60
/* pgbench's -T counts the time its clients take to connect (50
 * scram-sha-256 logins: a second or more on a busy machine), which its tps
 * leaves out: it runs this much longer than S */
#define PGBENCH_CONNECT_S 2

static const char INCR_BODY[] = "{\"type\":\"incr\"}";

/* The event-sourced counter the node runs (persistence = "events"). */
static const char MODULE[] =
    "-- written by `moonshard-bench persist`, removed when it ends\n"
    "local M = {}\n"
    "function M.init() return { value = 0 } end\n"
    "function M.command(state, cmd, ctx)\n"
    "    if cmd.type == \"incr\" then\n"
    "        ctx:reply({ value = state.value + 1 })\n"
    "        return { { type = \"incr\" } }\n"
    "    end\n"
    "    ctx:reply({ value = state.value })\n"
    "end\n"
    "function M.apply(state, event)\n"
    "    if event.type == \"incr\" then state.value = state.value + 1 end\n"
    "    return state\n"
    "end\n"
    "return M\n";

/* one single-row INSERT per transaction, like an event append */
static const char PGBENCH_SQL[] =
    "\\set id random(1, 1000000)\n"
    "INSERT INTO bench_events (id, epoch, payload) "
    "VALUES (:id, 1, '{\"type\":\"incr\"}');\n";

static const char PGBENCH_TABLE[] =
    "CREATE TABLE bench_events (seq bigserial PRIMARY KEY, "
    "id bigint NOT NULL, epoch bigint NOT NULL, payload text NOT NULL, "
    "created_at timestamptz NOT NULL DEFAULT now())";

struct pgsrv {
    char dir[512];
    char conninfo[512];
    int port;
};

static int usage(void)
{
    fprintf(stderr, "usage: moonshard-bench persist [--seconds S] "
            "[--ids N]   (S: whole seconds, 1..3600, default 5; "
            "N: 1..100000, default 1000)\n");
    return 2;
}

/* a shell word: s in single quotes */
static void sh_quote(char *out, size_t len, const char *s)
{
    size_t o = 0;
    if (len < 3)
        return;
    out[o++] = '\'';
    for (; *s && o + 6 < len; s++) {
        if (*s == '\'') {
            memcpy(out + o, "'\\''", 4);
            o += 4;
        } else {
            out[o++] = *s;
        }
    }
    out[o++] = '\'';
    out[o] = 0;
}

/* Runs `cmd` through sh; its stdout (at most len-1 bytes) into out.
 * Returns its exit status, or -1. */
static int run_capture(const char *cmd, char *out, size_t len)
{
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    size_t n = fread(out, 1, len - 1, p);
    out[n] = 0;
    while (fgetc(p) != EOF) /* drain: the child must not block */
        ;
    int st = pclose(p);
    return st == -1 ? -1 : WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int pg_start(struct pgsrv *s)
{
    char cmd[1024], out[2048];
    snprintf(cmd, sizeof cmd, "%s start %d", PG_SCRIPT, (int)getpid());
    fprintf(stderr, "moonshard bench persist: starting a throwaway "
            "PostgreSQL (%s) ...\n", PG_SCRIPT);
    if (run_capture(cmd, out, sizeof out) != 0) {
        fprintf(stderr, "moonshard bench persist: %s start failed (said "
                "above)\n", PG_SCRIPT);
        return -1;
    }
    char pid[32];
    if (sscanf(out, "%511[^\n]\n%d\n%31[^\n]\n%511[^\n]", s->dir, &s->port,
               pid, s->conninfo) != 4) {
        fprintf(stderr, "moonshard bench persist: %s start printed no "
                "server\n", PG_SCRIPT);
        return -1;
    }
    fprintf(stderr, "moonshard bench persist: PostgreSQL on 127.0.0.1:%d, "
            "folder %s\n", s->port, s->dir);
    return 0;
}

static void pg_stop(struct pgsrv *s)
{
    char cmd[1024], q[600], out[256];
    if (!s->dir[0])
        return;
    sh_quote(q, sizeof q, s->dir);
    snprintf(cmd, sizeof cmd, "%s stop %s", PG_SCRIPT, q);
    run_capture(cmd, out, sizeof out);
    s->dir[0] = 0;
}

/* psql -c sql on the server; the first line of its output in out */
static int psql(const struct pgsrv *s, const char *sql, char *out,
                size_t len)
{
    char cmd[2048], qc[600], qs[1024];
    sh_quote(qc, sizeof qc, s->conninfo);
    sh_quote(qs, sizeof qs, sql);
    snprintf(cmd, sizeof cmd, "psql -XqtA %s -c %s", qc, qs);
    int rc = run_capture(cmd, out, len);
    out[strcspn(out, "\n")] = 0;
    return rc;
}

/* the value after `key` in pgbench's output, or -1 */
static double after(const char *out, const char *key)
{
    const char *p = strstr(out, key);
    return p ? strtod(p + strlen(key), NULL) : -1;
}

struct pgb {
    double tps, lat_avg;
    long failed;
};

static int run_pgbench(const struct pgsrv *s, int seconds, struct pgb *r)
{
    char script[600], cmd[2048], qc[600], qs[700], out[8192];
    char buf[64];
    if (psql(s, PGBENCH_TABLE, buf, sizeof buf) != 0) {
        fprintf(stderr, "moonshard bench persist: cannot create the pgbench "
                "table (psql)\n");
        return -1;
    }
    snprintf(script, sizeof script, "%s/pgbench.sql", s->dir);
    FILE *f = fopen(script, "w");
    if (!f || fputs(PGBENCH_SQL, f) < 0 || fclose(f) != 0) {
        perror("moonshard bench persist: cannot write the pgbench script");
        return -1;
    }
    sh_quote(qc, sizeof qc, s->conninfo);
    sh_quote(qs, sizeof qs, script);
    /* pgbench: Debian's client package puts it on PATH; the server's
     * folder has one too */
    snprintf(cmd, sizeof cmd, "PATH=\"$PATH:$(ls -d /usr/lib/postgresql/*/bin"
             " 2>/dev/null | sort -V | tail -n 1)\" pgbench -n -f %s -c %d "
             "-j %d -T %d %s 2>&1", qs, CALLERS, PGBENCH_THREADS,
             seconds + PGBENCH_CONNECT_S, qc);
    fprintf(stderr, "moonshard bench persist: pgbench, %d clients, %d s "
            "...\n", CALLERS, seconds);
    int rc = run_capture(cmd, out, sizeof out);
    unlink(script);
    r->tps = after(out, "tps = ");
    r->lat_avg = after(out, "latency average = ");
    double failed = after(out, "number of failed transactions: ");
    r->failed = failed < 0 ? 0 : (long)failed;
    if (rc != 0 || r->tps <= 0) {
        fprintf(stderr, "moonshard bench persist: pgbench failed (exit %d,"
                " tps %g):\n%s\n", rc, r->tps, out);
        return -1;
    }
    return 0;
}

/* One ask per id, sequentially, a refused one retried (503) for up to
 * WARMUP_TIMEOUT_S in all; 0 when every one committed, else -1 with the
 * refusal said (persistent types not available yet, say). */
static int warm_up(struct cluster *cl, char ids[][24], int n)
{
    double until = ms__bench_now_s() + WARMUP_TIMEOUT_S;
    for (int i = 0; i < n; i++) {
        char path[128], *body = NULL;
        snprintf(path, sizeof path, "/v1/entities/Counter/%s/ask", ids[i]);
        int st = ms__bench_http_call(cl->http[0], "POST", path, INCR_BODY,
                                     &body);
        /* the node may still be acquiring its leases or connecting:
         * retry, but not a type that cannot run (its module refused) */
        if (st != 200 && (st == 503 || st < 0) && ms__bench_now_s() < until
            && !(body && strstr(body, "\"code\":\"unavailable\""))) {
            free(body);
            usleep(200000);
            i--;
            continue;
        }
        if (st != 200) {
            fprintf(stderr, "moonshard bench persist: an ask to the "
                    "event-sourced Counter was refused: %d %s\n"
                    "  (committed asks need persistent types: issue 11's "
                    "leases and persistent behaviors)\n", st,
                    body ? body : "");
            free(body);
            return -1;
        }
        free(body);
    }
    return 0;
}

static int bench_node(struct cluster *cl, const struct pgsrv *s,
                      char ids[][24], int nids, int seconds,
                      struct reqs *asks, struct figures *f, long *events)
{
    char entities[256], extra[700];
    FILE *m = fopen(ms__bench_file(F_MODULE), "w");
    if (!m || fputs(MODULE, m) < 0 || fclose(m) != 0) {
        perror("moonshard bench persist: cannot write the module");
        return -1;
    }
    snprintf(entities, sizeof entities,
             "        Counter = { module = \"bench_pcounter\", "
             "shard_count = 64,\n"
             "                    persistence = \"events\", "
             "idle_timeout = false },\n");
    /* the connection string as a Lua long string: .ci/pg's holds no
     * "]]" */
    snprintf(extra, sizeof extra, "    database = [[%s]],\n", s->conninfo);
    if (ms__bench_write_config(cl, entities, extra) < 0) {
        perror("moonshard bench persist: cannot write the config");
        return -1;
    }
    fprintf(stderr, "moonshard bench persist: starting n1 ...\n");
    if (ms__bench_start_node(cl, 0) < 0 || ms__bench_wait_up(cl, 1) < 0) {
        ms__bench_show_node_logs(cl);
        return -1;
    }
    for (int i = 0; i < nids; i++)
        snprintf(ids[i], 24, "pc-%d", i + 1);
    fprintf(stderr, "moonshard bench persist: warming up %d ids ...\n",
            nids);
    if (warm_up(cl, ids, nids) < 0) {
        ms__bench_show_node_logs(cl);
        return -1;
    }
    if (ms__bench_build_reqs(asks, cl->http[0], ids, nids, "ask",
                             INCR_BODY) < 0) {
        fprintf(stderr, "moonshard bench: out of memory\n");
        return -1;
    }
    struct phase ph;
    fprintf(stderr, "moonshard bench persist: committed asks, %d callers, "
            "%d s ...\n", CALLERS, seconds);
    if (ms__bench_run_phase(&ph, uv_default_loop(), cl->http[0], asks, 200,
                            CALLERS, seconds, NULL) < 0) {
        fprintf(stderr, "moonshard bench persist: %s\n", ph.errmsg);
        free(ph.lat);
        ms__bench_show_node_logs(cl);
        return -1;
    }
    ms__bench_phase_figures(&ph, f);
    if (f->failed)
        fprintf(stderr, "moonshard bench persist: %ld of %ld asks failed "
                "(first status %d)\n", f->failed, f->done, ph.bad_status);
    char out[64];
    if (psql(s, "SELECT count(*) FROM moonshard_events WHERE cluster = "
             "'bench' AND type = 'Counter'", out, sizeof out) != 0) {
        fprintf(stderr, "moonshard bench persist: cannot count the "
                "journal\n");
        return -1;
    }
    *events = atol(out);
    return 0;
}

/*
 * `moonshard-bench persist [--seconds S] [--ids N]`; argv[0] is "persist".
 * Returns the exit code: 0; 1 when a step failed (said), also when the
 * node cannot commit persistent asks; 2 for bad options.
 */
int ms_bench_persist_main(int argc, char **argv)
{
    int seconds = 5, nids = 1000;
    for (int i = 1; i < argc; i++) {
        char *end;
        if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
            long v = strtol(argv[++i], &end, 10);
            if (*end || v < 1 || v > 3600)
                return usage();
            seconds = (int)v;
        } else if (strcmp(argv[i], "--ids") == 0 && i + 1 < argc) {
            long v = strtol(argv[++i], &end, 10);
            if (*end || v < 1 || v > 100000)
                return usage();
            nids = (int)v;
        } else {
            fprintf(stderr, "moonshard bench persist: unknown option '%s'\n",
                    argv[i]);
            return usage();
        }
    }
    struct ms_bench_persist_figures f;
    return ms__bench_persist_run(seconds, nids, 1, &f);
}

int ms__bench_persist_run(int seconds, int nids, int print,
                          struct ms_bench_persist_figures *pf)
{
    struct cluster cl;
    int spare;
    memset(pf, 0, sizeof *pf);
    if (ms__bench_cluster_init(&cl, 1, &spare) < 0)
        return 1;
    struct pgsrv s;
    memset(&s, 0, sizeof s);
    char (*ids)[24] = calloc((size_t)nids, sizeof *ids);
    struct reqs asks = {NULL, NULL, 0};
    struct pgb pgb;
    struct figures f;
    long events = -1;
    int rc = 1;
    char sc[64] = "?";
    memset(&f, 0, sizeof f);
    if (!ids) {
        fprintf(stderr, "moonshard bench: out of memory\n");
        goto out;
    }
    if (pg_start(&s) < 0)
        goto out;
    psql(&s, "SHOW synchronous_commit", sc, sizeof sc);
    if (run_pgbench(&s, seconds, &pgb) < 0)
        goto out;
    pf->pgbench_tps = pgb.tps;
    if (print) {
        printf("moonshard bench persist: PostgreSQL on 127.0.0.1 (.ci/pg, "
               "synchronous_commit = %s for both), %d clients, %d s "
               "each\n\n", sc, CALLERS, seconds);
        printf("  pgbench, one single-row INSERT per transaction:  %10.0f "
               "tps  (latency average %.3f ms, failed %ld)\n", pgb.tps,
               pgb.lat_avg, pgb.failed);
        fflush(stdout);
    }
    if (bench_node(&cl, &s, ids, nids, seconds, &asks, &f, &events) < 0)
        goto out;
    double ratio = f.rate / pgb.tps;
    long ok = f.done - f.failed;
    rc = f.failed || events != ok + nids ? 1 : 0;
    pf->rate = f.rate;
    pf->p50 = f.p50;
    pf->p99 = f.p99;
    pf->answered = ok;
    pf->failed = f.failed;
    pf->events = events;
    pf->checked = rc == 0;
    if (print)
        printf("  moonshard, committed asks (event-sourced Counter, %d ids):"
               " %10.0f asks/s\n"
               "  moonshard ask p50 / p99 (ms):  %.3f / %.3f\n"
               "  committed asks/s / pgbench tps:  %.2f  (target >= 1.0: "
               "%s)\n"
               "  checks: %ld asks answered, %ld failed; the journal holds "
               "%ld events for %ld answered asks (with %d warm-up asks)\n",
               nids, f.rate, f.p50, f.p99, ratio, ratio >= 1.0 ? "met" :
               "MISSED", ok, f.failed, events, ok + nids, nids);
out:
    fflush(stdout);
    ms__bench_cleanup_all();
    pg_stop(&s);
    ms__bench_free_reqs(&asks);
    free(ids);
    return rc;
}
