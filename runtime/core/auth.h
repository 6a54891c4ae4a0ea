/*
 * auth.h -- the challenge-response handshake between two nodes (sans-IO).
 *
 * Nodes prove to each other that they know the cluster secret without
 * sending it, with HMAC-SHA256 (OpenSSL libcrypto). The connecting side is
 * the client, the accepting side the server:
 *
 *   client -> HELLO     {"v","cluster","name","uid","addr","nonce"}
 *   server -> CHALLENGE {"v","cluster","name","uid","addr","nonce","mac"}
 *             mac = mac_s = HMAC(secret, transcript("server"))
 *   client -> AUTH      {"mac"}   mac_c = HMAC(secret, transcript("client"))
 *   server -> AUTH_OK   {}
 *
 * Payloads are flat JSON objects: "v" is the protocol version (integer),
 * "uid" 16 hex digits, "nonce" 32 random bytes and "mac" 32 bytes, both as
 * 64 hex digits; the other values are strings of printable ASCII without
 * '"' or '\' (no escapes), at most MS_AUTH_MAX_FIELD bytes. Unknown keys
 * are ignored. The transcript both MACs cover, with every string prefixed
 * by its length (u16 LE) and every integer little-endian, is:
 *
 *   "moonshard-auth " label, version (u8), nonce_c, nonce_s,
 *   client name, server name, client uid (u64), server uid (u64),
 *   cluster, client address, server address
 *
 * so a MAC cannot be replayed in another session (fresh nonces), reflected
 * to the other role (label) or moved to other identities. A server refuses
 * a HELLO that reuses one of the last MS_AUTH_REPLAY_WINDOW client nonces
 * it saw (struct ms_auth_replay, shared by all its connections).
 *
 * A side that refuses builds an AUTH_FAIL frame {"reason": "..."} for the
 * I/O layer to send before it closes, so both ends can log why. Timeouts
 * are the I/O layer's job. The handshake authenticates the peers at
 * connection setup; it does not protect later frames against an active
 * man in the middle (that would need TLS or per-frame MACs).
 */
#ifndef MS_CORE_AUTH_H
#define MS_CORE_AUTH_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "frame.h"

#define MS_AUTH_NONCE 32          /* bytes of a nonce */
#define MS_AUTH_MAX_FIELD 127     /* bytes of cluster, name or address */
#define MS_AUTH_REPLAY_WINDOW 1024
#define MS_AUTH_BUF_SIZE 1024     /* payload buffer that fits any message */
#define MS_AUTH_MAX_PAYLOAD 4096  /* larger handshake payloads are refused */

enum ms_auth_role { MS_AUTH_CLIENT = 1, MS_AUTH_SERVER = 2 };

/* Results of ms_auth_start/ms_auth_on_frame besides negative errors. */
#define MS_AUTH_CONTINUE 1  /* send *out, wait for the next frame */
#define MS_AUTH_DONE 2      /* peer authenticated; send *out if its kind
                               is not 0 */

/* Fills `len` bytes at `out` with cryptographically strong random bytes.
 * Returns 0, or a negative value when no randomness is available. */
typedef int (*ms_auth_random_cb)(void *data, uint8_t *out, size_t len);

/* The nonces a server saw lately; one per listening node. */
struct ms_auth_replay;

struct ms_auth_options {
    enum ms_auth_role role;
    const char *cluster;       /* borrowed during ms_auth_new (copied) */
    const char *name;          /* this node's name, copied */
    uint64_t uid;              /* this node's incarnation */
    const char *address;       /* this node's host:port, copied */
    const uint8_t *secret;     /* cluster secret, copied, wiped on free */
    size_t secret_len;         /* > 0 */
    ms_auth_random_cb random;  /* NULL: OpenSSL's RAND_bytes */
    void *random_data;
    struct ms_auth_replay *replay; /* server: required, borrowed for the
                                      life of the ms_auth */
    unsigned version;          /* 0: MS_PROTO_VERSION (tests, upgrades) */
};

struct ms_auth;

/*
 * Creates the replay memory of a server: a ring of the last
 * MS_AUTH_REPLAY_WINDOW client nonces, kept for the node's lifetime and
 * shared by all its server-side handshakes. Returns NULL when out of
 * memory; the caller frees it with ms_auth_replay_free() after the last
 * ms_auth that uses it.
 */
struct ms_auth_replay *ms_auth_replay_new(void);
void ms_auth_replay_free(struct ms_auth_replay *r);

/*
 * Creates the handshake state of one connection. Every string in `o` is
 * copied and must be 1..MS_AUTH_MAX_FIELD printable ASCII bytes without
 * '"' or '\'. Returns 0 and stores the new object in `*out` (the caller
 * frees it with ms_auth_free()), or MS_EINVAL / MS_ENOMEM with a reason
 * written into `err` (`errlen` bytes, may be 0).
 */
int ms_auth_new(struct ms_auth **out, const struct ms_auth_options *o,
                char *err, size_t errlen);

/* Wipes the copied secret and frees `a`; NULL is a no-op. */
void ms_auth_free(struct ms_auth *a);

/*
 * Client only: builds the HELLO frame into `*out`, whose payload is
 * written into `buf` (caller-owned, `cap` bytes, MS_AUTH_BUF_SIZE is
 * enough); `*out` borrows `buf`. Returns MS_AUTH_CONTINUE, or a negative
 * error (wrong role or state, no randomness, `buf` too small) with
 * ms_auth_reason() set; the handshake has then failed.
 */
int ms_auth_start(struct ms_auth *a, struct ms_frame *out, uint8_t *buf,
                  size_t cap);

/*
 * Takes the peer's next frame `in` (borrowed for this call) and returns:
 *
 *   MS_AUTH_CONTINUE  send *out and wait for the next frame;
 *   MS_AUTH_DONE      the peer is authenticated (accessors below); the
 *                     server sends *out (AUTH_OK), the client sends
 *                     nothing (out->kind == 0);
 *   <0                refused: MS_EINVAL (wrong cluster, version mismatch,
 *                     bad MAC, replayed nonce, unexpected kind or order,
 *                     malformed payload, peer's AUTH_FAIL), MS_E2BIG
 *                     (payload too large, `buf` too small) or MS_ENOMEM;
 *                     ms_auth_reason() tells why. When out->kind is
 *                     MS_FRAME_AUTH_FAIL, send it, then close; when it is
 *                     0 (the peer refused first), just close.
 *
 * `*out` and its payload live in `buf` (caller-owned, `cap` bytes). After
 * DONE or an error, every further call returns MS_EINVAL with out->kind 0
 * and changes nothing: after DONE, frames belong to the transport.
 */
int ms_auth_on_frame(struct ms_auth *a, const struct ms_frame *in,
                     struct ms_frame *out, uint8_t *buf, size_t cap);

/* Why the handshake failed, or "" while it has not; borrowed from `a`. */
const char *ms_auth_reason(const struct ms_auth *a);

/* 1 once the peer is authenticated, else 0. */
int ms_auth_done(const struct ms_auth *a);

/* The authenticated peer's name and address (borrowed from `a`) and uid.
 * Before ms_auth_done() they are NULL, NULL and 0. */
const char *ms_auth_peer_name(const struct ms_auth *a);
const char *ms_auth_peer_address(const struct ms_auth *a);
uint64_t ms_auth_peer_uid(const struct ms_auth *a);

/* 1 when `sa` is a loopback address (127.0.0.0/8, ::1, or 127.x mapped
 * into IPv6): a client on this host. The HTTP gateway answers its admin
 * endpoints only to such clients unless configured otherwise (G8). */
int ms_auth_is_loopback(const struct sockaddr *sa);

#endif
