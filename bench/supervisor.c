/*
 * supervisor.c -- what the benches that run node processes on 127.0.0.1
 * (cluster.c, handoff.c) share, besides the load client (load.c): the
 * child processes and temporary files, cleaned up on every way out
 * (Ctrl-C included), the cluster config, starting and waiting for nodes,
 * and the setup requests (the shared blocking client,
 * runtime/client/httpc.h).
 *
 * The nodes are `moonshard node CONFIG --name nK`, run from the
 * `moonshard` binary beside this executable, or $MOONSHARD_BIN.
 */
#include "cluster.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include "client/httpc.h"

#define HTTP_TIMEOUT_S 10  /* setup requests: connect, send, answer */
#define STOP_WAIT_MS 3000  /* SIGTERM -> SIGKILL */

/* ---- children and temporary files, cleaned up on every way out ------- */

static volatile pid_t g_pid[CH_COUNT];
static char g_dir[64];
static char g_file[F_COUNT][128];

static void remove_files(void)
{
    for (int i = 0; i < F_COUNT; i++)
        if (g_file[i][0])
            unlink(g_file[i]);
    if (g_dir[0])
        rmdir(g_dir);
}

/* Ctrl-C or kill: only async-signal-safe calls here. */
static void on_fatal_signal(int sig)
{
    for (int i = 0; i < CH_COUNT; i++)
        if (g_pid[i] > 0)
            kill(g_pid[i], SIGKILL);
    remove_files();
    _exit(128 + sig);
}

static void install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_fatal_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/* Stops the given children: SIGTERM to all, then SIGKILL to whichever is
 * still there after STOP_WAIT_MS; reaps them all. */
void ms__bench_stop_children(const int *which, int n)
{
    for (int i = 0; i < n; i++)
        if (g_pid[which[i]] > 0)
            kill(g_pid[which[i]], SIGTERM);
    for (int waited = 0;; waited += 20) {
        int alive = 0;
        for (int i = 0; i < n; i++) {
            pid_t p = g_pid[which[i]];
            if (p <= 0)
                continue;
            pid_t r = waitpid(p, NULL, WNOHANG);
            if (r == p || (r < 0 && errno == ECHILD))
                g_pid[which[i]] = 0;
            else
                alive++;
        }
        if (!alive)
            return;
        if (waited >= STOP_WAIT_MS)
            break;
        usleep(20000);
    }
    for (int i = 0; i < n; i++) {
        pid_t p = g_pid[which[i]];
        if (p <= 0)
            continue;
        kill(p, SIGKILL);
        waitpid(p, NULL, 0);
        g_pid[which[i]] = 0;
    }
}

void ms__bench_cleanup_all(void)
{
    int all[CH_COUNT];
    for (int i = 0; i < CH_COUNT; i++)
        all[i] = i;
    ms__bench_stop_children(all, CH_COUNT);
    remove_files();
}

/* Whether a child has exited (and reaps it). */
int ms__bench_child_gone(int slot)
{
    pid_t p = g_pid[slot];
    if (p <= 0)
        return 1;
    if (waitpid(p, NULL, WNOHANG) == p) {
        g_pid[slot] = 0;
        return 1;
    }
    return 0;
}

void ms__bench_show_log_tail(const char *what, const char *path)
{
    char buf[2048];
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return;
    off_t end = lseek(fd, 0, SEEK_END);
    off_t from = end > (off_t)sizeof buf - 1 ? end - (off_t)sizeof buf + 1
                                              : 0;
    ssize_t n = pread(fd, buf, sizeof buf - 1, from);
    close(fd);
    if (n <= 0)
        return;
    buf[n] = 0;
    char *start = buf;
    if (from > 0 && strchr(buf, '\n'))
        start = strchr(buf, '\n') + 1;
    fprintf(stderr, "---- last lines of %s's log ----\n%s", what, start);
    if (buf[n - 1] != '\n')
        fputc('\n', stderr);
}

pid_t ms__bench_spawn(char *const argv[], int search, int out_fd,
                      const char *log)
{
    posix_spawn_file_actions_t fa;
    extern char **environ;
    pid_t pid;
    const char *err = log ? log : "/dev/null";

    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, err,
                                     O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (out_fd >= 0) {
        posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
        posix_spawn_file_actions_addclose(&fa, out_fd);
    } else {
        posix_spawn_file_actions_adddup2(&fa, 2, 1);
    }
    int rc = search ? posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ)
                    : posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
        errno = rc;
        return -1;
    }
    return pid;
}

int ms__bench_out_pipe(int pfd[2])
{
    if (pipe(pfd) < 0)
        return -1;
    if (fcntl(pfd[0], F_SETFD, FD_CLOEXEC) < 0) {
        close(pfd[0]);
        close(pfd[1]);
        return -1;
    }
    return 0;
}

size_t ms__bench_read_full(int fd, void *buf, size_t len)
{
    size_t n = 0;
    while (n < len) {
        ssize_t got = read(fd, (char *)buf + n, len - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        n += (size_t)got;
    }
    return n;
}

int ms__bench_on_path(const char *name)
{
    const char *path = getenv("PATH");
    char buf[PATH_MAX];
    if (!path)
        path = "/usr/local/bin:/usr/bin:/bin";
    while (*path) {
        size_t len = strcspn(path, ":");
        if (len > 0 && len < sizeof buf - strlen(name) - 2) {
            snprintf(buf, sizeof buf, "%.*s/%s", (int)len, path, name);
            if (access(buf, X_OK) == 0)
                return 1;
        }
        path += len;
        if (*path == ':')
            path++;
    }
    return 0;
}

/* ---- sockets ----------------------------------------------------------- */

double ms__bench_now_s(void)
{
    return (double)uv_hrtime() / 1e9;
}

/* Picks n distinct free TCP ports on 127.0.0.1 (all bound at once, then
 * released). Returns 0 or -1. */
static int free_ports(int *ports, int n)
{
    int fds[8], rc = 0;
    for (int i = 0; i < n; i++) {
        struct sockaddr_in a;
        socklen_t alen = sizeof a;
        memset(&a, 0, sizeof a);
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        fds[i] = socket(AF_INET, SOCK_STREAM, 0);
        if (fds[i] < 0 || bind(fds[i], (struct sockaddr *)&a, sizeof a) < 0 ||
            getsockname(fds[i], (struct sockaddr *)&a, &alen) < 0) {
            rc = -1;
            ports[i] = 0;
        } else {
            ports[i] = ntohs(a.sin_port);
        }
    }
    for (int i = 0; i < n; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    return rc;
}

/* ---- setup requests: blocking, one per connection --------------------- */

int ms__bench_http_call_as(int port, const char *token, const char *method,
                           const char *path, const char *body, char **out)
{
    char node[32], headers[128] = "", err[512];
    struct ms_httpc_resp r;
    *out = NULL;
    snprintf(node, sizeof node, "127.0.0.1:%d", port);
    if (token)
        snprintf(headers, sizeof headers, "X-Moonshard-Token: %.64s\r\n",
                 token);
    if (ms_httpc_fetch(node, method, path, headers, body,
                       body ? strlen(body) : 0, HTTP_TIMEOUT_S,
                       HTTP_TIMEOUT_S, &r, err, sizeof err) < 0)
        return -1;
    *out = r.body;
    return r.status;
}

/* ms__bench_http_call_as() without a token. */
int ms__bench_http_call(int port, const char *method, const char *path,
                        const char *body, char **out)
{
    return ms__bench_http_call_as(port, NULL, method, path, body, out);
}

/* Counts occurrences of `needle` in `s`. */
int ms__bench_count_of(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)) != NULL; p++)
        n++;
    return n;
}

/* The unsigned number after `"key":` in a JSON text, or -1. */
long long ms__bench_json_num(const char *s, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = s ? strstr(s, pat) : NULL;
    return p ? strtoll(p + strlen(pat), NULL, 10) : -1;
}

/* ---- the cluster ------------------------------------------------------ */

/* 32 random hex digits into out; 0 or -1. */
static int random_hex(char out[33])
{
    unsigned char rnd[16];
    if (uv_random(NULL, NULL, rnd, sizeof rnd, 0, NULL) < 0)
        return -1;
    for (size_t i = 0; i < sizeof rnd; i++)
        snprintf(out + 2 * i, 3, "%02x", rnd[i]);
    return 0;
}

/*
 * Writes the config of nodes n1..nK (K = cl->nnodes) with a fresh secret
 * and admin token (kept in cl->token). `entities` is the body of the
 * entities table and `extra` more top-level fields, each line ending in
 * ",\n" (or ""). Returns 0 or -1 with errno set.
 */
int ms__bench_write_config(struct cluster *cl, const char *entities,
                           const char *extra)
{
    char secret[33];
    if (random_hex(secret) < 0 || random_hex(cl->token) < 0) {
        errno = EIO;
        return -1;
    }
    FILE *f = fopen(g_file[F_CONFIG], "w");
    if (!f)
        return -1;
    fprintf(f,
            "-- written by `moonshard bench`, removed when it ends\n"
            "return {\n"
            "    cluster = \"bench\",\n"
            "    secret = \"%s\",\n"
            "    admin_token = \"%s\",\n"
            "%s"
            "    nodes = {\n",
            secret, cl->token, extra);
    for (int i = 0; i < cl->nnodes; i++)
        fprintf(f,
                "        { name = \"n%d\", listen = \"127.0.0.1:%d\","
                " http = \"127.0.0.1:%d\" },\n",
                i + 1, cl->listen[i], cl->http[i]);
    fprintf(f, "    },\n    entities = {\n%s    },\n}\n", entities);
    return fclose(f) == 0 ? 0 : -1;
}

/* Starts node n<i+1> (a fresh log each time); 0 or -1 (said). */
int ms__bench_start_node(struct cluster *cl, int i)
{
    char name[16];
    snprintf(name, sizeof name, "n%d", i + 1);
    char *argv[] = {cl->exe, "node", g_file[F_CONFIG], "--name", name, NULL};
    pid_t pid = ms__bench_spawn(argv, 0, -1, g_file[F_LOG1 + i]);
    if (pid < 0) {
        fprintf(stderr, "moonshard bench: cannot start node %s: %s\n", name,
                strerror(errno));
        return -1;
    }
    g_pid[CH_N1 + i] = pid;
    return 0;
}

void ms__bench_show_node_logs(const struct cluster *cl)
{
    for (int i = 0; i < cl->nnodes; i++) {
        char name[16];
        snprintf(name, sizeof name, "n%d", i + 1);
        ms__bench_show_log_tail(name, g_file[F_LOG1 + i]);
    }
}

/* Waits until nodes n1..n<n> all list n Up members and say they
 * converged. */
int ms__bench_wait_up(struct cluster *cl, int n)
{
    double until = ms__bench_now_s() + NODE_WAIT_S;
    while (ms__bench_now_s() < until) {
        int ok = 0;
        for (int i = 0; i < n; i++) {
            if (ms__bench_child_gone(CH_N1 + i)) {
                fprintf(stderr, "moonshard bench: node n%d exited while "
                        "starting\n", i + 1);
                return -1;
            }
            char *body;
            int st = ms__bench_http_call(cl->http[i], "GET", "/v1/members",
                                         NULL, &body);
            if (st == 200 && strstr(body, "\"converged\":true") &&
                ms__bench_count_of(body, "\"status\":\"up\"") == n)
                ok++;
            free(body);
        }
        if (ok == n)
            return 0;
        usleep(100000);
    }
    fprintf(stderr, "moonshard bench: the nodes did not converge with %d "
            "Up members within %d s\n", n, NODE_WAIT_S);
    return -1;
}

int ms__bench_cluster_init(struct cluster *cl, int nnodes, int *spare)
{
    int ports[2 * MAX_NODES + 1];
    memset(cl, 0, sizeof *cl);
    cl->nnodes = nnodes;
    if (ms__bench_node_binary(cl->exe, sizeof cl->exe) < 0)
        return -1;
    if (free_ports(ports, 2 * nnodes + 1) < 0) {
        fprintf(stderr, "moonshard bench: cannot find free ports\n");
        return -1;
    }
    for (int i = 0; i < nnodes; i++) {
        cl->listen[i] = ports[i];
        cl->http[i] = ports[nnodes + i];
    }
    *spare = ports[2 * nnodes];
    install_signals();
    snprintf(g_dir, sizeof g_dir, "/tmp/moonshard-bench-XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("moonshard bench: cannot make a temporary folder");
        g_dir[0] = 0;
        return -1;
    }
    static const char *fnames[F_COUNT] = {"cluster.lua", "n1.log", "n2.log",
                                          "n3.log", "redis.log",
                                          "bench_pcounter.lua", "wrk.lua",
                                          "wrk.log", "relay.log"};
    for (int i = 0; i < F_COUNT; i++)
        snprintf(g_file[i], sizeof g_file[i], "%s/%s", g_dir, fnames[i]);
    return 0;
}
const char *ms__bench_file(int f)
{
    return g_file[f];
}

void ms__bench_track(int slot, pid_t pid)
{
    g_pid[slot] = pid;
}

int ms__bench_self(char *buf, size_t len)
{
    size_t n = len;
    if (uv_exepath(buf, &n) < 0 || !strchr(buf, '/')) {
        fprintf(stderr, "moonshard-bench: cannot find its own "
                "executable\n");
        return -1;
    }
    return 0;
}

int ms__bench_node_binary(char *buf, size_t len)
{
    const char *env = getenv("MOONSHARD_BIN");
    if (env && *env) {
        snprintf(buf, len, "%s", env);
    } else {
        char exe[PATH_MAX];
        if (ms__bench_self(exe, sizeof exe) < 0)
            return -1;
        *strrchr(exe, '/') = 0;
        snprintf(buf, len, "%s/moonshard", exe);
    }
    if (access(buf, X_OK) != 0) {
        fprintf(stderr, "moonshard-bench: cannot run the node binary %s: "
                "%s (build it beside moonshard-bench, or set "
                "MOONSHARD_BIN)\n", buf, strerror(errno));
        return -1;
    }
    return 0;
}
