/*
 * tls.c -- TLS over memory BIOs (tls.h): OpenSSL drives the protocol,
 * the caller moves the bytes.
 *
 * Each connection holds an SSL with a read BIO (ciphertext fed in) and a
 * write BIO (ciphertext to take out), both BIO_s_mem. Every error is
 * turned into a sentence once, when it happens, and kept in the
 * connection (ms_tls_reason), so the caller's log says why a peer was
 * refused: a certificate verification error first, else the first entry
 * of OpenSSL's error queue. The queue is cleared before each call, so an
 * old error never explains a new failure.
 */
#include "tls.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include "../core/errors.h"

struct ms_tls_ctx {
    SSL_CTX *ssl;
    int mode;                  /* MS_TLS_MUTUAL or MS_TLS_SERVER */
};

struct ms_tls {
    SSL *ssl;
    BIO *in, *out;             /* owned by ssl */
    char reason[256];
};

/* The first error of OpenSSL's queue as a sentence ("" when empty). */
static void queue_reason(char *buf, size_t len)
{
    unsigned long e = ERR_get_error();
    if (!e) {
        snprintf(buf, len, "unknown TLS error");
        return;
    }
    const char *r = ERR_reason_error_string(e);
    if (r)
        snprintf(buf, len, "%s", r);
    else
        ERR_error_string_n(e, buf, len);
    ERR_clear_error();
}

/* Checks that `path` names a readable file, in words. */
static int readable(const char *what, const char *path, char *err,
                    size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s %s: %s", what, path, strerror(errno));
        return MS_EINVAL;
    }
    fclose(f);
    return 0;
}

/* Verifies the context's own certificate against its CA store as a
 * peer does when `x` is presented in `role` ("ssl_client": the side that
 * dials, "ssl_server": the side that accepts): the chain, the dates, and
 * the extended key usage of that role. A node whose certificate a peer
 * would refuse is refused at start instead. */
static int verify_own(SSL_CTX *ssl, const char *cert, const char *role,
                      char *err, size_t errlen)
{
    X509 *x = SSL_CTX_get0_certificate(ssl);
    X509_STORE_CTX *vc = X509_STORE_CTX_new();
    if (!x || !vc) {
        X509_STORE_CTX_free(vc);
        snprintf(err, errlen, "out of memory checking %s", cert);
        return MS_ENOMEM;
    }
    STACK_OF(X509) *chain = NULL;
    SSL_CTX_get0_chain_certs(ssl, &chain);
    int ok = X509_STORE_CTX_init(vc, SSL_CTX_get_cert_store(ssl), x, chain)
             == 1 && X509_STORE_CTX_set_default(vc, role) == 1 &&
             X509_verify_cert(vc) == 1;
    if (!ok)
        snprintf(err, errlen, "certificate %s does not verify against the "
                 "CA as a TLS %s: %s", cert,
                 strcmp(role, "ssl_client") == 0 ? "client" : "server",
                 X509_verify_cert_error_string(X509_STORE_CTX_get_error(vc)));
    X509_STORE_CTX_free(vc);
    ERR_clear_error();
    return ok ? 0 : MS_EINVAL;
}

/* The gateway's certificate, which no CA of ours need have signed (its
 * `ca` is the clients'): within its dates, and usable by a TLS server
 * (its extended key usage, when it has one, names serverAuth). */
static int check_server_cert(SSL_CTX *ssl, const char *cert, char *err,
                             size_t errlen)
{
    X509 *x = SSL_CTX_get0_certificate(ssl);
    if (!x) {
        snprintf(err, errlen, "out of memory checking %s", cert);
        return MS_ENOMEM;
    }
    const char *why = NULL;
    if (X509_cmp_current_time(X509_get0_notAfter(x)) <= 0)
        why = "certificate has expired";
    else if (X509_cmp_current_time(X509_get0_notBefore(x)) >= 0)
        why = "certificate is not yet valid";
    else if (X509_check_purpose(x, X509_PURPOSE_SSL_SERVER, 0) != 1)
        why = "unsupported certificate purpose (no serverAuth)";
    ERR_clear_error();
    if (why)
        snprintf(err, errlen, "certificate %s cannot serve as a TLS "
                 "server: %s", cert, why);
    return why ? MS_EINVAL : 0;
}

int ms_tls_ctx_new(struct ms_tls_ctx **out, int mode,
                   const struct ms_tls_files *files, char *err,
                   size_t errlen)
{
    const char *ca = files->ca && files->ca[0] ? files->ca : NULL;
    if (mode == MS_TLS_MUTUAL && !ca) {
        snprintf(err, errlen, "TLS between nodes needs a CA certificate");
        return MS_EINVAL;
    }
    if (!files->cert || !files->cert[0] || !files->key || !files->key[0]) {
        snprintf(err, errlen, "TLS needs a certificate and its key");
        return MS_EINVAL;
    }
    if ((ca && readable("CA certificate", ca, err, errlen) < 0) ||
        readable("certificate", files->cert, err, errlen) < 0 ||
        readable("private key", files->key, err, errlen) < 0)
        return MS_EINVAL;
    ERR_clear_error();
    struct ms_tls_ctx *c = calloc(1, sizeof *c);
    SSL_CTX *ssl = c ? SSL_CTX_new(TLS_method()) : NULL;
    if (!ssl) {
        free(c);
        snprintf(err, errlen, "out of memory making a TLS context");
        return MS_ENOMEM;
    }
    c->ssl = ssl;
    c->mode = mode;
    char why[200];
    int rc = MS_EINVAL;
    SSL_CTX_set_min_proto_version(ssl, TLS1_3_VERSION);
    SSL_CTX_set_num_tickets(ssl, 0);
    SSL_CTX_set_session_cache_mode(ssl, SSL_SESS_CACHE_OFF);
    if (ca && SSL_CTX_load_verify_locations(ssl, ca, NULL) != 1) {
        queue_reason(why, sizeof why);
        snprintf(err, errlen, "CA certificate %s: %s", ca, why);
        goto fail;
    }
    /* the key first: a certificate that does not match it then leaves
     * no key, which SSL_CTX_check_private_key names below */
    if (SSL_CTX_use_PrivateKey_file(ssl, files->key, SSL_FILETYPE_PEM)
        != 1) {
        queue_reason(why, sizeof why);
        snprintf(err, errlen, "private key %s: %s", files->key, why);
        goto fail;
    }
    if (SSL_CTX_use_certificate_chain_file(ssl, files->cert) != 1) {
        queue_reason(why, sizeof why);
        snprintf(err, errlen, "certificate %s: %s", files->cert, why);
        goto fail;
    }
    if (SSL_CTX_check_private_key(ssl) != 1) {
        ERR_clear_error();
        snprintf(err, errlen, "private key %s does not match certificate "
                 "%s", files->key, files->cert);
        goto fail;
    }
    /* a node's certificate serves both ends of its links */
    if (mode == MS_TLS_MUTUAL &&
        (verify_own(ssl, files->cert, "ssl_client", err, errlen) < 0 ||
         verify_own(ssl, files->cert, "ssl_server", err, errlen) < 0))
        goto fail;
    if (mode == MS_TLS_SERVER &&
        check_server_cert(ssl, files->cert, err, errlen) < 0)
        goto fail;
    if (ca) {
        SSL_CTX_set_verify(ssl, SSL_VERIFY_PEER |
                                    SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
        if (mode == MS_TLS_SERVER) {
            STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(ca);
            if (names)
                SSL_CTX_set_client_CA_list(ssl, names);
        }
    }
    ERR_clear_error();
    *out = c;
    return 0;
fail:
    SSL_CTX_free(ssl);
    free(c);
    return rc;
}

void ms_tls_ctx_free(struct ms_tls_ctx *ctx)
{
    if (!ctx)
        return;
    SSL_CTX_free(ctx->ssl); /* each SSL holds its own reference */
    free(ctx);
}

struct ms_tls *ms_tls_new(struct ms_tls_ctx *ctx, int server,
                          const char *host)
{
    struct ms_tls *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->ssl = SSL_new(ctx->ssl);
    s->in = BIO_new(BIO_s_mem());
    s->out = BIO_new(BIO_s_mem());
    if (!s->ssl || !s->in || !s->out) {
        SSL_free(s->ssl);
        BIO_free(s->in);
        BIO_free(s->out);
        free(s);
        return NULL;
    }
    /* an empty read BIO means "more later", not end of file */
    BIO_set_mem_eof_return(s->in, -1);
    BIO_set_mem_eof_return(s->out, -1);
    SSL_set_bio(s->ssl, s->in, s->out);
    if (server) {
        SSL_set_accept_state(s->ssl);
    } else {
        SSL_set_connect_state(s->ssl);
        if (host && host[0]) {
            SSL_set_tlsext_host_name(s->ssl, host);
            SSL_set1_host(s->ssl, host);
        }
    }
    return s;
}

void ms_tls_free(struct ms_tls *s)
{
    if (!s)
        return;
    SSL_free(s->ssl); /* frees both BIOs */
    free(s);
}

int ms_tls_feed(struct ms_tls *s, const void *p, size_t n)
{
    while (n) {
        int chunk = n > (1u << 30) ? (1 << 30) : (int)n;
        int w = BIO_write(s->in, p, chunk);
        if (w <= 0) {
            snprintf(s->reason, sizeof s->reason, "out of memory");
            return MS_ENOMEM;
        }
        p = (const char *)p + w;
        n -= (size_t)w;
    }
    return 0;
}

/* Sets s->reason from a failed call that returned `ret`. */
static void failed(struct ms_tls *s, int ret)
{
    long v = SSL_get_verify_result(s->ssl);
    if (v != X509_V_OK) {
        snprintf(s->reason, sizeof s->reason, "TLS: peer certificate "
                 "refused: %s", X509_verify_cert_error_string(v));
        ERR_clear_error();
        return;
    }
    int e = SSL_get_error(s->ssl, ret);
    char why[200];
    if (e == SSL_ERROR_SSL) {
        queue_reason(why, sizeof why);
    } else {
        snprintf(why, sizeof why, "error %d", e);
        ERR_clear_error();
    }
    snprintf(s->reason, sizeof s->reason, "TLS: %s", why);
}

int ms_tls_handshake(struct ms_tls *s)
{
    ERR_clear_error();
    int r = SSL_do_handshake(s->ssl);
    if (r == 1)
        return 1;
    int e = SSL_get_error(s->ssl, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
        return 0;
    failed(s, r);
    return MS_EINVAL;
}

ssize_t ms_tls_read(struct ms_tls *s, void *buf, size_t cap)
{
    ERR_clear_error();
    int want = cap > (1u << 30) ? (1 << 30) : (int)cap;
    int r = SSL_read(s->ssl, buf, want);
    if (r > 0)
        return r;
    int e = SSL_get_error(s->ssl, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
        return 0;
    if (e == SSL_ERROR_ZERO_RETURN) {
        snprintf(s->reason, sizeof s->reason, "TLS: the peer closed");
        return MS_ECANCELED;
    }
    failed(s, r);
    return MS_EINVAL;
}

int ms_tls_write(struct ms_tls *s, const void *p, size_t n)
{
    ERR_clear_error();
    if (n == 0 || n > MS_TLS_RECORD)
        return MS_EINVAL;
    int r = SSL_write(s->ssl, p, (int)n);
    if (r == (int)n)
        return 0;
    failed(s, r);
    return MS_EINVAL;
}

size_t ms_tls_buffered(struct ms_tls *s)
{
    return BIO_ctrl_pending(s->in);
}

size_t ms_tls_pending(struct ms_tls *s)
{
    return BIO_ctrl_pending(s->out);
}

size_t ms_tls_take(struct ms_tls *s, void *buf, size_t cap)
{
    size_t got = 0;
    while (got < cap) {
        size_t want = cap - got;
        int r = BIO_read(s->out, (char *)buf + got,
                         want > (1u << 30) ? (1 << 30) : (int)want);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    return got;
}

const char *ms_tls_reason(const struct ms_tls *s)
{
    return s->reason[0] ? s->reason : "TLS error";
}
