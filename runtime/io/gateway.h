/*
 * gateway.h -- what the HTTP gateway (http.c, http_conn.c) may ask of the
 * node that serves it: exactly what its endpoints need, and nothing else.
 * The node (runtime/node/node.c) fills it in; the gateway never sees the
 * node itself, so the two do not depend on each other.
 *
 * Every function gets `data` first and is called on the loop thread.
 * Codes are the core's MS_E* (runtime/core/errors.h).
 */
#ifndef MS_IO_GATEWAY_H
#define MS_IO_GATEWAY_H

#include <stddef.h>
#include <stdint.h>

#include "../core/base.h"

struct ms_gateway {
    void *data;

    /* Fixed for the gateway's life. */
    const char *name;   /* the node's name (borrowed) */
    size_t max_message; /* largest accepted body (limits.max_message_bytes) */
    uint64_t timeout_ms;/* limits.http_timeout */
    int connections;    /* limits.http_connections */
    const char *home;   /* the folder of lua/, entities/ and ui/ (the
                           status page's files); borrowed; NULL: none */
    const char *api_token; /* the entity endpoints want it (borrowed);
                              NULL or "": they answer anyone */
    /* gateway_tls (borrowed paths; tls_cert NULL or "": plain HTTP):
     * the server's certificate and key, and the CA of the clients let in
     * (NULL or "": any client) */
    const char *tls_cert, *tls_key, *tls_ca;

    /* The entity API (see ms_node_type, ms_node_check_message,
     * ms_node_tell, ms_node_ask, ms_node_activate, ms_node_stop_entity
     * and ms_node_shard_of in runtime/moonshard.h). */
    int (*type)(void *data, const char *name, size_t len);
    int (*check_message)(void *data, const char *json, size_t len,
                         char *err, size_t errlen);
    int (*tell)(void *data, int type, const char *id, size_t idlen,
                const char *json, size_t len);
    int (*ask)(void *data, int type, const char *id, size_t idlen,
               const char *json, size_t len, uint64_t timeout_ms,
               ms_ask_cb cb, void *cb_data);
    int (*activate)(void *data, int type, const char *id, size_t idlen,
                    uint64_t timeout_ms, ms_ask_cb cb, void *cb_data);
    int (*stop)(void *data, int type, const char *id, size_t idlen);
    int (*shard_of)(void *data, int type, const char *id, size_t idlen,
                    uint32_t *shard);

    /* JSON writers: write what fits into buf (NUL-terminated, buf may be
     * NULL with len 0) and return the length of the whole text (see
     * ms_node_stats_json, ms_node_members_json, ms_node_owner_json,
     * ms_node_allocations_json). */
    size_t (*stats_json)(void *data, char *buf, size_t len);
    size_t (*members_json)(void *data, char *buf, size_t len);
    size_t (*owner_json)(void *data, int type, const char *id, size_t idlen,
                         char *buf, size_t len);
    size_t (*allocations_json)(void *data, int type, char *buf, size_t len);

    /* GET /metrics: calls `fn` of Lua module `module` with one string (see
     * ms_node_call_lua); *out is the caller's to free. */
    int (*call_lua)(void *data, const char *module, const char *fn,
                    const char *arg, char **out, char *err, size_t errlen);

    /* The admin endpoints (see ms_node_check_admin, ms_node_leave,
     * ms_node_down, ms_node_move and ms_node_remember_clear). */
    int (*check_admin)(void *data, const char *token, size_t len,
                       int loopback);
    int (*leave)(void *data);
    int (*down)(void *data, const char *address, int force);
    int (*move)(void *data, const char *type, size_t len, uint32_t shard);
    /* POST /v1/remember/clear/{type}/{shard}: clears the failed mark of a
     * remember-entities shard (on_failure = "fail_closed") on this node.
     * 1: it was failed here and is cleared; 0: it was not failed here;
     * MS_ENOTYPE: no such type, or the type is not remembered; MS_EINVAL:
     * the shard is out of the type's range. */
    int (*remember_clear)(void *data, const char *type, size_t len,
                          uint32_t shard);
    /* GET /v1/leases/{type}: the lease rows of a persistent type, read
     * from the database later (see ms_node_leases): 0 and `cb` once with
     * the JSON (err 0) or a code and a one-line text; else MS_ENOTYPE,
     * MS_EINVAL (the type holds no leases), MS_EDBCONN (no database) or
     * another negative code, and no callback. */
    int (*leases)(void *data, const char *type, size_t len, ms_ask_cb cb,
                  void *cb_data);
};

#endif
