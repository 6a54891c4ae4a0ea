/* The handshake (protocol version 2, the client proves first): success,
 * every refusal and what it tells the peer, replays, reflection and
 * order. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>

#include "../../runtime/core/auth.h"
#include "check.h"

static const uint8_t SECRET[] = "correct horse battery staple";
static const uint8_t OTHER[] = "not the cluster secret";

/* A deterministic random source: each instance counts from its seed. */
struct prng {
    uint64_t s;
    int fail;
};

static int prng_bytes(void *data, uint8_t *out, size_t len)
{
    struct prng *p = data;
    if (p->fail)
        return -1;
    for (size_t i = 0; i < len; i++) {
        p->s = p->s * 6364136223846793005ull + 1442695040888963407ull;
        out[i] = (uint8_t)(p->s >> 56);
    }
    return 0;
}

/* One side of a connection: its handshake and its payload buffer. */
struct side {
    struct ms_auth *a;
    struct prng rng;
    uint8_t buf[MS_AUTH_BUF_SIZE];
    struct ms_frame out;
};

static struct ms_auth_replay *replay;

static void make(struct side *s, enum ms_auth_role role, const char *name,
                 uint64_t uid, const uint8_t *secret, const char *cluster,
                 unsigned version)
{
    /* every instance draws different nonces, as real ones do */
    static uint64_t seeds;
    struct ms_auth_options o = {0};
    char err[200];
    memset(s, 0, sizeof *s);
    s->rng.s = ++seeds;
    o.role = role;
    o.cluster = cluster;
    o.name = name;
    o.uid = uid;
    o.address = role == MS_AUTH_CLIENT ? "127.0.0.1:7002" : "127.0.0.1:7001";
    o.secret = secret;
    o.secret_len = strlen((const char *)secret);
    o.random = prng_bytes;
    o.random_data = &s->rng;
    o.replay = role == MS_AUTH_SERVER ? replay : NULL;
    o.version = version;
    CHECK(ms_auth_new(&s->a, &o, err, sizeof err) == 0);
}

static void client(struct side *s, const uint8_t *secret)
{
    make(s, MS_AUTH_CLIENT, "node-b", 0xB0B0000000000002ull, secret, "prod",
         0);
}

static void server(struct side *s, const uint8_t *secret)
{
    make(s, MS_AUTH_SERVER, "node-a", 0xA0A0000000000001ull, secret, "prod",
         0);
}

/* Sends `f` through the real codec: encode, then decode in two chunks.
 * The result borrows a static wire buffer until the next call. */
static struct ms_frame wire(const struct ms_frame *f)
{
    static uint8_t bytes[2 * MS_AUTH_BUF_SIZE];
    struct ms_frame_decoder d;
    struct ms_frame got = {0};
    size_t len = 0, used;
    CHECK(ms_frame_encode(f, bytes, sizeof bytes, &len) == 0);
    ms_frame_decoder_init(&d, MS_AUTH_MAX_PAYLOAD,
                          MS_FRAME_HEADER + MS_AUTH_MAX_PAYLOAD);
    CHECK(ms_frame_feed(&d, bytes, 7, &used, &got) == 0);
    CHECK(ms_frame_feed(&d, bytes + 7, len - 7, &used, &got) == 1);
    /* keep the payload valid after the decoder is gone */
    static uint8_t keep[2 * MS_AUTH_BUF_SIZE];
    memcpy(keep, got.payload, got.payload_len);
    got.payload = (const char *)keep;
    ms_frame_decoder_free(&d);
    return got;
}

/* `to` handles the frame `from` last produced. */
static int deliver(struct side *from, struct side *to)
{
    struct ms_frame in = wire(&from->out);
    return ms_auth_on_frame(to->a, &in, &to->out, to->buf, sizeof to->buf);
}

static int has(const char *s, const char *needle)
{
    if (strstr(s, needle))
        return 1;
    fprintf(stderr, "  reason \"%s\" lacks \"%s\"\n", s, needle);
    return 0;
}

static void drop(struct side *c, struct side *s)
{
    ms_auth_free(c->a);
    ms_auth_free(s->a);
}

/* Feeds a frame of `kind` with `payload` to `x`; returns the result. */
static int feed(struct side *x, int kind, const char *payload)
{
    struct ms_frame f = {0};
    f.kind = (uint8_t)kind;
    f.payload = payload;
    f.payload_len = strlen(payload);
    return ms_auth_on_frame(x->a, &f, &x->out, x->buf, sizeof x->buf);
}

/* 1 when none of this node's secrets-adjacent facts is in `payload`:
 * the server's name, address, uid, the cluster name, a "mac" member. */
static int reveals_nothing(const struct ms_frame *f)
{
    const char *bad[] = {"node-a", "7001", "a0a0", "prod", "staging",
                         "\"mac\"", "\"name\"", "\"addr\"", "\"uid\"",
                         "\"cluster\""};
    char text[MS_AUTH_BUF_SIZE + 1];
    snprintf(text, sizeof text, "%.*s", (int)f->payload_len, f->payload);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        if (strstr(text, bad[i])) {
            fprintf(stderr, "  \"%s\" reveals \"%s\"\n", text, bad[i]);
            return 0;
        }
    return 1;
}

/* The members of a CHALLENGE: exactly the version and a nonce. */
static int is_bare_challenge(const struct ms_frame *f)
{
    return f->kind == MS_FRAME_CHALLENGE && reveals_nothing(f) &&
           f->payload_len == strlen("{\"v\":2,\"nonce\":\"\"}") + 64 &&
           memcmp(f->payload, "{\"v\":2,\"nonce\":\"", 16) == 0;
}

static void test_handshake(void)
{
    struct side c, s;
    client(&c, SECRET);
    server(&s, SECRET);
    CHECK(ms_auth_peer_name(c.a) == NULL && ms_auth_peer_uid(s.a) == 0);
    CHECK(ms_auth_start(c.a, &c.out, c.buf, sizeof c.buf) ==
          MS_AUTH_CONTINUE);
    CHECK(c.out.kind == MS_FRAME_HELLO);
    CHECK(has(c.out.payload, "\"v\":2,\"name\":\"node-b\""));
    CHECK(!strstr(c.out.payload, "prod")); /* the cluster is never sent */
    CHECK(deliver(&c, &s) == MS_AUTH_CONTINUE);
    /* the server answers with a nonce and nothing about itself */
    CHECK(is_bare_challenge(&s.out));
    CHECK(!ms_auth_done(s.a));
    CHECK(deliver(&s, &c) == MS_AUTH_CONTINUE);
    CHECK(c.out.kind == MS_FRAME_AUTH);
    CHECK(has(c.out.payload, "{\"mac\":\""));
    CHECK(deliver(&c, &s) == MS_AUTH_DONE);
    CHECK(s.out.kind == MS_FRAME_AUTH_OK);
    CHECK(has(s.out.payload, "\"name\":\"node-a\",\"uid\":\"a0a0000000000001\""
                             ",\"addr\":\"127.0.0.1:7001\",\"mac\":\""));
    CHECK(ms_auth_done(s.a) && !ms_auth_done(c.a));
    CHECK(deliver(&s, &c) == MS_AUTH_DONE);
    CHECK(c.out.kind == 0);
    CHECK(ms_auth_done(c.a));
    CHECK(strcmp(ms_auth_peer_name(c.a), "node-a") == 0);
    CHECK(strcmp(ms_auth_peer_address(c.a), "127.0.0.1:7001") == 0);
    CHECK(ms_auth_peer_uid(c.a) == 0xA0A0000000000001ull);
    CHECK(strcmp(ms_auth_peer_name(s.a), "node-b") == 0);
    CHECK(strcmp(ms_auth_peer_address(s.a), "127.0.0.1:7002") == 0);
    CHECK(ms_auth_peer_uid(s.a) == 0xB0B0000000000002ull);
    CHECK(strcmp(ms_auth_reason(c.a), "") == 0);
    /* the secret never crosses the wire */
    CHECK(strstr(s.out.payload, "horse") == NULL);
    /* after DONE the handshake takes no more frames, and stays done */
    struct ms_frame hb = {0};
    hb.kind = MS_FRAME_HEARTBEAT;
    CHECK(ms_auth_on_frame(s.a, &hb, &s.out, s.buf, sizeof s.buf) ==
          MS_EINVAL);
    CHECK(ms_auth_done(s.a) && s.out.kind == 0);
    drop(&c, &s);
}

/* Production randomness (RAND_bytes) and a payload check on the way. */
static void test_default_random(void)
{
    struct side c, s;
    struct ms_auth_options o = {0};
    client(&c, SECRET);
    server(&s, SECRET);
    ms_auth_free(c.a);
    o.role = MS_AUTH_CLIENT;
    o.cluster = "prod", o.name = "node-c", o.address = "10.0.0.3:7001";
    o.uid = 3, o.secret = SECRET, o.secret_len = sizeof SECRET - 1;
    CHECK(ms_auth_new(&c.a, &o, NULL, 0) == 0);
    CHECK(ms_auth_start(c.a, &c.out, c.buf, sizeof c.buf) ==
          MS_AUTH_CONTINUE);
    CHECK(deliver(&c, &s) == MS_AUTH_CONTINUE);
    CHECK(deliver(&s, &c) == MS_AUTH_CONTINUE);
    CHECK(deliver(&c, &s) == MS_AUTH_DONE);
    CHECK(deliver(&s, &c) == MS_AUTH_DONE);
    CHECK(ms_auth_peer_uid(s.a) == 3);
    drop(&c, &s);
}

/*
 * The server refused with the public text `pub` (and its local reason
 * has `local`); its AUTH_FAIL names nothing of the server or the
 * cluster; the client reports the public text and sends nothing back.
 */
static void check_refused(struct side *s, struct side *c, int rc,
                          const char *pub, const char *local)
{
    CHECK(rc == MS_EINVAL || rc == MS_EBADJSON || rc == MS_E2BIG);
    CHECK(has(ms_auth_reason(s->a), local));
    CHECK(s->out.kind == MS_FRAME_AUTH_FAIL);
    CHECK(reveals_nothing(&s->out));
    char want[200];
    snprintf(want, sizeof want, "{\"reason\":\"%s\"}", pub);
    CHECK(s->out.payload_len == strlen(want) &&
          memcmp(s->out.payload, want, strlen(want)) == 0);
    CHECK(!ms_auth_done(s->a));
    CHECK(ms_auth_peer_name(s->a) == NULL);
    if (c) {
        CHECK(deliver(s, c) == MS_EINVAL);
        CHECK(c->out.kind == 0); /* no answer to a refusal */
        CHECK(has(ms_auth_reason(c->a), "peer refused the handshake: "));
        CHECK(has(ms_auth_reason(c->a), pub));
        CHECK(!ms_auth_done(c->a));
    }
}

/* Runs HELLO -> CHALLENGE -> AUTH and returns the server's answer. */
static int to_auth(struct side *c, struct side *s)
{
    CHECK(ms_auth_start(c->a, &c->out, c->buf, sizeof c->buf) > 0);
    CHECK(deliver(c, s) == MS_AUTH_CONTINUE);
    CHECK(is_bare_challenge(&s->out));
    CHECK(deliver(s, c) == MS_AUTH_CONTINUE);
    return deliver(c, s);
}

static void test_wrong_secret(void)
{
    struct side c, s;
    /* a client with another secret: the server refuses its proof, and
     * never sent a MAC of its own */
    client(&c, OTHER);
    server(&s, SECRET);
    check_refused(&s, &c, to_auth(&c, &s), "authentication failed",
                  "bad MAC from a client claiming to be 'node-b' at "
                  "127.0.0.1:7002: wrong cluster secret or cluster name");
    drop(&c, &s);

    /* a server with another secret: it refuses the same way, so neither
     * side learns anything it could test a guess against */
    client(&c, SECRET);
    server(&s, OTHER);
    check_refused(&s, &c, to_auth(&c, &s), "authentication failed",
                  "bad MAC from a client");
    drop(&c, &s);

    /* a client that answers with a made-up MAC */
    client(&c, OTHER);
    server(&s, SECRET);
    CHECK(ms_auth_start(c.a, &c.out, c.buf, sizeof c.buf) > 0);
    CHECK(deliver(&c, &s) == MS_AUTH_CONTINUE);
    struct ms_frame forged = {0};
    forged.kind = MS_FRAME_AUTH;
    forged.payload = "{\"mac\":\"00000000000000000000000000000000"
                     "00000000000000000000000000000000\"}";
    forged.payload_len = strlen(forged.payload);
    c.out = forged;
    check_refused(&s, &c, deliver(&c, &s), "authentication failed",
                  "bad MAC from a client claiming to be 'node-b'");
    drop(&c, &s);
}

/* The client checks the server's proof: an AUTH_OK from someone without
 * the secret (here: one taken from a session under another secret), or
 * one whose identity was changed, is refused, and the client sends
 * nothing back. */
static void test_server_proof(void)
{
    struct side c, s, c2, s2;
    client(&c2, OTHER);
    make(&s2, MS_AUTH_SERVER, "node-a", 0xA0A0000000000001ull, OTHER,
         "prod", 0);
    CHECK(to_auth(&c2, &s2) == MS_AUTH_DONE);
    client(&c, SECRET);
    server(&s, SECRET);
    CHECK(to_auth(&c, &s) == MS_AUTH_DONE);
    CHECK(deliver(&s2, &c) == MS_EINVAL);
    CHECK(c.out.kind == 0);
    CHECK(has(ms_auth_reason(c.a), "bad MAC in AUTH_OK from a server "
                                   "claiming to be 'node-a'"));
    CHECK(!ms_auth_done(c.a) && ms_auth_peer_name(c.a) == NULL);
    drop(&c, &s);
    drop(&c2, &s2);

    /* the right MAC with another name */
    client(&c, SECRET);
    server(&s, SECRET);
    CHECK(to_auth(&c, &s) == MS_AUTH_DONE);
    char patched[MS_AUTH_BUF_SIZE];
    struct ms_frame ok = wire(&s.out);
    memcpy(patched, ok.payload, ok.payload_len);
    CHECK(memcmp(patched, "{\"name\":\"node-a\"", 16) == 0);
    patched[14] = 'z';
    ok.payload = patched;
    CHECK(ms_auth_on_frame(c.a, &ok, &c.out, c.buf, sizeof c.buf) ==
          MS_EINVAL);
    CHECK(has(ms_auth_reason(c.a), "claiming to be 'node-z'"));
    drop(&c, &s);

    /* an AUTH_OK without identity */
    client(&c, SECRET);
    server(&s, SECRET);
    CHECK(to_auth(&c, &s) == MS_AUTH_DONE);
    CHECK(feed(&c, MS_FRAME_AUTH_OK, "{}") == MS_EINVAL);
    CHECK(has(ms_auth_reason(c.a), "malformed AUTH_OK"));
    CHECK(c.out.kind == 0);
    drop(&c, &s);
}

static void test_version_mismatch(void)
{
    struct side c, s;
    /* a node of protocol version 1 */
    make(&c, MS_AUTH_CLIENT, "node-b", 2, SECRET, "prod", 1);
    server(&s, SECRET);
    CHECK(ms_auth_start(c.a, &c.out, c.buf, sizeof c.buf) > 0);
    check_refused(&s, &c, deliver(&c, &s),
                  "protocol version mismatch: peer speaks 1, this node 2",
                  "protocol version mismatch: peer speaks 1, this node 2");
    drop(&c, &s);

    /* a client checks the server's version too */
    client(&c, SECRET);
    make(&s, MS_AUTH_SERVER, "node-a", 1, SECRET, "prod", 3);
    CHECK(ms_auth_start(c.a, &c.out, c.buf, sizeof c.buf) > 0);
    struct ms_frame hello = wire(&c.out);
    char patched[MS_AUTH_BUF_SIZE];
    memcpy(patched, hello.payload, hello.payload_len);
    CHECK(memcmp(patched, "{\"v\":2,", 7) == 0);
    patched[5] = '3';
    hello.payload = patched;
    CHECK(ms_auth_on_frame(s.a, &hello, &s.out, s.buf, sizeof s.buf) ==
          MS_AUTH_CONTINUE);
    CHECK(deliver(&s, &c) == MS_EINVAL);
    CHECK(has(ms_auth_reason(c.a),
              "protocol version mismatch: peer speaks 3, this node 2"));
    CHECK(c.out.kind == MS_FRAME_AUTH_FAIL);
    drop(&c, &s);
}

/* A wrong cluster looks like a wrong secret to the peer: nothing on the
 * wire names a cluster, and the refusal is the same text. */
static void test_wrong_cluster(void)
{
    struct side c, s;
    make(&c, MS_AUTH_CLIENT, "node-b", 2, SECRET, "staging", 0);
    server(&s, SECRET);
    check_refused(&s, &c, to_auth(&c, &s), "authentication failed",
                  "wrong cluster secret or cluster name");
    CHECK(!strstr(ms_auth_reason(c.a), "prod"));
    drop(&c, &s);
}

static void test_replayed_hello(void)
{
    struct side c, s, s2;
    client(&c, SECRET);
    server(&s, SECRET);
    CHECK(ms_auth_start(c.a, &c.out, c.buf, sizeof c.buf) > 0);
    struct ms_frame hello = wire(&c.out);
    char copy[MS_AUTH_BUF_SIZE];
    memcpy(copy, hello.payload, hello.payload_len);
    hello.payload = copy;
    CHECK(deliver(&c, &s) == MS_AUTH_CONTINUE);
    /* the same HELLO on a second connection to the same node */
    server(&s2, SECRET);
    check_refused(&s2, NULL,
                  ms_auth_on_frame(s2.a, &hello, &s2.out, s2.buf,
                                   sizeof s2.buf),
                  "authentication failed",
                  "replayed HELLO (claiming to be 'node-b' at "
                  "127.0.0.1:7002)");
    ms_auth_free(s2.a);
    drop(&c, &s);

    /* the window holds exactly MS_AUTH_REPLAY_WINDOW nonces */
    for (int i = 0; i < MS_AUTH_REPLAY_WINDOW; i++) {
        make(&c, MS_AUTH_CLIENT, "node-b", 2, SECRET, "prod", 0);
        server(&s, SECRET);
        CHECK(ms_auth_start(c.a, &c.out, c.buf, sizeof c.buf) > 0);
        if (i == MS_AUTH_REPLAY_WINDOW - 1) {
            /* the first HELLO is still remembered ... */
            CHECK(ms_auth_on_frame(s.a, &hello, &s.out, s.buf,
                                   sizeof s.buf) == MS_EINVAL);
            ms_auth_free(s.a);
            server(&s, SECRET);
        }
        CHECK(deliver(&c, &s) == MS_AUTH_CONTINUE);
        drop(&c, &s);
    }
    /* ... until 1,024 newer ones pushed it out */
    server(&s, SECRET);
    CHECK(ms_auth_on_frame(s.a, &hello, &s.out, s.buf, sizeof s.buf) ==
          MS_AUTH_CONTINUE);
    ms_auth_free(s.a);

    /* a node with its own memory has not seen it */
    struct ms_auth_replay *mine = ms_auth_replay_new(), *saved = replay;
    replay = mine;
    server(&s, SECRET);
    CHECK(ms_auth_on_frame(s.a, &hello, &s.out, s.buf, sizeof s.buf) ==
          MS_AUTH_CONTINUE);
    ms_auth_free(s.a);
    replay = saved;
    ms_auth_replay_free(mine);
}

static void test_replayed_auth(void)
{
    struct side c, s, e;
    /* a recorded session */
    client(&c, SECRET);
    server(&s, SECRET);
    CHECK(ms_auth_start(c.a, &c.out, c.buf, sizeof c.buf) > 0);
    CHECK(deliver(&c, &s) == MS_AUTH_CONTINUE);
    CHECK(deliver(&s, &c) == MS_AUTH_CONTINUE);
    struct ms_frame old_auth = c.out;
    uint8_t old_buf[MS_AUTH_BUF_SIZE];
    memcpy(old_buf, c.buf, sizeof old_buf);
    old_auth.payload = (const char *)old_buf;
    CHECK(deliver(&c, &s) == MS_AUTH_DONE);
    drop(&c, &s);

    /* an eavesdropper without the secret opens a new session with the
     * same identity and replays the recorded AUTH: nonce_s is fresh */
    make(&e, MS_AUTH_CLIENT, "node-b", 0xB0B0000000000002ull, OTHER, "prod",
         0);
    server(&s, SECRET);
    CHECK(ms_auth_start(e.a, &e.out, e.buf, sizeof e.buf) > 0);
    CHECK(deliver(&e, &s) == MS_AUTH_CONTINUE);
    e.out = old_auth;
    check_refused(&s, &e, deliver(&e, &s), "authentication failed",
                  "bad MAC from a client claiming to be 'node-b'");
    drop(&e, &s);
}

/* A second server that draws the nonce_s the first one drew (its seed),
 * with a replay memory of its own: the same transcript as before. */
static void twin_server(struct side *s, uint64_t seed,
                        struct ms_auth_replay *own)
{
    struct ms_auth_replay *saved = replay;
    replay = own;
    server(s, SECRET);
    replay = saved;
    s->rng.s = seed;
}

/*
 * Reflection: a MAC made for one role is refused in the other, even over
 * the very same nonces and identities. A twin server (same nonce_s)
 * gives an attacker the best case: the server's AUTH_OK MAC from session
 * 1 offered as the client's AUTH MAC in session 2, which is refused,
 * while session 1's real AUTH is accepted there. And a client refuses a
 * CHALLENGE that echoes its own nonce, and its own MAC sent back as the
 * server's.
 */
static void test_reflection(void)
{
    struct side c, s1, s2;
    client(&c, SECRET);
    server(&s1, SECRET);
    uint64_t seed = s1.rng.s;
    CHECK(ms_auth_start(c.a, &c.out, c.buf, sizeof c.buf) > 0);
    char hello[MS_AUTH_BUF_SIZE], auth[MS_AUTH_BUF_SIZE];
    snprintf(hello, sizeof hello, "%.*s", (int)c.out.payload_len,
             c.out.payload);
    CHECK(deliver(&c, &s1) == MS_AUTH_CONTINUE);
    CHECK(deliver(&s1, &c) == MS_AUTH_CONTINUE);
    snprintf(auth, sizeof auth, "%.*s", (int)c.out.payload_len,
             c.out.payload);
    CHECK(deliver(&c, &s1) == MS_AUTH_DONE);
    const char *m = strstr((const char *)s1.buf, "\"mac\":\"");
    CHECK(m != NULL);
    char as_auth[100];
    snprintf(as_auth, sizeof as_auth, "{%.*s}", 7 + 64 + 1, m);
    drop(&c, &s1);

    struct ms_auth_replay *own = ms_auth_replay_new();
    twin_server(&s2, seed, own);
    CHECK(feed(&s2, MS_FRAME_HELLO, hello) == MS_AUTH_CONTINUE);
    CHECK(feed(&s2, MS_FRAME_AUTH, as_auth) == MS_EINVAL);
    CHECK(has(ms_auth_reason(s2.a), "bad MAC from a client"));
    ms_auth_free(s2.a);
    ms_auth_replay_free(own);
    own = ms_auth_replay_new();
    twin_server(&s2, seed, own);
    CHECK(feed(&s2, MS_FRAME_HELLO, hello) == MS_AUTH_CONTINUE);
    CHECK(feed(&s2, MS_FRAME_AUTH, auth) == MS_AUTH_DONE);
    ms_auth_free(s2.a);
    ms_auth_replay_free(own);

    /* a CHALLENGE that echoes the client's nonce */
    client(&c, SECRET);
    CHECK(ms_auth_start(c.a, &c.out, c.buf, sizeof c.buf) > 0);
    const char *n = strstr(c.out.payload, "\"nonce\":\"");
    CHECK(n != NULL);
    char echo[120];
    snprintf(echo, sizeof echo, "{\"v\":2,%.*s}", 9 + 64 + 1, n);
    CHECK(feed(&c, MS_FRAME_CHALLENGE, echo) == MS_EINVAL);
    CHECK(has(ms_auth_reason(c.a), "echoes this client's nonce"));
    ms_auth_free(c.a);

    /* the client's own MAC, with its own or the server's identity, as
     * the server's proof */
    const char *ids[] = {
        "\"name\":\"node-b\",\"uid\":\"b0b0000000000002\","
        "\"addr\":\"127.0.0.1:7002\"",
        "\"name\":\"node-a\",\"uid\":\"a0a0000000000001\","
        "\"addr\":\"127.0.0.1:7001\""};
    for (int i = 0; i < 2; i++) {
        struct side s;
        client(&c, SECRET);
        server(&s, SECRET);
        CHECK(ms_auth_start(c.a, &c.out, c.buf, sizeof c.buf) > 0);
        CHECK(deliver(&c, &s) == MS_AUTH_CONTINUE);
        CHECK(deliver(&s, &c) == MS_AUTH_CONTINUE);
        char back[400];
        const char *mc = strstr(c.out.payload, "\"mac\":\"");
        CHECK(mc != NULL);
        snprintf(back, sizeof back, "{%s,%.*s}", ids[i], 7 + 64 + 1, mc);
        CHECK(feed(&c, MS_FRAME_AUTH_OK, back) == MS_EINVAL);
        CHECK(has(ms_auth_reason(c.a), "bad MAC in AUTH_OK"));
        CHECK(c.out.kind == 0);
        drop(&c, &s);
    }
}

static void test_out_of_order(void)
{
    struct side c, s;
    client(&c, SECRET);
    server(&s, SECRET);
    CHECK(feed(&s, MS_FRAME_AUTH, "{\"mac\":\"00\"}") == MS_EINVAL);
    CHECK(has(ms_auth_reason(s.a),
              "unexpected AUTH frame during the handshake (waiting for "
              "HELLO)"));
    CHECK(s.out.kind == MS_FRAME_AUTH_FAIL);
    CHECK(feed(&s, MS_FRAME_HELLO, "{}") == MS_EINVAL); /* stays failed */
    CHECK(s.out.kind == 0);
    CHECK(has(ms_auth_reason(s.a), "unexpected AUTH frame"));
    drop(&c, &s);

    /* entity traffic before authentication */
    server(&s, SECRET);
    CHECK(feed(&s, MS_FRAME_TELL, "{}") == MS_EINVAL);
    CHECK(has(ms_auth_reason(s.a), "unexpected TELL frame"));
    ms_auth_free(s.a);

    /* a client must start; a server must not */
    client(&c, SECRET);
    server(&s, SECRET);
    CHECK(feed(&c, MS_FRAME_CHALLENGE, "{}") == MS_EINVAL);
    CHECK(has(ms_auth_reason(c.a), "ms_auth_start first"));
    CHECK(ms_auth_start(s.a, &s.out, s.buf, sizeof s.buf) == MS_EINVAL);
    drop(&c, &s);

    /* AUTH_OK before CHALLENGE */
    client(&c, SECRET);
    CHECK(ms_auth_start(c.a, &c.out, c.buf, sizeof c.buf) > 0);
    CHECK(feed(&c, MS_FRAME_AUTH_OK, "{}") == MS_EINVAL);
    CHECK(has(ms_auth_reason(c.a), "unexpected AUTH_OK frame during the "
                                   "handshake (waiting for CHALLENGE)"));
    ms_auth_free(c.a);

    /* a second HELLO instead of AUTH */
    client(&c, SECRET);
    server(&s, SECRET);
    CHECK(ms_auth_start(c.a, &c.out, c.buf, sizeof c.buf) > 0);
    CHECK(deliver(&c, &s) == MS_AUTH_CONTINUE);
    CHECK(deliver(&c, &s) == MS_EINVAL);
    CHECK(has(ms_auth_reason(s.a), "unexpected HELLO frame during the "
                                   "handshake (waiting for AUTH)"));
    drop(&c, &s);

    /* CHALLENGE twice */
    client(&c, SECRET);
    server(&s, SECRET);
    CHECK(ms_auth_start(c.a, &c.out, c.buf, sizeof c.buf) > 0);
    CHECK(deliver(&c, &s) == MS_AUTH_CONTINUE);
    CHECK(deliver(&s, &c) == MS_AUTH_CONTINUE);
    CHECK(deliver(&s, &c) == MS_EINVAL);
    CHECK(has(ms_auth_reason(c.a), "waiting for AUTH_OK"));
    drop(&c, &s);
}

/* A server fed `payload` as HELLO refuses it with `err` and `needle`. */
static void bad_hello(const char *payload, int err, const char *needle)
{
    struct side s;
    server(&s, SECRET);
    CHECK(feed(&s, MS_FRAME_HELLO, payload) == err);
    CHECK(has(ms_auth_reason(s.a), needle));
    CHECK(s.out.kind == MS_FRAME_AUTH_FAIL);
    CHECK(reveals_nothing(&s.out));
    ms_auth_free(s.a);
}

#define N64 "0000000000000000000000000000000000000000000000000000000000000001"

static void test_malformed(void)
{
    bad_hello("", MS_EBADJSON, "malformed HELLO payload");
    bad_hello("{\"v\":1", MS_EBADJSON, "malformed HELLO payload");
    bad_hello("{\"v\":1,\"v\":1}", MS_EBADJSON, "malformed"); /* dup */
    bad_hello("{\"name\":\"a\\\"b\"}", MS_EBADJSON, "malformed");
    bad_hello("{\"v\":1} x", MS_EBADJSON, "malformed");
    bad_hello("{\"v\":1234567890}", MS_EBADJSON, "malformed");
    bad_hello("[1]", MS_EBADJSON, "malformed");
    bad_hello("{\"name\":\"b\"}", MS_EINVAL, "no protocol version");
    bad_hello("{\"v\":2,\"name\":\"\",\"uid\":\"00000000000000FF\","
              "\"addr\":\"x\",\"nonce\":\"" N64 "\"}",
              MS_EINVAL, "bad name, uid, addr or nonce");
    bad_hello("{\"v\":2,\"name\":\"b\",\"uid\":\"01\","
              "\"addr\":\"x\",\"nonce\":\"" N64 "\"}",
              MS_EINVAL, "bad name, uid, addr or nonce");
    bad_hello("{\"v\":2,\"name\":\"b\","
              "\"uid\":\"000000000000000g\",\"addr\":\"x\",\"nonce\":\"" N64
              "\"}", MS_EINVAL, "bad name, uid, addr or nonce");
    bad_hello("{\"v\":2,\"name\":\"b\",\"uid\":\"00000000000000FF\","
              "\"addr\":\"x\",\"nonce\":\"00\"}",
              MS_EINVAL, "bad name, uid, addr or nonce");
    /* too many members */
    bad_hello("{\"a\":1,\"b\":1,\"c\":1,\"d\":1,\"e\":1,\"f\":1,\"g\":1,"
              "\"h\":1,\"i\":1,\"j\":1,\"k\":1,\"l\":1,\"m\":1,\"n\":1,"
              "\"o\":1,\"p\":1,\"q\":1}", MS_EBADJSON, "malformed");
    /* a well-formed one, with an unknown key and spaces, is accepted */
    struct side s;
    server(&s, SECRET);
    CHECK(feed(&s, MS_FRAME_HELLO,
               " { \"v\" : 2 , \"cluster\":\"old\",\"name\":\"b\","
               "\"uid\":\"00000000000000FF\",\"future\":7,\"addr\":\"x\","
               "\"nonce\":\"" N64 "\" } ") == MS_AUTH_CONTINUE);
    ms_auth_free(s.a);

    /* a handshake payload above MS_AUTH_MAX_PAYLOAD */
    static char big[MS_AUTH_MAX_PAYLOAD + 2];
    memset(big, ' ', sizeof big - 1);
    big[0] = '{';
    big[MS_AUTH_MAX_PAYLOAD] = '}';
    bad_hello(big, MS_E2BIG, "HELLO payload of 4097 bytes (limit 4096)");
    big[MS_AUTH_MAX_PAYLOAD] = '\0';
    big[MS_AUTH_MAX_PAYLOAD - 1] = '}';
    bad_hello(big, MS_EINVAL, "no protocol version"); /* 4096: parsed */

    /* a peer's AUTH_FAIL without a reason */
    struct side c;
    client(&c, SECRET);
    CHECK(ms_auth_start(c.a, &c.out, c.buf, sizeof c.buf) > 0);
    CHECK(feed(&c, MS_FRAME_AUTH_FAIL, "nope") == MS_EINVAL);
    CHECK(has(ms_auth_reason(c.a), "(no reason given)"));
    CHECK(c.out.kind == 0);
    ms_auth_free(c.a);
}

static void test_options_and_resources(void)
{
    struct ms_auth *a = NULL;
    struct ms_auth_options o = {0};
    char err[200] = "";
    o.role = MS_AUTH_SERVER;
    o.cluster = "prod", o.name = "n", o.address = "h:1";
    o.secret = SECRET, o.secret_len = 0;
    o.replay = replay;
    CHECK(ms_auth_new(&a, &o, err, sizeof err) == MS_EINVAL && !a);
    CHECK(has(err, "secret"));
    o.secret_len = 4;
    o.replay = NULL;
    CHECK(ms_auth_new(&a, &o, err, sizeof err) == MS_EINVAL);
    CHECK(has(err, "replay"));
    o.replay = replay;
    o.name = "bad\"name";
    CHECK(ms_auth_new(&a, &o, err, sizeof err) == MS_EINVAL);
    CHECK(has(err, "node name"));
    o.name = "n";
    o.cluster = "";
    CHECK(ms_auth_new(&a, &o, err, sizeof err) == MS_EINVAL);
    CHECK(has(err, "cluster name"));
    char longest[MS_AUTH_MAX_FIELD + 2];
    memset(longest, 'x', sizeof longest);
    longest[MS_AUTH_MAX_FIELD + 1] = '\0';
    o.cluster = "prod";
    o.address = longest;
    CHECK(ms_auth_new(&a, &o, err, sizeof err) == MS_EINVAL);
    ms_auth_free(NULL);

    /* fields at their limit fit MS_AUTH_BUF_SIZE through a handshake */
    longest[MS_AUTH_MAX_FIELD] = '\0';
    struct side c, s;
    struct prng r1 = {5, 0}, r2 = {6, 0};
    struct ms_auth_options co = {0}, so = {0};
    co.role = MS_AUTH_CLIENT;
    co.cluster = co.name = co.address = longest;
    co.uid = UINT64_MAX;
    co.secret = SECRET, co.secret_len = sizeof SECRET - 1;
    co.random = prng_bytes, co.random_data = &r1;
    so = co;
    so.role = MS_AUTH_SERVER, so.replay = replay, so.random_data = &r2;
    memset(&c, 0, sizeof c);
    memset(&s, 0, sizeof s);
    CHECK(ms_auth_new(&c.a, &co, err, sizeof err) == 0);
    CHECK(ms_auth_new(&s.a, &so, err, sizeof err) == 0);
    CHECK(ms_auth_start(c.a, &c.out, c.buf, sizeof c.buf) > 0);
    CHECK(deliver(&c, &s) == MS_AUTH_CONTINUE);
    CHECK(deliver(&s, &c) == MS_AUTH_CONTINUE);
    CHECK(deliver(&c, &s) == MS_AUTH_DONE);
    CHECK(ms_auth_peer_uid(s.a) == UINT64_MAX);
    drop(&c, &s);

    /* an output buffer too small, and no randomness */
    client(&c, SECRET);
    CHECK(ms_auth_start(c.a, &c.out, c.buf, 50) == MS_E2BIG);
    CHECK(has(ms_auth_reason(c.a), "too small"));
    ms_auth_free(c.a);
    client(&c, SECRET);
    c.rng.fail = 1;
    CHECK(ms_auth_start(c.a, &c.out, c.buf, sizeof c.buf) == MS_EINVAL);
    CHECK(has(ms_auth_reason(c.a), "random"));
    ms_auth_free(c.a);
}

/* Each address of `list` (of `family`) is loopback or not, as `want`. */
static void check_loopback(int family, const char *const *list, size_t n,
                           int want)
{
    for (size_t i = 0; i < n; i++) {
        struct sockaddr_storage ss;
        memset(&ss, 0, sizeof ss);
        ss.ss_family = (sa_family_t)family;
        void *addr = family == AF_INET
                         ? (void *)&((struct sockaddr_in *)&ss)->sin_addr
                         : (void *)&((struct sockaddr_in6 *)&ss)->sin6_addr;
        CHECK(inet_pton(family, list[i], addr) == 1);
        CHECK(ms_auth_is_loopback((struct sockaddr *)&ss) == want);
    }
}

/* Loopback clients, which the gateway's admin endpoints answer. */
static void test_loopback(void)
{
    const char *yes4[] = {"127.0.0.1", "127.1.2.3", "127.255.255.254"};
    const char *no4[] = {"10.0.0.1", "128.0.0.1", "0.0.0.0", "192.168.1.7",
                         "126.255.255.255"};
    const char *yes6[] = {"::1", "::ffff:127.0.0.1", "::ffff:127.9.9.9"};
    const char *no6[] = {"::", "::2", "fe80::1", "::ffff:10.0.0.1",
                         "2001:db8::1", "::127.0.0.1"};
    check_loopback(AF_INET, yes4, sizeof yes4 / sizeof *yes4, 1);
    check_loopback(AF_INET, no4, sizeof no4 / sizeof *no4, 0);
    check_loopback(AF_INET6, yes6, sizeof yes6 / sizeof *yes6, 1);
    check_loopback(AF_INET6, no6, sizeof no6 / sizeof *no6, 0);
    struct sockaddr other;
    memset(&other, 0, sizeof other);
    other.sa_family = AF_UNIX;
    CHECK(ms_auth_is_loopback(&other) == 0);
    CHECK(ms_auth_is_loopback(NULL) == 0);
}

int main(void)
{
    replay = ms_auth_replay_new();
    CHECK(replay != NULL);
    test_handshake();
    test_loopback();
    test_default_random();
    test_wrong_secret();
    test_server_proof();
    test_version_mismatch();
    test_wrong_cluster();
    test_replayed_hello();
    test_replayed_auth();
    test_reflection();
    test_out_of_order();
    test_malformed();
    test_options_and_resources();
    ms_auth_replay_free(replay);
    CHECK_DONE();
}
