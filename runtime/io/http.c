/*
 * http.c -- the HTTP gateway's endpoints: each complete request that
 * http_conn.c parsed is routed here and answered once, at once or when
 * its ask ends. Endpoints are documented in README.md.
 */
#include "http_conn.h"
#include "http_ui.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../core/downreq.h"
#include "../core/jsoncheck.h"

#define ID_MAX MS_MAX_ID             /* bytes of a decoded entity id */
#define TIMEOUT_DEFAULT_MS 5000
#define TIMEOUT_MAX_S 300.0
#define OK_BODY "{\"ok\":true}"

/* ---- small helpers ------------------------------------------------------ */

static int streq(const char *s, size_t n, const char *lit)
{
    return strlen(lit) == n && memcmp(s, lit, n) == 0;
}

static int hexval(int ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

/* Percent-decodes s[0..*n) in place. Returns 0, or -1 on a bad escape. */
static int pct_decode(char *s, size_t *n)
{
    size_t i, o = 0;

    for (i = 0; i < *n; i++) {
        if (s[i] == '%') {
            int hi, lo;

            if (*n - i < 3 || (hi = hexval(s[i + 1])) < 0 ||
                (lo = hexval(s[i + 2])) < 0)
                return -1;
            s[o++] = (char)(hi * 16 + lo);
            i += 2;
        } else {
            s[o++] = s[i];
        }
    }
    *n = o;
    return 0;
}

/*
 * Reads `timeout=SECONDS` from the query string into *ms (default 5 s).
 * Returns 0, or -1 unless the value is a plain decimal number of seconds
 * with 0 < SECONDS <= 300 (no "inf", "nan", hex or blanks).
 */
static int parse_timeout(const char *q, size_t qlen, uint64_t *ms)
{
    size_t i = 0;

    *ms = TIMEOUT_DEFAULT_MS;
    while (i < qlen) {
        size_t j = i, vn;
        const char *v;
        char tmp[32], *end;
        double s;

        while (j < qlen && q[j] != '&')
            j++;
        if (streq(q + i, j - i, "timeout"))
            return -1;
        if (j - i < 8 || memcmp(q + i, "timeout=", 8) != 0) {
            i = j + 1;
            continue;
        }
        v = q + i + 8;
        vn = j - i - 8;
        if (vn == 0 || vn >= sizeof tmp)
            return -1;
        memcpy(tmp, v, vn);
        tmp[vn] = '\0';
        if (strspn(tmp, "0123456789.eE+-") != vn ||
            !((tmp[0] >= '0' && tmp[0] <= '9') || tmp[0] == '.'))
            return -1;
        s = strtod(tmp, &end);
        if (*end != '\0' || !(s > 0 && s <= TIMEOUT_MAX_S))
            return -1;
        *ms = (uint64_t)(s * 1000.0 + 0.5);
        if (*ms == 0)
            *ms = 1;
        i = j + 1;
    }
    return 0;
}

/* The HTTP status of a node error code. */
static int err_status(int err)
{
    switch (err) {
    case MS_EBADJSON:
    case MS_ENOTTABLE:
    case MS_EINVAL:
        return 400;
    case MS_ENOTYPE:
        return 404;
    case MS_E2BIG:
        return 413;
    case MS_ENOREPLY:
        return 502;
    case MS_EOVERFLOW:
    case MS_EUNAVAIL:
    case MS_ENOOWNER:
    case MS_ELEASE:
    case MS_ECANCELED:
    case MS_ESTALE:
    case MS_EDBCONN:
    case MS_EDBFULL:
    case MS_EREMEMBER:
        return 503;
    case MS_ECONFLICT:
        return 409;
    case MS_ETIMEDOUT:
        return 504;
    default: /* MS_EHANDLER, MS_ENOMEM, ... */
        return 500;
    }
}

static void respond_node_error(struct conn *c, int err)
{
    respond_error(c, err_status(err), ms_errname(err), "%s",
                  ms_strerror(err));
}

static void not_allowed(struct conn *c, const char *method)
{
    char extra[32], msg[64];

    snprintf(extra, sizeof extra, "Allow: %s\r\n", method);
    snprintf(msg, sizeof msg, "this endpoint takes %s", method);
    respond_error_x(c, 405, extra, "method_not_allowed", msg, OWN, msg);
}

/* ---- endpoints ---------------------------------------------------------- */

static void on_ask(void *data, int err, const char *payload, size_t len)
{
    struct conn *c = data;

    if (!c->closing) {
        char code[64], detail[1024];
        if (err == 0) {
            respond(c, 200, JSON, payload, len);
        } else if (payload != NULL && len > 0) {
            /* payload is {"code": ..., "message": ...}, from this node or
             * the owner's; its message is the detail */
            int ok = ms_client_error_parse(payload, len, code, sizeof code,
                                           detail, sizeof detail) == 0;
            respond_error_x(c, err_status(err), NULL,
                            ok ? code : ms_errname(err), ok ? detail : NULL,
                            FOREIGN, ms_strerror(err));
        } else {
            respond_node_error(c, err);
        }
    }
    conn_unref(c);
}

static void get_index(struct conn *c)
{
    const char *a = c->h->address;
    /* a gateway_tls node speaks HTTPS only, and with an api_token the
     * entity endpoints want it: the examples say so, else each one the
     * page shows fails (no answer, or 401) */
    int tls = c->h->tls != NULL;
    const char *s = tls ? "https" : "http";
    const char *o = tls ? " --cacert \"$MOONSHARD_CA\"" : "";
    const char *tok = c->h->gw.api_token;
    const char *t = tok != NULL && *tok != '\0'
        ? " -H \"X-Moonshard-Api-Token: $MOONSHARD_API_TOKEN\"" : "";
    char text[4096];
    int n;

    n = snprintf(text, sizeof text,
        "moonshard node %s -- HTTP gateway\n"
        "\n"
        "Send a message to an entity (202, no reply):\n"
        "  curl%s%s -X POST -d '{\"type\":\"incr\"}' "
        "%s://%s/v1/entities/Counter/c1/tell\n"
        "Ask an entity and wait for its reply (timeout in seconds, "
        "default 5, at most 300):\n"
        "  curl%s%s -X POST -d '{\"type\":\"get\"}' "
        "'%s://%s/v1/entities/Counter/c1/ask?timeout=5'\n"
        "Passivate an entity:\n"
        "  curl%s%s -X POST %s://%s/v1/entities/Counter/c1/stop\n"
        "Node counters and health (and Prometheus metrics):\n"
        "  curl%s %s://%s/v1/stats\n"
        "  curl%s %s://%s/v1/health\n"
        "  curl%s %s://%s/metrics\n"
        "The cluster: members, and a type's shard owners:\n"
        "  curl%s %s://%s/v1/members\n"
        "  curl%s %s://%s/v1/allocations/Counter\n"
        "A persistent type's lease holders and epochs (from the "
        "database):\n"
        "  curl%s %s://%s/v1/leases/Order\n"
        "The status page, in a browser (works offline):\n"
        "  %s://%s/ui\n"
        "%s%s"
        "\n"
        "Bodies are JSON objects. Errors come back as\n"
        "{\"error\":{\"code\":...,\"message\":...,\"id\":...}} with a "
        "4xx or 5xx\nstatus; the node's log has the id with the whole "
        "detail.\n"
        "The same from a shell: moonshard tell|ask|stop|status "
        "[--node %s%s] ...\n",
        c->h->gw.name,
        o, t, s, a, o, t, s, a, o, t, s, a,
        o, s, a, o, s, a, o, s, a, o, s, a, o, s, a, o, s, a,
        s, a,
        tls ? "(MOONSHARD_CA: the file of the CA that signed the "
              "gateway's certificate)\n" : "",
        *t ? "(the entity endpoints want the node's api_token)\n" : "",
        tls ? "https://" : "", a);
    if (n < 0)
        n = 0;
    if ((size_t)n >= sizeof text)
        n = (int)sizeof text - 1;
    respond(c, 200, "text/plain; charset=utf-8", text, (size_t)n);
}

/* The JSON a node writer produces, NUL-terminated: in `small` when it
 * fits, else in a buffer the caller frees (grown once); NULL when out of
 * memory. */
static char *node_json(const struct ms_gateway *gw,
                       size_t (*write)(void *, char *, size_t),
                       char *small, size_t cap, size_t *len)
{
    void *n = gw->data;
    size_t need = write(n, small, cap);
    if (need < cap) {
        *len = need;
        return small;
    }
    char *big = malloc(need + 1);
    if (big == NULL)
        return NULL;
    if (write(n, big, need + 1) < need)
        need = strlen(big);
    *len = need;
    return big;
}

/* Answers 200 with the JSON a node writer produces. */
static void get_json(struct conn *c,
                     size_t (*write)(void *, char *, size_t))
{
    char small[4096];
    size_t len;
    char *json = node_json(&c->h->gw, write, small, sizeof small, &len);
    if (json == NULL) {
        respond_node_error(c, MS_ENOMEM);
        return;
    }
    respond(c, 200, JSON, json, len);
    if (json != small)
        free(json);
}

static void get_stats(struct conn *c)
{
    get_json(c, c->h->gw.stats_json);
}

static void get_members(struct conn *c)
{
    get_json(c, c->h->gw.members_json);
}

/* GET /metrics: the stats in the Prometheus text format, rendered by
 * lua/moonshard/metrics.lua. */
static void get_metrics(struct conn *c)
{
    char small[4096], err[256], *text = NULL;
    size_t len;
    char *json = node_json(&c->h->gw, c->h->gw.stats_json, small,
                           sizeof small, &len);
    if (json == NULL) {
        respond_node_error(c, MS_ENOMEM);
        return;
    }
    snprintf(err, sizeof err, "the metrics module returned nothing");
    int rc = c->h->gw.call_lua(c->h->gw.data, "moonshard.metrics", "render",
                              json, &text, err, sizeof err);
    if (json != small)
        free(json);
    if (rc < 0 || text == NULL || text[0] == 0) {
        respond_error_x(c, 500, NULL, "internal", err, FOREIGN,
                        "the metrics could not be rendered");
    } else {
        respond(c, 200, "text/plain; version=0.0.4; charset=utf-8", text,
                strlen(text));
    }
    free(text);
}

static void get_allocations(struct conn *c, char *type, size_t tlen)
{
    if (pct_decode(type, &tlen) != 0) {
        respond_error(c, 400, "bad_request", "bad percent-escape in path");
        return;
    }
    const struct ms_gateway *gw = &c->h->gw;
    int t = gw->type(gw->data, type, tlen);
    if (t < 0) {
        respond_error(c, 404, ms_errname(MS_ENOTYPE),
                      "unknown entity type '%.*s'",
                      (int)(tlen > 100 ? 100 : tlen), type);
        return;
    }
    size_t need = gw->allocations_json(gw->data, t, NULL, 0);
    char *buf = malloc(need + 1);
    if (!buf) {
        respond_node_error(c, MS_ENOMEM);
        return;
    }
    gw->allocations_json(gw->data, t, buf, need + 1);
    respond(c, 200, JSON, buf, need);
    free(buf);
}

/* The lease rows came back from the database (or did not). */
static void on_leases(void *data, int err, const char *payload, size_t len)
{
    struct conn *c = data;

    if (!c->closing) {
        if (err == 0) {
            respond(c, 200, JSON, payload, len);
        } else {
            /* the database down, its timeout, a refused statement, the
             * node stopping: all "try again later"; the text (the
             * server's own words) is logged whole under the error id */
            char detail[1024];
            snprintf(detail, sizeof detail, "%.*s",
                     (int)(len < sizeof detail ? len : sizeof detail - 1),
                     payload ? payload : "");
            respond_error_x(c, 503, NULL, ms_errname(err), detail, FOREIGN,
                            ms_strerror(err));
        }
    }
    conn_unref(c);
}

/*
 * GET /v1/leases/{type}: the lease rows of a persistent type in this
 * cluster, read from the database (the node's pool; the connection is
 * answered when the SELECT ends). 404 for an unknown type and for a type
 * that holds no leases; 503 when the node has no database, or the
 * database fails or does not answer in time.
 */
static void get_leases(struct conn *c, char *type, size_t tlen)
{
    if (pct_decode(type, &tlen) != 0) {
        respond_error(c, 400, "bad_request", "bad percent-escape in path");
        return;
    }
    const struct ms_gateway *gw = &c->h->gw;
    int shown = (int)(tlen > 100 ? 100 : tlen);
    c->refs++;
    int rc = gw->leases(gw->data, type, tlen, on_leases, c);
    if (rc == 0)
        return;
    c->refs--;
    if (rc == MS_ENOTYPE)
        respond_error(c, 404, ms_errname(MS_ENOTYPE),
                      "unknown entity type '%.*s'", shown, type);
    else if (rc == MS_EINVAL)
        respond_error(c, 404, "not_leased", "type '%.*s' holds no leases "
                      "(neither persistent nor remembered in PostgreSQL)",
                      shown, type);
    else if (rc == MS_EDBCONN)
        respond_error(c, 503, ms_errname(rc), "this node has no usable "
                      "database (no `database` in its config, or one that "
                      "could not be parsed)");
    else if (rc == MS_EBUSY)
        respond_error(c, 503, ms_errname(rc), "the node is reading lease "
                      "rows for other requests already; try again later");
    else
        respond_error(c, 503, ms_errname(rc), "%s", ms_strerror(rc));
}

/*
 * 1 when the entity endpoints answer this request: no api_token is
 * configured, or the request carries it in X-Moonshard-Api-Token or as
 * "Authorization: Bearer TOKEN". Else answers 401 and returns 0. The
 * comparison takes the same time whatever the bytes (the length of the
 * configured token aside).
 */
static int api_ok(struct conn *c)
{
    const char *want = c->h->gw.api_token;
    size_t wl = want ? strlen(want) : 0;
    if (!wl)
        return 1;
    const char *got = c->api;
    size_t gl = c->api_len;
    if (gl >= 7 && strncasecmp(got, "Bearer ", 7) == 0) {
        got += 7;
        gl -= 7;
    }
    unsigned diff = (unsigned)(wl ^ gl);
    for (size_t i = 0; i < wl; i++)
        diff |= (unsigned)(want[i] ^ (i < gl ? got[i] : 0));
    if (!diff)
        return 1;
    int sent = c->api_x_seen || c->authz_seen;
    respond_error_x(c, 401, "WWW-Authenticate: Bearer\r\n", "unauthorized",
                    sent ? "wrong API token (X-Moonshard-Api-Token "
                           "or Authorization: Bearer)"
                         : "this node wants an API token for the "
                           "entity endpoints: send it in "
                           "X-Moonshard-Api-Token or as "
                           "Authorization: Bearer",
                    OWN, "unauthorized");
    return 0;
}

/* 1 when the request carries the admin token; else answers 403, 0. */
static int admin_ok(struct conn *c)
{
    int rc = c->h->gw.check_admin(c->h->gw.data, c->token, c->token_len,
                                  c->loopback);
    if (rc < 0)
        respond_error(c, 403, "forbidden", "%s",
                      rc == MS_EINVAL ? "this node has no admin_token "
                                        "configured"
                      : rc == UV_EPERM
                          ? "admin endpoints answer only clients on this "
                            "host (set admin_remote = true in the config "
                            "to allow others, with the token)"
                          : "missing or wrong X-Moonshard-Token");
    return rc == 0;
}

/* POST /v1/leave (no body: the node that receives it leaves) and
 * POST /v1/down (body: the member's address as a JSON string or
 * {"address": ..., "force": true}; or ?force=1, see core/downreq.h); both
 * need the admin token in the X-Moonshard-Token header. A down of a
 * member this node sees reachable (itself included) is refused with 409
 * unless it says force. */
static void post_admin(struct conn *c, int leave, const char *query,
                       size_t qlen)
{
    if (!admin_ok(c))
        return;
    int rc;
    if (leave) {
        rc = c->h->gw.leave(c->h->gw.data);
    } else {
        char address[MS_DOWNREQ_MAX_ADDRESS + 1];
        int force;
        const char *why;
        if (ms_downreq_parse(c->body, c->body_len, query, qlen, address,
                             sizeof address, &force, &why) < 0) {
            respond_error(c, 400, "bad_request", "%s", why);
            return;
        }
        rc = c->h->gw.down(c->h->gw.data, address, force);
    }
    if (!leave && rc == MS_EBUSY)
        respond_error(c, 409, "reachable", "%s",
                      "member is reachable; down only members that are "
                      "really gone, or pass force (a live member that is "
                      "downed keeps its entities while others take its "
                      "shards)");
    else if (rc < 0)
        respond_error(c, rc == MS_EINVAL ? 404 : 409,
                      rc == MS_EINVAL ? "not_found" : "conflict", "%s",
                      leave ? "this node cannot leave now"
                            : "no member has this address");
    else
        respond(c, 202, JSON, OK_BODY, strlen(OK_BODY));
}

/* The shard number of a path segment: decimal digits only (no sign, no
 * blanks), at most UINT32_MAX. 0, or -1 when it is not such a number. */
static int shard_number(const char *s, size_t n, uint32_t *shard)
{
    uint64_t v = 0;

    if (n == 0 || n > 10)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    if (v > UINT32_MAX)
        return -1;
    *shard = (uint32_t)v;
    return 0;
}

/* POST /v1/move/{type}/{shard} (admin token): the coordinator starts
 * moving that shard away from its owner through handoff; the strategy
 * places it. 202 when the move began; 409 on a node that does not
 * coordinate, or when the shard is moving already. */
static void post_move(struct conn *c, const char *rest, size_t len)
{
    if (!admin_ok(c))
        return;
    const char *slash = memchr(rest, '/', len);
    size_t nl = slash ? len - (size_t)(slash + 1 - rest) : 0;
    if (!slash || nl == 0) {
        respond_error(c, 404, "not_found", "use /v1/move/{type}/{shard}");
        return;
    }
    uint32_t shard;
    if (shard_number(slash + 1, nl, &shard) < 0) {
        respond_error(c, 400, "bad_request", "the shard must be a number");
        return;
    }
    int rc = c->h->gw.move(c->h->gw.data, rest, (size_t)(slash - rest),
                           shard);
    if (rc == MS_ENOTYPE)
        respond_error(c, 404, "unknown_type", "unknown entity type");
    else if (rc == MS_EBUSY)
        respond_error(c, 409, "busy", "the shard is moving already");
    else if (rc < 0)
        respond_error(c, 409, "conflict", "this node is not the ready "
                      "coordinator, or the shard has no owner");
    else
        respond(c, 202, JSON, OK_BODY, strlen(OK_BODY));
}

/* POST /v1/remember/clear/{type}/{shard} (admin token): clears the failed
 * mark that a remember-entities store failure left on a shard of a type
 * with on_failure = "fail_closed", on the node that receives it (the
 * shard's owner). 200 {"cleared":true} when the shard was failed here,
 * {"cleared":false,...} when it was not; 404 for an unknown type or a
 * type that does not remember its entities; 400 for a shard that is not
 * a number or out of the type's range. */
static void post_remember_clear(struct conn *c, char *rest, size_t len)
{
    if (!admin_ok(c))
        return;
    const struct ms_gateway *gw = &c->h->gw;
    const char *slash = memchr(rest, '/', len);
    if (!slash || slash == rest) {
        respond_error(c, 404, "not_found",
                      "use /v1/remember/clear/{type}/{shard}");
        return;
    }
    size_t tlen = (size_t)(slash - rest);
    const char *num = slash + 1;
    size_t nl = len - tlen - 1;
    uint32_t shard;
    if (shard_number(num, nl, &shard) < 0) {
        respond_error(c, 400, "bad_request", "the shard must be a number "
                      "from 0 to the type's shard_count - 1");
        return;
    }
    if (pct_decode(rest, &tlen) != 0) {
        respond_error(c, 400, "bad_request", "bad percent-escape in path");
        return;
    }
    int shown = (int)(tlen > 100 ? 100 : tlen);
    if (gw->type(gw->data, rest, tlen) < 0) {
        respond_error(c, 404, ms_errname(MS_ENOTYPE),
                      "unknown entity type '%.*s'", shown, rest);
        return;
    }
    int rc = gw->remember_clear(gw->data, rest, tlen, shard);
    if (rc == MS_ENOTYPE) {
        respond_error(c, 404, "not_remembered", "type '%.*s' does not "
                      "remember its entities (no remember = {...} in its "
                      "config)", shown, rest);
    } else if (rc == MS_EINVAL) {
        respond_error(c, 400, "bad_request", "shard %lu is out of the "
                      "range of type '%.*s'", (unsigned long)shard, shown,
                      rest);
    } else if (rc < 0) {
        respond_node_error(c, rc);
    } else if (rc > 0) {
        static const char yes[] = "{\"cleared\":true}";
        respond(c, 200, JSON, yes, strlen(yes));
    } else {
        static const char no[] =
            "{\"cleared\":false,\"message\":\"the shard is not failed on "
            "this node (a clear applies on the shard's owner)\"}";
        respond(c, 200, JSON, no, strlen(no));
    }
}

static void get_health(struct conn *c)
{
    const char *name = c->h->gw.name;
    char body[1024];
    size_t n = 0, cap = sizeof body - 2;

    n = strlen("{\"ok\":true,\"node\":\"");
    memcpy(body, "{\"ok\":true,\"node\":\"", n);
    ms_json_put_escaped(body, cap, &n, name, strlen(name));
    memcpy(body + n, "\"}", 2);
    respond(c, 200, JSON, body, n + 2);
}

static int json_blank(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n';
}

/*
 * The Idempotency-Key of the request, checked, added to the body as its
 * last field "$op" (see MS_OPID_FIELD): the body is a JSON object the
 * node's check accepted. Returns 0 (also without the header), or answers
 * 400 / 413 and returns -1.
 */
static int add_opid(struct conn *c)
{
    if (!c->opid_seen)
        return 0;
    size_t n = c->opid_len;
    if (n == 0 || n > MS_HTTP_OPID_MAX) {
        respond_error(c, 400, "bad_request", "Idempotency-Key must be 1 to "
                      "%d bytes", MS_HTTP_OPID_MAX);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)c->opid[i];
        if (ch < 0x21 || ch > 0x7e || ch == '"' || ch == '\\') {
            respond_error(c, 400, "bad_request", "Idempotency-Key must be "
                          "visible ASCII without '\"' or '\\'");
            return -1;
        }
    }
    size_t end = c->body_len;
    while (end && json_blank(c->body[end - 1]))
        end--;
    size_t open = 0;
    while (open < end && c->body[open] != '{')
        open++;
    size_t first = open + 1;
    while (first < end && json_blank(c->body[first]))
        first++;
    if (end == 0 || c->body[end - 1] != '}' || open >= end) {
        respond_error(c, 400, "bad_request", "body must be a JSON object");
        return -1;
    }
    int empty = first == end - 1;
    size_t len = end - 1 + (empty ? 0 : 1) + sizeof "\"" MS_OPID_FIELD "\":\"\"}"
                 - 1 + n;
    if (len > c->h->gw.max_message) {
        respond_error(c, 413, "too_large", "body and Idempotency-Key are "
                      "larger than %zu bytes", c->h->gw.max_message);
        return -1;
    }
    char *b = malloc(len + 1);
    if (b == NULL) {
        respond_node_error(c, MS_ENOMEM);
        return -1;
    }
    memcpy(b, c->body, end - 1);
    int w = snprintf(b + end - 1, len + 2 - end, "%s\"" MS_OPID_FIELD
                     "\":\"%.*s\"}", empty ? "" : ",", (int)n, c->opid);
    (void)w;
    free(c->body);
    c->body = b;
    c->body_len = c->body_cap = len;
    return 0;
}

/*
 * POST /v1/entities/{type}/{id}/{action}: `seg` is "{type}/{id}/{action}",
 * still percent-encoded, inside c->url (decoded in place).
 */
static void post_entity(struct conn *c, char *seg, size_t len,
                        const char *query, size_t qlen)
{
    const struct ms_gateway *gw = &c->h->gw;
    void *node = gw->data;
    char *type, *id, *action, *slash, reason[256];
    size_t tlen, idlen, alen;
    uint64_t timeout_ms = 0;
    int t, rc;

    type = seg;
    slash = memchr(type, '/', len);
    if (slash == NULL)
        goto not_found;
    tlen = (size_t)(slash - type);
    id = slash + 1;
    slash = memchr(id, '/', len - tlen - 1);
    if (slash == NULL)
        goto not_found;
    idlen = (size_t)(slash - id);
    action = slash + 1;
    alen = len - tlen - idlen - 2;
    if (memchr(action, '/', alen) != NULL ||
        !(streq(action, alen, "tell") || streq(action, alen, "ask") ||
          streq(action, alen, "stop") || streq(action, alen, "activate") ||
          streq(action, alen, "owner")))
        goto not_found;
    int owner_q = streq(action, alen, "owner");
    int m = c->parser.method;
    if (owner_q ? m != HTTP_GET && m != HTTP_HEAD : m != HTTP_POST) {
        not_allowed(c, owner_q ? "GET" : "POST");
        return;
    }

    if (pct_decode(type, &tlen) != 0 || pct_decode(id, &idlen) != 0) {
        respond_error(c, 400, "bad_request", "bad percent-escape in path");
        return;
    }
    if (idlen == 0 || idlen > ID_MAX) {
        respond_error(c, 400, "bad_request",
                      "entity id must be 1 to %d bytes long", ID_MAX);
        return;
    }
    t = gw->type(node, type, tlen);
    if (t < 0) {
        respond_error(c, 404, ms_errname(MS_ENOTYPE),
                      "unknown entity type '%.*s'",
                      (int)(tlen > 100 ? 100 : tlen), type);
        return;
    }

    if (owner_q) {
        char buf[512], *big = NULL;
        uint32_t shard;
        rc = gw->shard_of(node, t, id, idlen, &shard);
        if (rc < 0) {
            respond_node_error(c, rc);
            return;
        }
        size_t n = gw->owner_json(node, t, id, idlen, buf, sizeof buf);
        if (n >= sizeof buf && (big = malloc(n + 1)) != NULL)
            n = gw->owner_json(node, t, id, idlen, big, n + 1);
        else if (n >= sizeof buf)
            n = 0;
        if (n == 0)
            respond_node_error(c, MS_ENOMEM);
        else
            respond(c, 200, JSON, big ? big : buf, n);
        free(big);
        return;
    }
    if (action[0] == 'a' && action[1] == 'c') {
        c->refs++;
        rc = gw->activate(node, t, id, idlen, TIMEOUT_DEFAULT_MS, on_ask, c);
        if (rc < 0) {
            c->refs--;
            respond_node_error(c, rc);
        }
        return;
    }

    if (action[0] == 's') {
        rc = gw->stop(node, t, id, idlen);
        if (rc < 0)
            respond_node_error(c, rc);
        else
            respond(c, 202, JSON, OK_BODY, strlen(OK_BODY));
        return;
    }

    if (action[0] == 'a' && parse_timeout(query, qlen, &timeout_ms) != 0) {
        respond_error(c, 400, ms_errname(MS_EBADTIMEOUT),
                      "timeout must be a number of seconds, > 0 and <= %g",
                      TIMEOUT_MAX_S);
        return;
    }
    reason[0] = '\0';
    rc = gw->check_message(node, c->body, c->body_len, reason,
                           sizeof reason);
    if (rc == MS_EBADJSON) {
        respond_error(c, 400, ms_errname(rc), "body is not valid JSON: %s",
                      reason);
        return;
    }
    if (rc < 0) {
        respond_error(c, err_status(rc), ms_errname(rc), "%s",
                      reason[0] ? reason : "body must be a JSON object");
        return;
    }
    if (add_opid(c) < 0)
        return;

    if (action[0] == 't') {
        rc = gw->tell(node, t, id, idlen, c->body, c->body_len);
        if (rc < 0)
            respond_node_error(c, rc);
        else
            respond(c, 202, JSON, OK_BODY, strlen(OK_BODY));
        return;
    }

    /* The ask's reference keeps `c` alive until on_ask, even if the
     * connection closes first; the body stays until the reply too. */
    c->refs++;
    rc = gw->ask(node, t, id, idlen, c->body, c->body_len, timeout_ms,
                 on_ask, c);
    if (rc < 0) {
        c->refs--;
        respond_node_error(c, rc);
    }
    return;

not_found:
    respond_error(c, 404, "not_found",
                  "no such endpoint; GET / lists them");
}

void ms__http_route(struct conn *c)
{
    struct http_parser_url u;
    char *path;
    const char *query = "";
    size_t plen, qlen = 0;
    /* HEAD: as GET, and respond_v leaves the body out */
    int get = c->parser.method == HTTP_GET || c->parser.method == HTTP_HEAD;

    if (c->url_len > 0 && c->url[0] == '/' &&
        c->parser.method != HTTP_CONNECT) {
        /* origin form, the usual target: the parser checked each of its
         * bytes as it read them, with the state machine that
         * http_parser_parse_url would run again; the path ends at the
         * first '?' or '#', a query is what follows '?' up to '#' (as
         * parse_url splits it, an empty one being none) */
        char *end = c->url + c->url_len;
        char *hash = memchr(c->url, '#', c->url_len);
        char *q = memchr(c->url, '?', (size_t)((hash ? hash : end) - c->url));
        char *pend = q ? q : hash ? hash : end;
        path = c->url;
        plen = (size_t)(pend - c->url);
        if (q && (hash ? hash : end) > q + 1) {
            query = q + 1;
            qlen = (size_t)((hash ? hash : end) - query);
        }
    } else {
        http_parser_url_init(&u);
        if (c->url_len == 0 ||
            http_parser_parse_url(c->url, c->url_len,
                                  c->parser.method == HTTP_CONNECT, &u) != 0 ||
            !(u.field_set & (1 << UF_PATH))) {
            respond_error(c, 400, "bad_request", "malformed request target");
            return;
        }
        path = c->url + u.field_data[UF_PATH].off;
        plen = u.field_data[UF_PATH].len;
        if (u.field_set & (1 << UF_QUERY)) {
            query = c->url + u.field_data[UF_QUERY].off;
            qlen = u.field_data[UF_QUERY].len;
        }
    }

    /* the endpoints a bare GET (or HEAD) answers */
    static const struct {
        const char *path;
        void (*answer)(struct conn *);
    } gets[] = {
        {"/", get_index},           {"/v1/stats", get_stats},
        {"/metrics", get_metrics},  {"/v1/members", get_members},
        {"/v1/health", get_health},
        {"/v1/events", ms__http_get_events}, /* http_events.c */
    };
    if (ms__http_ui_path(path, plen)) { /* the status page: http_ui.c */
        if (get)
            ms__http_ui(c, path, plen);
        else
            not_allowed(c, "GET");
        return;
    }
    for (size_t i = 0; i < sizeof gets / sizeof gets[0]; i++) {
        if (streq(path, plen, gets[i].path)) {
            if (get)
                gets[i].answer(c);
            else
                not_allowed(c, "GET");
            return;
        }
    }

    if (plen > 16 && memcmp(path, "/v1/allocations/", 16) == 0) {
        if (get)
            get_allocations(c, path + 16, plen - 16);
        else
            not_allowed(c, "GET");
    } else if (plen > 11 && memcmp(path, "/v1/leases/", 11) == 0) {
        if (get)
            get_leases(c, path + 11, plen - 11);
        else
            not_allowed(c, "GET");
    } else if (streq(path, plen, "/v1/leave") ||
               streq(path, plen, "/v1/down")) {
        if (c->parser.method == HTTP_POST)
            post_admin(c, path[4] == 'l', query, qlen);
        else
            not_allowed(c, "POST");
    } else if (plen > 9 && memcmp(path, "/v1/move/", 9) == 0) {
        if (c->parser.method == HTTP_POST)
            post_move(c, path + 9, plen - 9);
        else
            not_allowed(c, "POST");
    } else if (plen > 19 &&
               memcmp(path, "/v1/remember/clear/", 19) == 0) {
        if (c->parser.method == HTTP_POST)
            post_remember_clear(c, path + 19, plen - 19);
        else
            not_allowed(c, "POST");
    } else if (plen > 13 && memcmp(path, "/v1/entities/", 13) == 0) {
        if (api_ok(c))
            post_entity(c, path + 13, plen - 13, query, qlen);
    } else {
        respond_error(c, 404, "not_found",
                      "no such endpoint; GET / lists them");
    }
}
