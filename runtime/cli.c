/*
 * cli.c -- `moonshard tell|ask|stop|status|members|leave|down|remember`:
 * commands
 * over a node's gateway, one request per connection (`Connection:
 * close`), sent with the shared client (runtime/client/httpc.h).
 */
#include "cli.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/httpc.h"
#include "lua/bridge.h"
#include "moonshard.h"

#define DEFAULT_NODE "127.0.0.1:7201"
#define DEFAULT_TIMEOUT_S 5.0       /* the gateway's default ask timeout */
#define MAX_TIMEOUT_S 300.0         /* the gateway's upper bound */
#define GRACE_S 5.0                 /* receive timeout = ask timeout + this */
#define SEND_TIMEOUT_S 10           /* connect and send */

static const char *const usages[] = {
    "tell [--node HOST:PORT] [--op-id ID] TYPE ID JSON",
    "ask [--node HOST:PORT] [--timeout SECONDS] [--op-id ID] TYPE ID JSON",
    "stop [--node HOST:PORT] TYPE ID",
    "status [--node HOST:PORT] [--json]",
    "members [--node HOST:PORT] [--json]",
    "leave [--node HOST:PORT] [--token TOKEN]",
    "down [--node HOST:PORT] [--token TOKEN] [--force] ADDRESS",
    "remember clear [--node HOST:PORT] [--token TOKEN] TYPE SHARD",
};

static int usage(FILE *f, const char *cmd, int code)
{
    size_t i, n = sizeof usages / sizeof usages[0];
    int shown = 0;

    for (i = 0; i < n; i++) {
        size_t k = strcspn(usages[i], " ");

        if (cmd != NULL && (strlen(cmd) != k || strncmp(usages[i], cmd, k)))
            continue;
        fprintf(f, "%s moonshard %s\n", shown ? "      " : "usage:",
                usages[i]);
        shown = 1;
    }
    if (!shown)
        return usage(f, NULL, code);
    if (cmd == NULL)
        fprintf(f, "The node defaults to $MOONSHARD_NODE, else %s.\n",
                DEFAULT_NODE);
    return code;
}

/* Percent-encodes every byte of `s` but the unreserved ones (RFC 3986).
 * Returns a new string (caller frees) or NULL when out of memory. */
static char *pct_encode(const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = strlen(s), i, o = 0;
    char *out = malloc(3 * n + 1);

    if (out == NULL)
        return NULL;
    for (i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];

        if ((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
            (ch >= '0' && ch <= '9') || ch == '-' || ch == '.' ||
            ch == '_' || ch == '~') {
            out[o++] = (char)ch;
        } else {
            out[o++] = '%';
            out[o++] = hex[ch >> 4];
            out[o++] = hex[ch & 15];
        }
    }
    out[o] = '\0';
    return out;
}

/* Headers every request of the CLI carries besides Host. */
#define CLI_HEADERS "User-Agent: moonshard/" MS_VERSION "\r\n"
#define CLI_JSON_HEADERS CLI_HEADERS "Accept: application/json\r\n"

/*
 * Sends one request to `node` (runtime/client/httpc.h: Connection: close,
 * connect and send bounded by SEND_TIMEOUT_S) and collects the response:
 * its status in *status and its body in *body (NUL-terminated, caller
 * frees) and *blen. Returns 0, or 2 (said on stderr) when the node cannot
 * be reached or gives no valid response within recv_timeout_s.
 */
static int fetch(const char *node, const char *method, const char *path,
                 const char *headers, const char *body,
                 double recv_timeout_s, int *status, char **out,
                 size_t *blen)
{
    struct ms_httpc_resp r;
    char why[512];
    /* the entity endpoints of a node with api_token want it: sent on
     * every request (the other endpoints ignore it) */
    const char *api = getenv("MOONSHARD_API_TOKEN");
    char *all = NULL;
    if (api && api[0]) {
        if (strcspn(api, "\r\n") != strlen(api)) {
            fprintf(stderr, "error: MOONSHARD_API_TOKEN holds a line "
                    "break\n");
            return 2;
        }
        size_t n = strlen(headers ? headers : "") + strlen(api) + 32;
        all = malloc(n);
        if (!all) {
            fprintf(stderr, "error: out of memory\n");
            return 2;
        }
        snprintf(all, n, "%sX-Moonshard-Api-Token: %s\r\n",
                 headers ? headers : "", api);
        headers = all;
    }
    int rc = ms_httpc_fetch(node, method, path, headers, body,
                            body ? strlen(body) : 0, SEND_TIMEOUT_S,
                            recv_timeout_s, &r, why, sizeof why);
    free(all);
    if (rc < 0) {
        fprintf(stderr, "error: %s\n", why);
        return 2;
    }
    *status = r.status;
    *out = r.body;
    *blen = r.len;
    return 0;
}

/*
 * Sends a request to `node` (as fetch()) and prints the outcome. Returns
 * the exit code: 0 for a 2xx answer (body on stdout), 1 for another
 * status (on stderr), 2 when the node cannot be reached or gives no valid
 * response in time.
 */
static int exchange(const char *node, const char *method, const char *path,
                    const char *headers, const char *reqbody,
                    double recv_timeout_s)
{
    char *body = NULL;
    size_t len = 0;
    int status = 0, code;

    code = fetch(node, method, path, headers, reqbody, recv_timeout_s,
                 &status, &body, &len);
    if (code != 0)
        return code;
    if (status >= 200 && status < 300) {
        fwrite(body, 1, len, stdout);
        fputc('\n', stdout);
        code = fflush(stdout) == 0 ? 0 : 2;
    } else {
        fprintf(stderr, "error: %d %s\n", status, body);
        code = 1;
    }
    free(body);
    return code;
}

/* GETs `path` of `node` into *body; an error status is said on stderr.
 * Returns 0, 1 (error status) or 2 as exchange() does. */
static int get(const char *node, const char *path, char **body)
{
    size_t len = 0;
    int status = 0;
    int code = fetch(node, "GET", path, CLI_JSON_HEADERS, NULL,
                     DEFAULT_TIMEOUT_S + GRACE_S, &status, body, &len);
    if (code == 0 && (status < 200 || status >= 300)) {
        fprintf(stderr, "error: %d %s\n", status, *body);
        free(*body);
        *body = NULL;
        code = 1;
    }
    return code;
}

/* `moonshard status` for people: the node's stats and its view of the
 * members, laid out by lua/moonshard/status.lua. */
static int status_text(const char *node)
{
    char *stats = NULL, *members = NULL, *arg = NULL, *out = NULL;
    char home[PATH_MAX], err[1024];
    int code = get(node, "/v1/stats", &stats);
    if (code == 0)
        code = get(node, "/v1/members", &members);
    if (code == 0 && asprintf(&arg, "%s\n%s", stats, members) < 0) {
        fprintf(stderr, "error: out of memory\n");
        arg = NULL;
        code = 2;
    }
    if (code == 0) {
        ms_home(home, sizeof home);
        if (ms_lua_run_isolated(home, "moonshard.status", "render", arg, 0,
                                &out, err, sizeof err) < 0) {
            fprintf(stderr, "error: cannot lay out the status: %s\n", err);
            code = 2;
        } else {
            fputs(out, stdout);
            code = fflush(stdout) == 0 ? 0 : 2;
        }
    }
    free(stats);
    free(members);
    free(arg);
    free(out);
    return code;
}

/* `moonshard members` for people: the node's view of the members as a
 * table, laid out by lua/moonshard/status.lua. */
static int members_text(const char *node)
{
    char *members = NULL, *out = NULL;
    char home[PATH_MAX], err[1024];
    int code = get(node, "/v1/members", &members);
    if (code == 0) {
        ms_home(home, sizeof home);
        if (ms_lua_run_isolated(home, "moonshard.status", "members", members,
                                0, &out, err, sizeof err) < 0) {
            fprintf(stderr, "error: cannot lay out the members: %s\n", err);
            code = 2;
        } else {
            fputs(out, stdout);
            code = fflush(stdout) == 0 ? 0 : 2;
        }
    }
    free(members);
    free(out);
    return code;
}

/*
 * Runs `moonshard tell|ask|stop|status ...` with argv[0] the subcommand.
 * Options (--node HOST:PORT, --timeout SECONDS for ask) may come anywhere
 * before `--`. Writes the response body and a newline on stdout, errors on
 * stderr. Returns the exit code: 0 for a 2xx answer, 1 for an error status
 * (printed as `error: <status> <body>`), 2 for usage, connection, timeout
 * or protocol errors. Does not keep any pointer into argv.
 */
/* `moonshard leave` / `moonshard down [--force] ADDRESS`: POST /v1/leave
 * or /v1/down with the admin token ($MOONSHARD_ADMIN_TOKEN or --token).
 * The node refuses to down a member it sees reachable unless --force. */
static int admin(int argc, char **argv, const char *node)
{
    const char *cmd = argv[0], *token = getenv("MOONSHARD_ADMIN_TOKEN");
    const char *address = NULL;
    int down = cmd[0] == 'd', force = 0;
    if (node == NULL || node[0] == '\0')
        node = DEFAULT_NODE;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--node") == 0 && i + 1 < argc)
            node = argv[++i];
        else if (strcmp(argv[i], "--token") == 0 && i + 1 < argc)
            token = argv[++i];
        else if (down && strcmp(argv[i], "--force") == 0)
            force = 1;
        else if (down && !address && argv[i][0] != '-')
            address = argv[i];
        else
            return usage(stderr, cmd, 2);
    }
    if ((down && !address) || !token || !token[0]) {
        if (!token || !token[0])
            fprintf(stderr, "error: the admin token is needed: --token or "
                    "$MOONSHARD_ADMIN_TOKEN\n");
        return usage(stderr, cmd, 2);
    }
    /* written into a JSON string as is: only bytes an address can have */
    if (down && strlen(address) > 128) {
        fprintf(stderr, "error: ADDRESS must be host:port, at most 128 "
                "bytes\n");
        return usage(stderr, cmd, 2);
    }
    for (const char *p = down ? address : ""; *p; p++) {
        unsigned char ch = (unsigned char)*p;
        if (ch <= 0x20 || ch >= 0x7f || ch == '"' || ch == '\\' ||
            ch == ',') {
            fprintf(stderr, "error: ADDRESS must be host:port\n");
            return usage(stderr, cmd, 2);
        }
    }
    char body[300] = "";
    if (down)
        snprintf(body, sizeof body, "{\"address\":\"%.200s\"%s}", address,
                 force ? ",\"force\":true" : "");
    char *headers = NULL;
    if (asprintf(&headers, CLI_HEADERS "X-Moonshard-Token: %s\r\n",
                 token) < 0) {
        fprintf(stderr, "error: out of memory\n");
        return 2;
    }
    int code = exchange(node, "POST", down ? "/v1/down" : "/v1/leave",
                        headers, body, DEFAULT_TIMEOUT_S + GRACE_S);
    free(headers);
    return code;
}

/* `moonshard remember clear TYPE SHARD`: POST /v1/remember/clear/TYPE/
 * SHARD with the admin token ($MOONSHARD_ADMIN_TOKEN or --token), to the
 * node that owns the shard (--node, else $MOONSHARD_NODE, else the
 * default): it clears the shard's failed mark there, if it has one. */
static int remember(int argc, char **argv, const char *node)
{
    const char *token = getenv("MOONSHARD_ADMIN_TOKEN"), *pos[2];
    int npos = 0;
    if (node == NULL || node[0] == '\0')
        node = DEFAULT_NODE;
    if (argc < 2 || strcmp(argv[1], "clear") != 0) {
        if (argc >= 2)
            fprintf(stderr, "error: unknown remember command '%s'\n",
                    argv[1]);
        return usage(stderr, argv[0], 2);
    }
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0)
            return usage(stdout, argv[0], 0);
        if ((strcmp(argv[i], "--node") == 0 ||
             strcmp(argv[i], "--token") == 0) && i + 1 == argc) {
            fprintf(stderr, "error: option %s needs a value\n", argv[i]);
            return usage(stderr, argv[0], 2);
        }
        if (strcmp(argv[i], "--node") == 0)
            node = argv[++i];
        else if (strncmp(argv[i], "--node=", 7) == 0)
            node = argv[i] + 7;
        else if (strcmp(argv[i], "--token") == 0)
            token = argv[++i];
        else if (strncmp(argv[i], "--token=", 8) == 0)
            token = argv[i] + 8;
        else if (argv[i][0] == '-' && argv[i][1] == '-') {
            fprintf(stderr, "error: bad option %s\n", argv[i]);
            return usage(stderr, argv[0], 2);
        } else if (npos < 2)
            pos[npos++] = argv[i];
        else
            return usage(stderr, argv[0], 2);
    }
    if (npos != 2)
        return usage(stderr, argv[0], 2);
    if (pos[0][0] == '\0') {
        fprintf(stderr, "error: TYPE must not be empty\n");
        return usage(stderr, argv[0], 2);
    }
    if (!token || !token[0]) {
        fprintf(stderr, "error: the admin token is needed: --token or "
                "$MOONSHARD_ADMIN_TOKEN\n");
        return usage(stderr, argv[0], 2);
    }
    const char *p = pos[1];
    size_t digits = strspn(p, "0123456789");
    if (digits == 0 || p[digits] != '\0' || digits > 10 ||
        strtoull(p, NULL, 10) > UINT32_MAX) {
        fprintf(stderr, "error: SHARD must be a shard number (0 to the "
                "type's shard_count - 1)\n");
        return usage(stderr, argv[0], 2);
    }
    char *type = pct_encode(pos[0]), *path = NULL, *headers = NULL;
    int code = 2;
    if (type == NULL ||
        asprintf(&path, "/v1/remember/clear/%s/%s", type, p) < 0)
        path = NULL;
    else if (asprintf(&headers, CLI_JSON_HEADERS "X-Moonshard-Token: %s\r\n",
                      token) < 0)
        headers = NULL;
    if (path == NULL || headers == NULL)
        fprintf(stderr, "error: out of memory\n");
    else
        code = exchange(node, "POST", path, headers, "",
                        DEFAULT_TIMEOUT_S + GRACE_S);
    free(type);
    free(path);
    free(headers);
    return code;
}

int ms_cli_main(int argc, char **argv)
{
    const char *cmd = argc > 0 ? argv[0] : NULL;
    const char *node = getenv("MOONSHARD_NODE");
    const char *pos[3], *action;
    double timeout_s = DEFAULT_TIMEOUT_S;
    int want, is_ask = 0, npos = 0, opts_done = 0, i, n, code;
    int is_status = cmd != NULL && strcmp(cmd, "status") == 0, json = 0;
    int is_members = cmd != NULL && strcmp(cmd, "members") == 0;
    char *type = NULL, *id = NULL, *path = NULL, query[48] = "";
    const char *opid = NULL; /* --op-id: the Idempotency-Key header */
    int is_send = 0;

    if (cmd == NULL)
        return usage(stderr, NULL, 2);
    if (strcmp(cmd, "tell") == 0 || strcmp(cmd, "ask") == 0) {
        want = 3;
        is_ask = cmd[0] == 'a';
        is_send = 1;
    } else if (strcmp(cmd, "stop") == 0) {
        want = 2;
    } else if (strcmp(cmd, "status") == 0 || strcmp(cmd, "members") == 0) {
        want = 0;
    } else if (strcmp(cmd, "leave") == 0 || strcmp(cmd, "down") == 0) {
        return admin(argc, argv, node);
    } else if (strcmp(cmd, "remember") == 0) {
        return remember(argc, argv, node);
    } else {
        return usage(stderr, NULL, 2);
    }
    if (node == NULL || node[0] == '\0')
        node = DEFAULT_NODE;

    for (i = 1; i < argc; i++) {
        const char *a = argv[i];

        if (!opts_done && a[0] == '-' && a[1] == '-') {
            if (a[2] == '\0') {
                opts_done = 1;
            } else if ((strcmp(a, "--node") == 0 ||
                        (is_ask && strcmp(a, "--timeout") == 0) ||
                        (is_send && strcmp(a, "--op-id") == 0)) &&
                       i + 1 == argc) {
                fprintf(stderr, "error: option %s needs a value\n", a);
                return usage(stderr, cmd, 2);
            } else if ((is_status || is_members) &&
                       strcmp(a, "--json") == 0) {
                json = 1;
            } else if (strcmp(a, "--help") == 0) {
                return usage(stdout, cmd, 0);
            } else if (strcmp(a, "--node") == 0) {
                node = argv[++i];
            } else if (strncmp(a, "--node=", 7) == 0) {
                node = a + 7;
            } else if (is_send && strcmp(a, "--op-id") == 0) {
                opid = argv[++i];
            } else if (is_send && strncmp(a, "--op-id=", 8) == 0) {
                opid = a + 8;
            } else if (is_ask && (strcmp(a, "--timeout") == 0 ||
                                  strncmp(a, "--timeout=", 10) == 0)) {
                const char *v = a[9] == '=' ? a + 10 : argv[++i];
                char *end;

                timeout_s = strtod(v, &end);
                if (end == v || *end != '\0' ||
                    !(timeout_s > 0 && timeout_s <= MAX_TIMEOUT_S)) {
                    fprintf(stderr, "error: --timeout must be a number of "
                            "seconds, > 0 and <= %g\n", MAX_TIMEOUT_S);
                    return usage(stderr, cmd, 2);
                }
            } else {
                fprintf(stderr, "error: bad option %s\n", a);
                return usage(stderr, cmd, 2);
            }
            continue;
        }
        if (npos == want)
            return usage(stderr, cmd, 2);
        pos[npos++] = a;
    }
    if (npos != want)
        return usage(stderr, cmd, 2);

    if (is_status && !json)
        return status_text(node);
    if (is_members && !json)
        return members_text(node);
    if (want == 0) {
        return exchange(node, "GET",
                        cmd[0] == 'm' ? "/v1/members" : "/v1/stats",
                        CLI_JSON_HEADERS, NULL, DEFAULT_TIMEOUT_S + GRACE_S);
    }

    type = pct_encode(pos[0]);
    id = pct_encode(pos[1]);
    action = want == 2 ? "stop" : is_ask ? "ask" : "tell";
    if (is_ask)
        snprintf(query, sizeof query, "?timeout=%.6g", timeout_s);
    n = -1;
    if (type != NULL && id != NULL)
        n = asprintf(&path, "/v1/entities/%s/%s/%s%s", type, id, action,
                     query);
    free(type);
    free(id);
    if (n < 0) {
        fprintf(stderr, "error: out of memory\n");
        return 2;
    }
    char *headers = NULL;
    if (opid != NULL) {
        /* the gateway checks it (400 with the reason); a line break
         * would end the header early */
        if (strpbrk(opid, "\r\n") != NULL || opid[0] == '\0') {
            fprintf(stderr, "error: --op-id must be a non-empty value "
                    "without line breaks\n");
            free(path);
            return 2;
        }
        if (asprintf(&headers, CLI_JSON_HEADERS "Idempotency-Key: %s\r\n",
                     opid) < 0) {
            fprintf(stderr, "error: out of memory\n");
            free(path);
            return 2;
        }
    }
    code = exchange(node, "POST", path, headers ? headers : CLI_JSON_HEADERS,
                    want == 3 ? pos[2] : "",
                    (is_ask ? timeout_s : DEFAULT_TIMEOUT_S) + GRACE_S);
    free(headers);
    free(path);
    return code;
}
