/*
 * auth.h -- the challenge-response handshake between two nodes (sans-IO).
 *
 * Nodes prove to each other that they know the cluster secret without
 * sending it, with HMAC-SHA256 (OpenSSL libcrypto). The connecting side is
 * the client, the accepting side the server. The client proves first:
 *
 *   client -> HELLO     {"v","name","uid","addr","nonce"}     nonce_c
 *   server -> CHALLENGE {"v","nonce"}                         nonce_s
 *   client -> AUTH      {"mac"}        mac_c = HMAC(secret, T_client)
 *   server    checks mac_c (constant time), and only then:
 *   server -> AUTH_OK   {"name","uid","addr","mac"}
 *                                      mac_s = HMAC(secret, T_server)
 *   client    checks mac_s
 *
 * Why in this order: whoever sends a MAC over a transcript the other side
 * helped choose hands that side something it can test guesses of the
 * secret against, offline, as fast as it can compute HMACs. In protocol
 * version 1 the server sent its MAC first, to anyone who connected. Now
 * the server reveals nothing before the client has proved that it knows
 * the secret: a CHALLENGE carries only the version and a fresh random
 * nonce (no name, no cluster, no MAC), and every refusal a peer can see
 * before it has proved is one of a few fixed texts ("authentication
 * failed", "malformed handshake message", ...). The cluster name is never
 * sent; it is bound into both MACs, so a wrong cluster and a wrong secret
 * look the same to the peer. The local log line says more.
 *
 * What remains: a node's own mac_c goes to the nodes it dials, which are
 * its seeds and the members it learned from authenticated gossip, so only
 * someone who can take the address of one of those (or sit between the
 * nodes) can collect a MAC to guess against. Secrets are at least 16
 * random bytes (the config refuses shorter ones), which puts guessing out
 * of reach anyway; the order above keeps a mere connection from being an
 * oracle.
 *
 * Payloads are flat JSON objects: "v" is the protocol version (integer,
 * MS_AUTH_VERSION), "uid" 16 hex digits, "nonce" 32 random bytes and
 * "mac" 32 bytes, both as 64 hex digits; the other values are strings of
 * printable ASCII without '"' or '\' (no escapes), at most
 * MS_AUTH_MAX_FIELD bytes. Unknown keys are ignored. The transcripts,
 * with every string prefixed by its length (u16 LE) and every integer
 * little-endian, are:
 *
 *   T_client = "moonshard-auth", "client", version (u8), nonce_c, nonce_s,
 *              cluster, client name, client uid (u64), client address
 *   T_server = "moonshard-auth", "server", version (u8), nonce_c, nonce_s,
 *              cluster, client name, client uid (u64), client address,
 *              server name, server uid (u64), server address
 *
 * so a MAC cannot be replayed in another session (fresh nonces from both
 * sides), reflected to the other role (label, and the server's transcript
 * is longer) or moved to other identities or another cluster. A server
 * refuses a HELLO that reuses one of the last MS_AUTH_REPLAY_WINDOW
 * client nonces it saw (struct ms_auth_replay, shared by all its
 * connections), and a client refuses a CHALLENGE that echoes its nonce.
 *
 * A server that refuses builds an AUTH_FAIL frame {"reason": "..."} with
 * the public text, for the I/O layer to send before it closes;
 * ms_auth_reason() has the full local reason for the log. A client that
 * refuses the server's AUTH_OK sends nothing (the server has finished)
 * and just closes. Timeouts are the I/O layer's job. The handshake
 * authenticates the peers at connection setup; it does not protect later
 * frames against an active man in the middle (that would need TLS or
 * per-frame MACs).
 *
 * Version 2 (this one) differs from version 1 in the meaning of every
 * handshake frame; a node of either version refuses the other's HELLO
 * with "protocol version mismatch". The frame header's version
 * (MS_PROTO_VERSION) did not change.
 */
#ifndef MS_CORE_AUTH_H
#define MS_CORE_AUTH_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "frame.h"

#define MS_AUTH_VERSION 2         /* handshake protocol version */
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
    const char *cluster;       /* copied; bound into the MACs, never sent */
    const char *name;          /* this node's name, copied */
    uint64_t uid;              /* this node's incarnation */
    const char *address;       /* this node's host:port, copied */
    const uint8_t *secret;     /* cluster secret, copied, wiped on free */
    size_t secret_len;         /* > 0 */
    ms_auth_random_cb random;  /* NULL: OpenSSL's RAND_bytes */
    void *random_data;
    struct ms_auth_replay *replay; /* server: required, borrowed for the
                                      life of the ms_auth */
    unsigned version;          /* 0: MS_AUTH_VERSION (tests, upgrades) */
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
 *   <0                refused: MS_EINVAL (version mismatch, bad MAC, wrong
 *                     cluster, replayed or reflected nonce, unexpected
 *                     kind or order, malformed payload, peer's
 *                     AUTH_FAIL), MS_EBADJSON (payload not a flat JSON
 *                     object), MS_E2BIG (payload too large, `buf` too
 *                     small) or MS_ENOMEM; ms_auth_reason() tells why,
 *                     for the local log. When out->kind is
 *                     MS_FRAME_AUTH_FAIL, send it, then close; when it is
 *                     0 (the peer refused first, or the client refuses
 *                     the server's AUTH_OK), just close. An AUTH_FAIL
 *                     carries only fixed texts that name nothing of this
 *                     node (no cluster, name or address).
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
