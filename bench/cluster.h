/*
 * cluster.h -- internal to the benches that run node processes on
 * 127.0.0.1 (cluster.c, handoff.c): the child processes and temporary
 * files, setup requests and the cluster config (supervisor.c), the
 * measured libuv client (load.c) and the Redis baseline (redis.c). Not an
 * API.
 */
#ifndef MS_BENCH_CLUSTER_H
#define MS_BENCH_CLUSTER_H

#include <limits.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#define NODE_WAIT_S 30     /* nodes Up and converged */
#define MAX_NODES 3

#define ASK_BODY "{\"type\":\"get\"}"

/* ---- children and temporary files, cleaned up on every way out ------- */

enum { CH_N1, CH_N2, CH_N3, CH_REDIS, CH_RBENCH, CH_WRK, CH_RELAY,
       CH_COUNT };

/* The temporary files, in one folder made by ms__bench_cluster_init()
 * (F_MODULE: a behavior module beside the config, for persist.c;
 * F_WRK: the Lua script of wrk, wrk.c). */
enum { F_CONFIG, F_LOG1, F_LOG2, F_LOG3, F_REDIS_LOG, F_MODULE, F_WRK,
       F_WRK_LOG, F_RELAY_LOG, F_COUNT };

/* The path of temporary file `f` (F_*). */
const char *ms__bench_file(int f);

/*
 * Starts argv[0] (looked up in PATH when `search`) with stdin from
 * /dev/null, stdout to `out_fd` (or the file `log`) and stderr to the
 * file `log` (or /dev/null). Returns the pid, or -1 with errno set.
 */
pid_t ms__bench_spawn(char *const argv[], int search, int out_fd,
                      const char *log);

/* A pipe for a child's stdout (the write end as ms__bench_spawn's
 * out_fd) whose read end the child does not inherit: posix_spawn passes
 * on every fd without FD_CLOEXEC. Returns 0 or -1 (errno set). */
int ms__bench_out_pipe(int pfd[2]);

/* Reads fd until len bytes, its end or an error (EINTR is retried).
 * Returns the bytes read. */
size_t ms__bench_read_full(int fd, void *buf, size_t len);

/* Records `pid` as the child in `slot` (CH_*), stopped on every way out;
 * pid 0 forgets it (the caller reaped it). */
void ms__bench_track(int slot, pid_t pid);

/* Stops the children of the given slots: SIGTERM to all, then SIGKILL to
 * whichever is still there after a few seconds; reaps them all. */
void ms__bench_stop_children(const int *which, int n);

/* Prints the last lines of a log file to stderr. */
void ms__bench_show_log_tail(const char *what, const char *path);

/* Whether an executable `name` is on PATH. */
int ms__bench_on_path(const char *name);

/* Stops every child (SIGTERM, then SIGKILL) and removes the temporary
 * files and folder. */
void ms__bench_cleanup_all(void);

/* Whether the child in `slot` (CH_*) has exited (and reaps it). */
int ms__bench_child_gone(int slot);

double ms__bench_now_s(void);

/* ---- setup requests: blocking, one per connection --------------------- */

/*
 * Sends one request to the gateway on 127.0.0.1:port (the shared client,
 * runtime/client/httpc.h, 10 s to connect and 10 s for the answer), with
 * the admin token `token` in X-Moonshard-Token unless it is NULL; `body`
 * NULL sends none. Returns the HTTP status (the body, NUL-terminated, in
 * *out, to free) or -1 (*out NULL).
 */
int ms__bench_http_call_as(int port, const char *token, const char *method,
                           const char *path, const char *body, char **out);

/* ms__bench_http_call_as() without a token. */
int ms__bench_http_call(int port, const char *method, const char *path,
                        const char *body, char **out);

/* Counts occurrences of `needle` in `s`. */
int ms__bench_count_of(const char *s, const char *needle);

/* The unsigned number after `"key":` in a JSON text, or -1. */
long long ms__bench_json_num(const char *s, const char *key);

/* ---- the measured client: libuv, one request in flight per caller ---- */

struct reqs {
    char **buf;
    size_t *len;
    int n;
};

struct phase;
struct caller;

/* What a phase may do beyond "these requests, round robin, for S s". */
struct phase_opts {
    long limit;                 /* send this many requests, then stop
                                   (0: no limit) */
    atomic_int *stop;           /* the phase ends once it is set (or NULL);
                                   another thread may set it */
    int record;                 /* keep a sample of every answer */
};

/* One answer of a recorded phase. */
struct sample {
    uint64_t at_ns;             /* uv_hrtime() when it was complete */
    uint32_t lat_us;
    int status;
};

struct phase {
    uv_loop_t *loop;
    const struct reqs *reqs;
    int expect;                 /* 200 for asks, 202 for tells */
    int ncallers, nconnected, nrunning;
    int error;
    char errmsg[200];
    uint64_t t0, deadline, t_end;
    long next, done, failed;
    int bad_status;
    uint64_t *lat;
    size_t nlat, caplat;
    struct phase_opts opt;
    struct sample *smp;         /* in completion order, so sorted by time */
    size_t nsmp, capsmp;
    uv_timer_t guard;
    struct caller *callers;
};

/*
 * One measured phase: `ncallers` keep-alive connections to the gateway,
 * each sending the next request as soon as the previous one is answered,
 * for `seconds` (or less, as `opt` says; opt is borrowed and may be NULL).
 * Fills ph (done, failed, latencies, samples, t0/t_end; the caller frees
 * ph->lat and ph->smp); returns 0, or -1 with ph->errmsg.
 */
int ms__bench_run_phase(struct phase *ph, uv_loop_t *loop, int http_port,
                        const struct reqs *reqs, int expect, int ncallers,
                        double seconds, const struct phase_opts *opt);

/* qsort() comparison of two uint64_t. */
int ms__bench_cmp_u64(const void *a, const void *b);

/* Nearest-rank percentile q (0..1) of n sorted values, in ms. */
double ms__bench_pct_ms(const uint64_t *v, size_t n, double q);

/* Appends a latency to ph->lat (dropped when out of memory). */
void ms__bench_push_latency(struct phase *ph, uint64_t ns);

/* What a phase measured. */
struct figures {
    double rate;                /* per second */
    double p50, p99;            /* ms */
    long done, failed;
};

/* Fills f from ph (sorts and frees ph->lat). */
void ms__bench_phase_figures(struct phase *ph, struct figures *f);

/* ---- the Redis baseline (redis.c) -------------------------------------- */

/* What redis.c measured: INCR at 1 and at `clients` connections, straight
 * to redis-server and through the relay (relay.c). rn's p99 < 0:
 * redis-benchmark gave none for it; lat_src: where the 1-client
 * latencies came from. */
struct redis_figures {
    struct figures r1, rn;          /* to redis-server */
    struct figures via1, vian;      /* through the relay (if asked) */
    const char *lat_src;
};

/*
 * Starts redis-server on 127.0.0.1:port and measures INCR with
 * redis-benchmark, 1 and `clients` connections, about `seconds` each;
 * with `relay`, again through `moonshard-bench relay` (a process that
 * copies bytes between each client connection and one of its own to
 * redis-server: the two hops of a remote ask). Stops redis-server and the
 * relay before it returns. Returns 0, 1 when redis-server and
 * redis-benchmark are not both on PATH, or -1 on an error (said); *f is
 * zeroed (lat_src "") first, so what was not measured reads 0.
 */
int ms__bench_redis(int port, int clients, double seconds, int relay,
                    struct redis_figures *f);

/* ---- wrk, the independent HTTP load generator (wrk.c) ----------------- */

/* What one run of wrk measured, and what n1 routed meanwhile. */
struct wrk_figures {
    int connections, threads, seconds;
    double rate;                /* answers per second */
    double p50, p99;            /* ms (wrk's histogram: 1 us steps) */
    long requests;              /* answers wrk counted */
    long status_errors;         /* answers with a status > 399 */
    long socket_errors;         /* connect, read, write, timeout */
    long long remote, local;    /* n1's routes during the run (cluster.c;
                                   -1: not read) */
};

/*
 * Runs `wrk -t threads -c connections -d seconds --latency` against the
 * gateway on 127.0.0.1:port, with a Lua script (written to F_WRK) that
 * POSTs `body` to /v1/entities/Counter/<id>/<action>, rotating over the n
 * ids, and prints wrk's summary in a line this parses. `seconds` is whole
 * (wrk takes no less). Fills w (remote, local: -1). Returns 0, 1 when
 * wrk is not on PATH, or -1 on an error (said).
 */
int ms__bench_wrk(int port, char ids[][24], int n, const char *action,
                  const char *body, int connections, int threads,
                  int seconds, struct wrk_figures *w);

/* Whether a run of wrk through n1 is sound: no error and no status > 399,
 * n1 routed nothing locally, and every answer wrk counted (plus at most
 * one in flight per connection when it stopped) was a remote route. */
int ms__bench_wrk_checked(const struct wrk_figures *w);

/* ---- the cluster ------------------------------------------------------ */

struct cluster {
    int nnodes;                 /* n1..nK in the config */
    int listen[MAX_NODES], http[MAX_NODES];
    char token[33];             /* the admin token (X-Moonshard-Token) */
    char exe[PATH_MAX];         /* the moonshard binary the nodes run */
};

/*
 * Writes the config of nodes n1..nK (K = cl->nnodes) with a fresh secret
 * and admin token (kept in cl->token). `entities` is the body of the
 * entities table and `extra` more top-level fields, each line ending in
 * ",\n" (or ""). Returns 0 or -1 with errno set.
 */
int ms__bench_write_config(struct cluster *cl, const char *entities,
                           const char *extra);

/* Starts node n<i+1> (a fresh log each time); 0 or -1 (said). */
int ms__bench_start_node(struct cluster *cl, int i);

/* Prints the last lines of each node's log to stderr. */
void ms__bench_show_node_logs(const struct cluster *cl);

/* Waits until nodes n1..n<n> all list n Up members and say they
 * converged; 0 or -1 (said). */
int ms__bench_wait_up(struct cluster *cl, int n);

/* Fills r with one POST /v1/entities/Counter/<id>/<action> request per
 * id, with `body` (borrowed); 0 or -1. Free r with ms__bench_free_reqs()
 * even on failure. */
int ms__bench_build_reqs(struct reqs *r, int http_port, char ids[][24],
                         int n, const char *action, const char *body);

void ms__bench_free_reqs(struct reqs *r);

/*
 * Fills cl for `nnodes` nodes on free ports (one more free port in
 * *spare) and the moonshard binary to run (ms__bench_node_binary),
 * installs the signal handlers and makes the temporary folder with the
 * names of its files. Returns 0 or -1 (said).
 */
int ms__bench_cluster_init(struct cluster *cl, int nnodes, int *spare);

/*
 * The moonshard binary the benches start nodes from: $MOONSHARD_BIN when
 * set and not empty, else `moonshard` in the folder of this executable.
 * Copies it into buf; returns 0, or -1 (said on stderr) when it is not an
 * executable file.
 */
int ms__bench_node_binary(char *buf, size_t len);

/* The path of this executable (moonshard-bench) in buf; 0, or -1 (said). */
int ms__bench_self(char *buf, size_t len);

/* ---- the remote asks of cluster.c, also for all.c ---------------------- */

/*
 * Writes the config of `bench cluster` (Counter, 64 shards, no idle
 * timeout), starts n1 and n2, waits until they are Up, and picks n ids
 * that n2 owns (activating them through n1). Returns 0 or -1 (said, with
 * the node logs).
 */
int ms__bench_cluster_up(struct cluster *cl, char ids[][24], int n);

/* n1's counters of remote and local routes (/v1/stats); 0 or -1
 * (said). */
int ms__bench_cluster_routes(struct cluster *cl, long long *remote,
                             long long *local);

/*
 * Runs ms__bench_wrk() with asks (`{"type":"get"}`) to the n ids through
 * n1 and reads n1's routes before and after it into w->remote and
 * w->local. Returns what ms__bench_wrk() returns, or -1 when n1's stats
 * cannot be read (said).
 */
int ms__bench_cluster_wrk(struct cluster *cl, char ids[][24], int n,
                          int connections, int threads, int seconds,
                          struct wrk_figures *w);

#endif
