/*
 * tls.h -- TLS for node links (and the gateway) over memory BIOs.
 *
 * The model: OpenSSL never touches a socket. Each connection has an SSL
 * object between two memory BIOs: the ciphertext libuv reads is fed in
 * (ms_tls_feed), the plaintext comes out (ms_tls_read); plaintext to send
 * goes in (ms_tls_write) and the ciphertext to hand to libuv is taken out
 * (ms_tls_take). The handshake is driven the same way (ms_tls_handshake
 * after each feed). Nothing blocks; the caller owns every buffer and every
 * write to the socket, so its batching and its accounting stay its own.
 *
 * Protocol: TLS 1.3 only (SSL_CTX_set_min_proto_version), no session
 * tickets, no renegotiation (1.3 has none). Node links verify both ways:
 * each side presents its certificate and verifies the other's chain
 * against the cluster's CA (SSL_VERIFY_PEER | FAIL_IF_NO_PEER_CERT);
 * names in the certificates are not checked: the CA is the cluster's own,
 * and every certificate it signed is a member's. The gateway presents its
 * certificate and verifies clients only when a client CA is configured.
 *
 * (The CLI's client side is in runtime/client/httpc.c, on its blocking
 * socket.) A context is checked when it is made, so a node with a bad setting
 * does not start: every file exists and is readable, the key matches the
 * certificate; a node link's certificate verifies against the CA as the
 * peers check it, for both roles a node plays (it dials: TLS client; it
 * accepts: TLS server; so an extended key usage must name both), and a
 * gateway's is within its dates and fit for a server (its `ca` is the
 * clients' and need not have signed it).
 *
 * Limits: one ms_tls_write takes at most MS_TLS_RECORD bytes and makes
 * exactly one TLS record (the caller counts in records); the memory BIOs
 * hold what one read or one flush brings, since the caller drains them
 * at once.
 */
#ifndef MS_IO_TLS_H
#define MS_IO_TLS_H

#include <stddef.h>
#include <sys/types.h>

/* Plaintext bytes of one TLS record, at most (TLS's own maximum). */
#define MS_TLS_RECORD 16384

enum {
    MS_TLS_MUTUAL = 1, /* node links: both sides verify (ca required) */
    MS_TLS_SERVER = 2  /* gateway: a server; clients verified when ca */
};

struct ms_tls_files {
    const char *ca;            /* PEM CA certificate(s); "" or NULL: none */
    const char *cert;          /* PEM certificate (chain) */
    const char *key;           /* PEM private key */
};

struct ms_tls_ctx;
struct ms_tls;

/* Makes a context for `mode` from `files` and checks it (see above).
 * Returns 0 and *out, or a negative MS_E* code with a sentence in err
 * naming the file and what is wrong. */
int ms_tls_ctx_new(struct ms_tls_ctx **out, int mode,
                   const struct ms_tls_files *files, char *err,
                   size_t errlen);
void ms_tls_ctx_free(struct ms_tls_ctx *ctx);

/* A connection's TLS state: `server` 1 for the side that accepted. NULL
 * when out of memory. `host` (client only, may be NULL): the name sent
 * (SNI) and verified. */
struct ms_tls *ms_tls_new(struct ms_tls_ctx *ctx, int server,
                          const char *host);
void ms_tls_free(struct ms_tls *s);

/* Ciphertext from the peer. 0, or MS_ENOMEM. */
int ms_tls_feed(struct ms_tls *s, const void *p, size_t n);
/* Runs the handshake on what was fed: 1 done, 0 it needs more from the
 * peer (and may have output to send), MS_EINVAL refused (ms_tls_reason
 * says why; an alert for the peer may be waiting in the output). */
int ms_tls_handshake(struct ms_tls *s);
/* Plaintext, up to cap bytes: > 0 bytes, 0 nothing more for now,
 * MS_ECANCELED the peer closed (close_notify), MS_EINVAL a TLS error. */
ssize_t ms_tls_read(struct ms_tls *s, void *buf, size_t cap);
/* Encrypts n (1..MS_TLS_RECORD) bytes as one record. 0, or MS_EINVAL. */
int ms_tls_write(struct ms_tls *s, const void *p, size_t n);
/* Ciphertext fed and still in the read BIO (the SSL may hold part of
 * a record besides). */
size_t ms_tls_buffered(struct ms_tls *s);
/* Ciphertext waiting to be sent. */
size_t ms_tls_pending(struct ms_tls *s);
/* Takes up to cap bytes of it; returns how many. */
size_t ms_tls_take(struct ms_tls *s, void *buf, size_t cap);
/* Why the last call failed (certificate verification first). */
const char *ms_tls_reason(const struct ms_tls *s);

#endif
