/*
 * auth.c -- the challenge-response handshake of the transport (sans-IO).
 *
 * Protocol and rationale: auth.h. What a peer may see before it proved
 * that it knows the secret is fixed text (PUB_* below); what the local
 * log gets is a->reason.
 */
#include "auth.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "flatjson.h"

#define MAC_LEN 32          /* HMAC-SHA256 */
#define MAX_SECRET 4096
#define MAX_STRING 255      /* longest string value the parser accepts */
#define MAX_FIELDS 16

/* The only texts an AUTH_FAIL carries: they name nothing of this node. */
#define PUB_FAILED "authentication failed"
#define PUB_MALFORMED "malformed handshake message"
#define PUB_TOO_LARGE "handshake message too large"
#define PUB_ORDER "unexpected frame during the handshake"
#define PUB_INTERNAL "handshake failed on this node"

enum state {
    ST_INIT,            /* client: before start; server: wait HELLO */
    ST_HELLO_SENT,      /* client: wait CHALLENGE */
    ST_AUTH_SENT,       /* client: wait AUTH_OK */
    ST_CHALLENGE_SENT,  /* server: wait AUTH */
    ST_DONE,
    ST_FAILED
};

struct ident {
    char name[MS_AUTH_MAX_FIELD + 1];
    char address[MS_AUTH_MAX_FIELD + 1];
    uint64_t uid;
};

struct ms_auth_replay {
    uint8_t nonce[MS_AUTH_REPLAY_WINDOW][MS_AUTH_NONCE];
    uint32_t n;     /* slots filled */
    uint32_t next;  /* slot the next nonce overwrites */
};

struct ms_auth {
    enum ms_auth_role role;
    enum state state;
    unsigned version;
    char cluster[MS_AUTH_MAX_FIELD + 1];
    struct ident self, peer;    /* peer: claimed until the MAC checked */
    size_t secret_len;
    ms_auth_random_cb random;
    void *random_data;
    struct ms_auth_replay *replay; /* borrowed */
    uint8_t nonce_c[MS_AUTH_NONCE], nonce_s[MS_AUTH_NONCE];
    char reason[256];
    uint8_t secret[];        /* secret_len bytes, wiped on free */
};

/* --- replay memory ------------------------------------------------------- */

struct ms_auth_replay *ms_auth_replay_new(void)
{
    return calloc(1, sizeof(struct ms_auth_replay));
}

void ms_auth_replay_free(struct ms_auth_replay *r)
{
    free(r);
}

/* 1 when `nonce` is in the window. Nonces are public: plain memcmp. */
static int replay_seen(const struct ms_auth_replay *r, const uint8_t *nonce)
{
    for (uint32_t i = 0; i < r->n; i++)
        if (memcmp(r->nonce[i], nonce, MS_AUTH_NONCE) == 0)
            return 1;
    return 0;
}

static void replay_add(struct ms_auth_replay *r, const uint8_t *nonce)
{
    memcpy(r->nonce[r->next], nonce, MS_AUTH_NONCE);
    r->next = (r->next + 1) % MS_AUTH_REPLAY_WINDOW;
    if (r->n < MS_AUTH_REPLAY_WINDOW)
        r->n++;
}

/* --- helpers ------------------------------------------------------------- */

/* Printable ASCII without '"' and '\': safe inside a JSON string as is. */
static int safe_char(int c)
{
    return c >= 0x20 && c <= 0x7E && c != '"' && c != '\\';
}

static int safe_string(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (!safe_char((unsigned char)s[i]))
            return 0;
    return 1;
}

static void to_hex(const uint8_t *p, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
    out[2 * n] = '\0';
}

static int hexval(int c)
{
    static const char digits[] = "0123456789abcdef";
    const char *p = c > ' ' ? strchr(digits, c | 0x20) : NULL;
    return p ? (int)(p - digits) : -1;
}

/* Decodes exactly 2n hex digits into n bytes; 0 or -1. */
static int from_hex(const char *s, size_t len, uint8_t *out, size_t n)
{
    if (len != 2 * n)
        return -1;
    for (size_t i = 0; i < n; i++) {
        int hi = hexval((unsigned char)s[2 * i]);
        int lo = hexval((unsigned char)s[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

static int default_random(void *data, uint8_t *out, size_t len)
{
    (void)data;
    return RAND_bytes(out, (int)len) == 1 ? 0 : -1;
}

/* --- messages: strict flat JSON objects -------------------------------- */

/*
 * Accepts {"key": value, ...} where a value is a string without escapes or
 * control characters, of printable ASCII only (at most MAX_STRING bytes),
 * or a non-negative integer of at most 9 digits; at most MAX_FIELDS
 * members, no duplicate keys. This is all the handshake needs, and
 * anything else is refused, so hostile input meets no recursion and no
 * allocation (the core's flat JSON reader, flatjson.h).
 */
struct field {
    const char *key, *str;
    size_t klen, slen;
    int is_num;
    uint32_t num;
};

struct msg {
    struct field f[MAX_FIELDS];
    int n;
};

static int parse(const char *p, size_t len, struct msg *m)
{
    struct ms_fj r;
    struct ms_fj_member x;
    int rc;
    m->n = 0;
    ms_fj_init(&r, p, len, MAX_STRING, MS_FJ_ASCII);
    if (ms_fj_object(&r) != 0)
        return -1;
    while ((rc = ms_fj_next(&r, &x)) == 1) {
        if (m->n == MAX_FIELDS ||
            (x.kind != MS_FJ_STRING && x.kind != MS_FJ_INT))
            return -1;
        for (int k = 0; k < m->n; k++)
            if (m->f[k].klen == x.klen &&
                memcmp(m->f[k].key, x.key, x.klen) == 0)
                return -1;
        struct field *f = &m->f[m->n++];
        memset(f, 0, sizeof *f);
        f->key = x.key;
        f->klen = x.klen;
        if (x.kind == MS_FJ_INT) {
            f->is_num = 1;
            f->num = x.num;
        } else {
            f->str = x.str;
            f->slen = x.slen;
        }
    }
    return rc == 0 && ms_fj_end(&r) == 0 ? 0 : -1;
}

static const struct field *get(const struct msg *m, const char *key)
{
    size_t kl = strlen(key);
    for (int i = 0; i < m->n; i++)
        if (m->f[i].klen == kl && memcmp(m->f[i].key, key, kl) == 0)
            return &m->f[i];
    return NULL;
}


/* --- failure ------------------------------------------------------------- */

/*
 * Fails the handshake. The local reason (for the log) is formatted from
 * `fmt`; with a `buf`, also builds the AUTH_FAIL frame that tells the
 * peer only `pub`, one of the fixed PUB_* texts or a text of the same
 * kind (when `buf` can hold it). Without `buf` (the peer refused first,
 * misuse, or a client refusing AUTH_OK), out->kind is 0.
 */
static int __attribute__((format(printf, 7, 8)))
refuse(struct ms_auth *a, struct ms_frame *out, uint8_t *buf, size_t cap,
       int err, const char *pub, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a->reason, sizeof a->reason, fmt, ap);
    va_end(ap);
    a->state = ST_FAILED;
    memset(out, 0, sizeof *out);
    if (!buf)
        return err;
    int len = snprintf((char *)buf, cap, "{\"reason\":\"%s\"}", pub);
    if (len > 0 && (size_t)len < cap) {
        out->kind = MS_FRAME_AUTH_FAIL;
        out->payload = (const char *)buf;
        out->payload_len = (size_t)len;
    }
    return err;
}

/* --- MACs ---------------------------------------------------------------- */

static void put_str(uint8_t *t, size_t *n, const char *s)
{
    size_t len = strlen(s);
    t[(*n)++] = (uint8_t)len;
    t[(*n)++] = (uint8_t)(len >> 8);
    memcpy(t + *n, s, len);
    *n += len;
}

static void put_u64(uint8_t *t, size_t *n, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        t[(*n)++] = (uint8_t)(v >> (8 * i));
}

static void put_ident(uint8_t *t, size_t *n, const struct ident *id)
{
    put_str(t, n, id->name);
    put_u64(t, n, id->uid);
    put_str(t, n, id->address);
}

/*
 * mac = HMAC-SHA256(secret, T_client) or (server = 1) T_server, as
 * auth.h spells them; 0 or -1.
 */
static int compute_mac(const struct ms_auth *a, int server,
                       uint8_t mac[MAC_LEN])
{
    const struct ident *c = a->role == MS_AUTH_CLIENT ? &a->self : &a->peer;
    const struct ident *s = a->role == MS_AUTH_CLIENT ? &a->peer : &a->self;
    /* 2 labels + version + 2 nonces + 5 strings + 2 uids: < 1024 bytes */
    uint8_t t[1024];
    size_t n = 0;
    put_str(t, &n, "moonshard-auth");
    put_str(t, &n, server ? "server" : "client");
    t[n++] = (uint8_t)a->version;
    memcpy(t + n, a->nonce_c, MS_AUTH_NONCE);
    n += MS_AUTH_NONCE;
    memcpy(t + n, a->nonce_s, MS_AUTH_NONCE);
    n += MS_AUTH_NONCE;
    put_str(t, &n, a->cluster);
    put_ident(t, &n, c);
    if (server)
        put_ident(t, &n, s);
    unsigned int mlen = 0;
    int ok = HMAC(EVP_sha256(), a->secret, (int)a->secret_len, t, n, mac,
                  &mlen) != NULL && mlen == MAC_LEN;
    OPENSSL_cleanse(t, sizeof t);
    return ok ? 0 : -1;
}

/* Checks the hex `mac` a peer sent against its transcript in constant
 * time. */
static int mac_ok(const struct ms_auth *a, int server, const struct field *f)
{
    uint8_t want[MAC_LEN], got[MAC_LEN];
    if (!f || f->is_num || from_hex(f->str, f->slen, got, MAC_LEN) != 0)
        return 0;
    if (compute_mac(a, server, want) != 0)
        return 0;
    int ok = CRYPTO_memcmp(want, got, MAC_LEN) == 0;
    OPENSSL_cleanse(want, sizeof want);
    return ok;
}

/* --- lifecycle ----------------------------------------------------------- */

static int copy_field(char *dst, const char *src, const char *what,
                      char *err, size_t errlen)
{
    size_t len = src ? strlen(src) : 0;
    if (len == 0 || len > MS_AUTH_MAX_FIELD || !safe_string(src, len)) {
        if (errlen)
            snprintf(err, errlen,
                     "auth: %s must be 1..%d printable ASCII bytes "
                     "without '\"' or '\\'", what, MS_AUTH_MAX_FIELD);
        return MS_EINVAL;
    }
    memcpy(dst, src, len + 1);
    return 0;
}

int ms_auth_new(struct ms_auth **out, const struct ms_auth_options *o,
                char *err, size_t errlen)
{
    const char *why = NULL;
    struct ms_auth *a = NULL;
    int rc = MS_EINVAL;
    *out = NULL;
    if (o->role != MS_AUTH_CLIENT && o->role != MS_AUTH_SERVER)
        why = "auth: role must be MS_AUTH_CLIENT or MS_AUTH_SERVER";
    else if (!o->secret || o->secret_len == 0 || o->secret_len > MAX_SECRET)
        why = "auth: the cluster secret must be 1..4096 bytes";
    else if (o->role == MS_AUTH_SERVER && !o->replay)
        why = "auth: a server needs its replay memory";
    else if (o->version > 255)
        why = "auth: version must fit in a byte";
    else if (!(a = calloc(1, sizeof *a + o->secret_len)))
        why = "auth: out of memory", rc = MS_ENOMEM;
    if (why) {
        if (errlen)
            snprintf(err, errlen, "%s", why);
        return rc;
    }
    if ((rc = copy_field(a->cluster, o->cluster, "cluster name", err,
                         errlen)) != 0 ||
        (rc = copy_field(a->self.name, o->name, "node name", err,
                         errlen)) != 0 ||
        (rc = copy_field(a->self.address, o->address, "node address", err,
                         errlen)) != 0) {
        free(a);
        return rc;
    }
    memcpy(a->secret, o->secret, o->secret_len);
    a->secret_len = o->secret_len;
    a->role = o->role;
    a->state = ST_INIT;
    a->version = o->version ? o->version : MS_AUTH_VERSION;
    a->self.uid = o->uid;
    a->random = o->random ? o->random : default_random;
    a->random_data = o->random_data;
    a->replay = o->replay;
    *out = a;
    return 0;
}

void ms_auth_free(struct ms_auth *a)
{
    if (!a)
        return;
    OPENSSL_cleanse(a, sizeof *a + a->secret_len);
    free(a);
}

const char *ms_auth_reason(const struct ms_auth *a)
{
    return a->reason;
}

int ms_auth_done(const struct ms_auth *a)
{
    return a->state == ST_DONE;
}

const char *ms_auth_peer_name(const struct ms_auth *a)
{
    return a->state == ST_DONE ? a->peer.name : NULL;
}

const char *ms_auth_peer_address(const struct ms_auth *a)
{
    return a->state == ST_DONE ? a->peer.address : NULL;
}

uint64_t ms_auth_peer_uid(const struct ms_auth *a)
{
    return a->state == ST_DONE ? a->peer.uid : 0;
}

/* --- messages ------------------------------------------------------------ */

/* Points `out` at the `len` payload bytes written into `buf`. */
static int emit(struct ms_auth *a, struct ms_frame *out, uint8_t *buf,
                size_t cap, int kind, int len)
{
    if (len < 0 || (size_t)len >= cap)
        return refuse(a, out, NULL, 0, MS_E2BIG, PUB_INTERNAL,
                      "auth: output buffer of %zu bytes is too small", cap);
    memset(out, 0, sizeof *out);
    out->kind = (uint8_t)kind;
    out->payload = (const char *)buf;
    out->payload_len = (size_t)len;
    return 0;
}

/* The identity members of HELLO and AUTH_OK: "name","uid","addr". */
static int put_ident_json(const struct ms_auth *a, char *p, size_t cap)
{
    return snprintf(p, cap, "\"name\":\"%s\",\"uid\":\"%016llx\","
                    "\"addr\":\"%s\"", a->self.name,
                    (unsigned long long)a->self.uid, a->self.address);
}

/*
 * Reads the peer's claimed identity ("name", "uid", "addr") into a->peer.
 * Returns 0 or -1 (missing or malformed member).
 */
static int take_ident(struct ms_auth *a, const struct msg *m)
{
    const struct field *nm = get(m, "name"), *uid = get(m, "uid"),
                       *ad = get(m, "addr");
    const struct field *s[2] = {nm, ad};
    for (int i = 0; i < 2; i++)
        if (!s[i] || s[i]->is_num || s[i]->slen == 0 ||
            s[i]->slen > MS_AUTH_MAX_FIELD)
            return -1;
    uint8_t u[8];
    if (!uid || uid->is_num || from_hex(uid->str, uid->slen, u, 8) != 0)
        return -1;
    memcpy(a->peer.name, nm->str, nm->slen);
    a->peer.name[nm->slen] = '\0';
    memcpy(a->peer.address, ad->str, ad->slen);
    a->peer.address[ad->slen] = '\0';
    a->peer.uid = 0;
    for (int i = 0; i < 8; i++)
        a->peer.uid = a->peer.uid << 8 | u[i];
    return 0;
}

/* Reads "nonce" (64 hex digits) into `nonce`; 0 or -1. */
static int take_nonce(const struct msg *m, uint8_t nonce[MS_AUTH_NONCE])
{
    const struct field *no = get(m, "nonce");
    return no && !no->is_num &&
                   from_hex(no->str, no->slen, nonce, MS_AUTH_NONCE) == 0
               ? 0
               : -1;
}

/* Checks "v" of a HELLO or CHALLENGE; 0 or refuses. The text tells both
 * versions: they are public, and an operator upgrading needs them. */
static int check_version(struct ms_auth *a, const struct msg *m,
                         struct ms_frame *out, uint8_t *buf, size_t cap,
                         const char *what)
{
    const struct field *v = get(m, "v");
    if (!v || !v->is_num)
        return refuse(a, out, buf, cap, MS_EINVAL, PUB_MALFORMED,
                      "malformed %s: no protocol version", what);
    if (v->num == a->version)
        return 0;
    char pub[100];
    snprintf(pub, sizeof pub, "protocol version mismatch: peer speaks %u, "
             "this node %u", v->num, a->version);
    return refuse(a, out, buf, cap, MS_EINVAL, pub, "%s", pub);
}

int ms_auth_start(struct ms_auth *a, struct ms_frame *out, uint8_t *buf,
                  size_t cap)
{
    if (a->role != MS_AUTH_CLIENT || a->state != ST_INIT)
        return refuse(a, out, NULL, 0, MS_EINVAL, PUB_INTERNAL,
                      "auth: ms_auth_start is the client's first step");
    if (a->random(a->random_data, a->nonce_c, MS_AUTH_NONCE) != 0)
        return refuse(a, out, NULL, 0, MS_EINVAL, PUB_INTERNAL,
                      "auth: no random bytes for a nonce");
    char nhex[2 * MS_AUTH_NONCE + 1], ident[3 * MS_AUTH_MAX_FIELD];
    to_hex(a->nonce_c, MS_AUTH_NONCE, nhex);
    put_ident_json(a, ident, sizeof ident);
    int rc = emit(a, out, buf, cap, MS_FRAME_HELLO,
                  snprintf((char *)buf, cap, "{\"v\":%u,%s,\"nonce\":\"%s\"}",
                           a->version, ident, nhex));
    if (rc != 0)
        return rc;
    a->state = ST_HELLO_SENT;
    return MS_AUTH_CONTINUE;
}

/* Server: HELLO -> CHALLENGE, which tells nothing about this node. */
static int on_hello(struct ms_auth *a, const struct msg *m,
                    struct ms_frame *out, uint8_t *buf, size_t cap)
{
    int rc = check_version(a, m, out, buf, cap, "HELLO");
    if (rc != 0)
        return rc;
    if (take_ident(a, m) != 0 || take_nonce(m, a->nonce_c) != 0)
        return refuse(a, out, buf, cap, MS_EINVAL, PUB_MALFORMED,
                      "malformed HELLO: bad name, uid, addr or nonce");
    if (replay_seen(a->replay, a->nonce_c))
        return refuse(a, out, buf, cap, MS_EINVAL, PUB_FAILED,
                      "replayed HELLO (claiming to be '%s' at %s): its "
                      "nonce was already used", a->peer.name,
                      a->peer.address);
    replay_add(a->replay, a->nonce_c);
    if (a->random(a->random_data, a->nonce_s, MS_AUTH_NONCE) != 0)
        return refuse(a, out, buf, cap, MS_EINVAL, PUB_INTERNAL,
                      "auth: no random bytes for a nonce");
    char nhex[2 * MS_AUTH_NONCE + 1];
    to_hex(a->nonce_s, MS_AUTH_NONCE, nhex);
    rc = emit(a, out, buf, cap, MS_FRAME_CHALLENGE,
              snprintf((char *)buf, cap, "{\"v\":%u,\"nonce\":\"%s\"}",
                       a->version, nhex));
    if (rc != 0)
        return rc;
    a->state = ST_CHALLENGE_SENT;
    return MS_AUTH_CONTINUE;
}

/* Client: CHALLENGE -> AUTH, the client's proof. */
static int on_challenge(struct ms_auth *a, const struct msg *m,
                        struct ms_frame *out, uint8_t *buf, size_t cap)
{
    int rc = check_version(a, m, out, buf, cap, "CHALLENGE");
    if (rc != 0)
        return rc;
    if (take_nonce(m, a->nonce_s) != 0)
        return refuse(a, out, buf, cap, MS_EINVAL, PUB_MALFORMED,
                      "malformed CHALLENGE: bad nonce");
    /* a server that echoes our nonce back is probably this node itself
     * or a reflector; the labels would refuse its MAC anyway */
    if (memcmp(a->nonce_s, a->nonce_c, MS_AUTH_NONCE) == 0)
        return refuse(a, out, buf, cap, MS_EINVAL, PUB_FAILED,
                      "the server's CHALLENGE echoes this client's nonce");
    uint8_t mac[MAC_LEN];
    char mhex[2 * MAC_LEN + 1];
    if (compute_mac(a, 0, mac) != 0)
        return refuse(a, out, buf, cap, MS_EINVAL, PUB_INTERNAL,
                      "auth: HMAC failed");
    to_hex(mac, MAC_LEN, mhex);
    OPENSSL_cleanse(mac, sizeof mac);
    rc = emit(a, out, buf, cap, MS_FRAME_AUTH,
              snprintf((char *)buf, cap, "{\"mac\":\"%s\"}", mhex));
    if (rc != 0)
        return rc;
    a->state = ST_AUTH_SENT;
    return MS_AUTH_CONTINUE;
}

/* Server: AUTH -> AUTH_OK, only once the client proved. */
static int on_auth(struct ms_auth *a, const struct msg *m,
                   struct ms_frame *out, uint8_t *buf, size_t cap)
{
    if (!mac_ok(a, 0, get(m, "mac")))
        return refuse(a, out, buf, cap, MS_EINVAL, PUB_FAILED,
                      "bad MAC from a client claiming to be '%s' at %s: "
                      "wrong cluster secret or cluster name, or an AUTH "
                      "replayed from another session", a->peer.name,
                      a->peer.address);
    uint8_t mac[MAC_LEN];
    char mhex[2 * MAC_LEN + 1], ident[3 * MS_AUTH_MAX_FIELD];
    if (compute_mac(a, 1, mac) != 0)
        return refuse(a, out, buf, cap, MS_EINVAL, PUB_INTERNAL,
                      "auth: HMAC failed");
    to_hex(mac, MAC_LEN, mhex);
    OPENSSL_cleanse(mac, sizeof mac);
    put_ident_json(a, ident, sizeof ident);
    int rc = emit(a, out, buf, cap, MS_FRAME_AUTH_OK,
                  snprintf((char *)buf, cap, "{%s,\"mac\":\"%s\"}", ident,
                           mhex));
    if (rc != 0)
        return rc;
    a->state = ST_DONE;
    return MS_AUTH_DONE;
}

/* Client: AUTH_OK, the server's identity and proof. A refusal here sends
 * nothing: the server has finished its part. */
static int on_auth_ok(struct ms_auth *a, const struct msg *m,
                      struct ms_frame *out)
{
    if (take_ident(a, m) != 0)
        return refuse(a, out, NULL, 0, MS_EINVAL, PUB_MALFORMED,
                      "malformed AUTH_OK: bad name, uid or addr");
    if (!mac_ok(a, 1, get(m, "mac")))
        return refuse(a, out, NULL, 0, MS_EINVAL, PUB_FAILED,
                      "bad MAC in AUTH_OK from a server claiming to be "
                      "'%s' at %s", a->peer.name, a->peer.address);
    memset(out, 0, sizeof *out);
    a->state = ST_DONE;
    return MS_AUTH_DONE;
}

int ms_auth_on_frame(struct ms_auth *a, const struct ms_frame *in,
                     struct ms_frame *out, uint8_t *buf, size_t cap)
{
    /* the one kind each waiting state accepts */
    static const uint8_t wants[] = {
        [ST_INIT] = MS_FRAME_HELLO, [ST_HELLO_SENT] = MS_FRAME_CHALLENGE,
        [ST_AUTH_SENT] = MS_FRAME_AUTH_OK,
        [ST_CHALLENGE_SENT] = MS_FRAME_AUTH};

    if (a->state == ST_DONE || a->state == ST_FAILED) {
        /* keep the state and the first reason: they are what to log */
        memset(out, 0, sizeof *out);
        return MS_EINVAL;
    }
    if (a->role == MS_AUTH_CLIENT && a->state == ST_INIT)
        return refuse(a, out, NULL, 0, MS_EINVAL, PUB_INTERNAL,
                      "auth: the client must call ms_auth_start first");
    /* a client answers nothing once it sent AUTH: see on_auth_ok */
    uint8_t *fbuf = a->state == ST_AUTH_SENT ? NULL : buf;
    struct msg m;
    if (in->payload_len > MS_AUTH_MAX_PAYLOAD)
        return refuse(a, out, fbuf, cap, MS_E2BIG, PUB_TOO_LARGE,
                      "%s payload of %zu bytes (limit %d)",
                      ms_frame_kind_name(in->kind), in->payload_len,
                      MS_AUTH_MAX_PAYLOAD);
    int parsed = parse(in->payload, in->payload_len, &m) == 0;
    if (in->kind == MS_FRAME_AUTH_FAIL) {
        const struct field *r = parsed ? get(&m, "reason") : NULL;
        if (!r || r->is_num)
            return refuse(a, out, NULL, 0, MS_EINVAL, PUB_FAILED,
                          "peer refused the handshake (no reason given)");
        return refuse(a, out, NULL, 0, MS_EINVAL, PUB_FAILED,
                      "peer refused the handshake: %.*s",
                      (int)r->slen, r->str);
    }
    if (in->kind != wants[a->state])
        return refuse(a, out, fbuf, cap, MS_EINVAL, PUB_ORDER,
                      "unexpected %s frame during the handshake "
                      "(waiting for %s)", ms_frame_kind_name(in->kind),
                      ms_frame_kind_name(wants[a->state]));
    if (!parsed)
        return refuse(a, out, fbuf, cap, MS_EBADJSON, PUB_MALFORMED,
                      "malformed %s payload", ms_frame_kind_name(in->kind));

    switch (a->state) {
    case ST_INIT: return on_hello(a, &m, out, buf, cap);
    case ST_HELLO_SENT: return on_challenge(a, &m, out, buf, cap);
    case ST_CHALLENGE_SENT: return on_auth(a, &m, out, buf, cap);
    default: return on_auth_ok(a, &m, out); /* ST_AUTH_SENT */
    }
}

int ms_auth_is_loopback(const struct sockaddr *sa)
{
    if (sa == NULL)
        return 0;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        const uint8_t *b = in6->sin6_addr.s6_addr;
        static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0,
                                           0, 0, 0, 0, 0xff, 0xff};
        if (memcmp(b, mapped, 12) == 0)
            return b[12] == 127;
        return IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
    }
    return 0;
}
