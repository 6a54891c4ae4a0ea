/*
 * transport_int.h -- the transport's connection state, shared by
 * transport.c (connections: dial, accept, handshake, input, admission of
 * strangers) and transport_out.c (output: write batching, TLS sealing,
 * the tells a connection that ends still held). Not a public header.
 */
#ifndef MS_IO_TRANSPORT_INT_H
#define MS_IO_TRANSPORT_INT_H

#include "transport.h"

#include <stddef.h>
#include <stdint.h>

#include "../core/auth.h"
#include "../core/frame.h"
#include "tls.h"

#define READ_BUF (64 * 1024)

/* Where an incoming connection comes from, for the per-source cap: the
 * IPv4 address (also when mapped into IPv6), or the first 8 bytes (the
 * /64) of an IPv6 address, since one host easily has a whole /64. */
struct source {
    uint8_t family;            /* 4, 6, or 0: unknown */
    uint8_t bytes[16];         /* the rest zero */
};

struct obuf {
    char *p;
    size_t len, cap;
};

/* Where each tell queued on a connection ends in its byte stream, oldest
 * first, until the peer's kernel has acknowledged it: what a connection
 * that ends still held is counted (link_drops). */
struct tellring {
    uint64_t *end;
    size_t head, len, cap;
    size_t sealed;             /* TLS: the oldest `sealed` ends are in
                                  wire_out terms (their record is made) */
};

struct conn {
    uv_tcp_t tcp;
    uv_timer_t timer;          /* handshake deadline */
    uv_connect_t connect;
    uv_write_t wreq;
    uv_shutdown_t sreq;
    struct ms_transport *t;
    struct conn *prev, *next;
    struct ms_auth *auth;
    struct ms_frame_decoder dec;
    struct obuf pending, inflight;
    struct tellring tells;
    uint64_t out_bytes;        /* bytes queued on the stream so far */
    uint64_t acked_base;       /* the kernel's acknowledged count before
                                  the first byte (tcpinfo.h) */
    int acked_known;           /* acked_base was read */
    int dead;                  /* the kernel or the peer ended it */
    int draining;              /* dropped: its kernel sends what it holds
                                  until the peer or the kernel ends it */
    uint64_t peer_uid;
    uint64_t seq;              /* creation order: smaller is older */
    uint64_t started_ms;       /* accepted or dialed (loop time) */
    uint64_t first_ms;         /* the first frame's deadline, for the log */
    struct source src;         /* inbound: the peer's source */
    char source[64];           /* inbound: "ip:port" for the log */
    char address[128];         /* dialed address, or the peer's, once known */
    char peer_name[128];
    int outbound;
    int tcp_up;                /* outbound: the TCP connect completed */
    int got_frame;             /* a whole frame arrived */
    int noted;                 /* its failed handshake was counted */
    int authed;                /* handshake done */
    int in_handshake;          /* inbound, counted in t->handshaking */
    int refused;               /* handshake refused: reads nothing more */
    int registered;            /* the peer's live connection */
    int writing;
    int closing;
    int close_after_write;
    int open_handles;
    struct ms_tls *tls;        /* NULL: plaintext link */
    int tls_up;                /* the TLS handshake is done */
    uint64_t wire_out;         /* TLS: ciphertext bytes handed to libuv */
};

struct ms_transport {
    uv_loop_t *loop;
    uv_tcp_t listener;
    struct ms_transport_config cfg;
    char cluster[128], name[128], address[128], host[64];
    uint8_t secret[256];
    struct ms_transport_callbacks cb;
    struct ms_auth_replay *replay;
    struct conn *conns;
    struct ms_transport_stats st;
    int handshaking;           /* inbound connections in the handshake */
    uint64_t next_seq;
    uint64_t dial_failures;    /* this node's dials whose handshake failed */
    int closing;
    int open;                  /* listener + connections not yet freed */
    struct ms_tls_ctx *tls;    /* NULL: plaintext links; owned */
    char rbuf[READ_BUF];
    char pbuf[READ_BUF];       /* TLS: plaintext of what was read */
};

/* transport.c: closes c (reason NULL: quietly); see conn_close there. */
void ms__tr_close(struct conn *c, const char *reason);

/* transport_out.c */
/* Queues frame f on c (a full output queue drains the connection); 0 or
 * a negative MS_E* code. */
int ms__tr_put_frame(struct conn *c, const struct ms_frame *f);
/* Writes what is pending (sealed into TLS records on a TLS link), unless
 * a write is in flight. */
void ms__tr_flush(struct conn *c);
/* Counts, as link_drops, the tells c held that its peer's kernel had not
 * acknowledged when it ends. */
void ms__tr_count_lost_tells(struct conn *c);

#endif
