/*
 * rogue_peer -- a test tool, not a test: a peer that knows the cluster
 * secret but is no member, for specs of what a node accepts from such a
 * peer (spec/03-integration/trust_spec.lua).
 *
 *   rogue_peer CLUSTER SECRET ADDRESS KIND FIRST_CORR LAST_CORR PAYLOAD
 *              [DELAY_MS]
 *
 * Dials ADDRESS, completes the handshake through the node's own transport
 * (so it speaks the current protocol: it proves first, handshake v2, see
 * runtime/core/auth.h), waits DELAY_MS, sends one frame
 * of KIND (a number, as in runtime/core/frame.h) with PAYLOAD for each
 * corr in FIRST_CORR..LAST_CORR, then waits 300 ms and exits 0. Exits 1
 * when the handshake does not finish within 5 s, 2 on bad arguments.
 * A PAYLOAD of the form hex:HEXDIGITS is sent as the bytes they spell
 * (for payloads with a NUL in them).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../runtime/io/logsink.h"
#include "../../runtime/io/transport.h"
#include "free_port.h"
#include "../../runtime/moonshard.h"

struct rogue {
    struct ms_transport *t;
    uv_loop_t *loop;
    uv_timer_t timer;
    uint64_t peer;
    int kind, sent, up;
    uint64_t first, last, delay_ms;
    const char *payload;
    size_t payload_len;
};

static void on_done(uv_timer_t *tm)
{
    struct rogue *g = tm->data;
    ms_transport_close(g->t);
    uv_close((uv_handle_t *)&g->timer, NULL);
}

static void on_send(uv_timer_t *tm)
{
    struct rogue *g = tm->data;
    for (uint64_t c = g->first; c <= g->last; c++) {
        struct ms_frame f;
        memset(&f, 0, sizeof f);
        f.kind = (uint8_t)g->kind;
        f.corr = c;
        f.type = "";
        f.id = "";
        f.payload = g->payload;
        f.payload_len = g->payload_len;
        if (ms_transport_send(g->t, g->peer, &f) == 0)
            g->sent++;
    }
    uv_timer_start(&g->timer, on_done, 300, 0);
}

static void on_peer(void *data, uint64_t uid, const char *name,
                    const char *address, int up)
{
    struct rogue *g = data;
    (void)name;
    (void)address;
    if (up && !g->up) {
        g->up = 1;
        g->peer = uid;
        uv_timer_start(&g->timer, on_send, g->delay_ms, 0);
    }
}

static void on_frame(void *data, uint64_t uid, const struct ms_frame *f)
{
    (void)data;
    (void)uid;
    (void)f;
}

static void on_timeout(uv_timer_t *tm)
{
    struct rogue *g = tm->data;
    if (!g->up)
        on_done(tm);
}

int main(int argc, char **argv)
{
    ms_io_log_install();
    if (argc < 8) {
        fprintf(stderr, "usage: rogue_peer CLUSTER SECRET ADDRESS KIND "
                        "FIRST_CORR LAST_CORR PAYLOAD [DELAY_MS]\n");
        return 2;
    }
    struct rogue g;
    memset(&g, 0, sizeof g);
    g.loop = uv_default_loop();
    g.kind = atoi(argv[4]);
    g.first = strtoull(argv[5], NULL, 10);
    g.last = strtoull(argv[6], NULL, 10);
    g.payload = argv[7];
    g.payload_len = strlen(argv[7]);
    if (strncmp(argv[7], "hex:", 4) == 0) {
        /* decoded in place: two digits become one byte */
        char *in = argv[7] + 4, *o = argv[7];
        g.payload_len = 0;
        for (; in[0] && in[1]; in += 2) {
            char pair[3] = {in[0], in[1], 0};
            o[g.payload_len++] = (char)strtoul(pair, NULL, 16);
        }
    }
    g.delay_ms = argc > 8 ? strtoull(argv[8], NULL, 10) : 0;
    int port = free_port();
    char self[32];
    snprintf(self, sizeof self, "127.0.0.1:%d", port);
    struct ms_transport_config cfg = {
        argv[1], "rogue", self, 0x0bad0bad0bad0badULL,
        (const uint8_t *)argv[2], strlen(argv[2]), "127.0.0.1", port,
        1 << 20, 4 << 20, MS_TRANSPORT_HANDSHAKE_MS, NULL};
    struct ms_transport_callbacks cb = {&g, on_peer, on_frame, NULL};
    char err[200];
    if (ms_transport_start(&g.t, g.loop, &cfg, &cb, err, sizeof err) < 0) {
        fprintf(stderr, "rogue_peer: %s\n", err);
        return 2;
    }
    uv_timer_init(g.loop, &g.timer);
    g.timer.data = &g;
    if (ms_transport_connect(g.t, argv[3]) < 0) {
        fprintf(stderr, "rogue_peer: bad address %s\n", argv[3]);
        return 2;
    }
    uv_timer_start(&g.timer, on_timeout, 5000, 0);
    uv_run(g.loop, UV_RUN_DEFAULT);
    printf("sent %d\n", g.sent);
    return g.up ? 0 : 1;
}
