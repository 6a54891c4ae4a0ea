/*
 * config_load.c -- the config script, loaded and validated by
 * lua/moonshard/config.lua in the bridge's VM, read into the plain C
 * struct ms_config of the core (runtime/core/config.h).
 */
#include "bridge_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

static void copy_field(lua_State *L, int idx, const char *k, char *dst,
                       size_t len)
{
    lua_getfield(L, idx, k);
    const char *s = lua_tostring(L, -1);
    snprintf(dst, len, "%s", s ? s : "");
    lua_pop(L, 1);
}

static lua_Number num_field(lua_State *L, int idx, const char *k)
{
    lua_getfield(L, idx, k);
    lua_Number v = lua_tonumber(L, -1);
    lua_pop(L, 1);
    return v;
}

/* The TLS setting `k` (moonshard.config's check_tls): the CA from the
 * top-level table at `c`, the certificate and key from the node's entry
 * at `nd` (already merged with the top's); "" where not set. Each buffer
 * holds 512 bytes. */
static void copy_tls(lua_State *L, int c, int nd, const char *k, char *ca,
                     char *cert, char *key)
{
    lua_getfield(L, c, k);
    if (lua_istable(L, -1))
        copy_field(L, lua_gettop(L), "ca", ca, 512);
    lua_pop(L, 1);
    lua_getfield(L, nd, k);
    if (lua_istable(L, -1)) {
        copy_field(L, lua_gettop(L), "cert", cert, 512);
        copy_field(L, lua_gettop(L), "key", key, 512);
    }
    lua_pop(L, 1);
}

/* Loads and validates the config script at `path` (moonshard.config).
 * Returns 0 with the config table pushed, or MS_ECONFIG with the reason in
 * `err` and the stack as it was. */
static int push_config(struct ms_bridge *b, const char *path, char *err,
                       size_t errlen)
{
    lua_State *L = b->L;
    int top = lua_gettop(L);
    lua_pushstring(L, path);
    if (ms__bridge_call_module(b, "moonshard.config", "load", 1, 2, err,
                               errlen) < 0)
        return MS_ECONFIG;
    if (lua_isnil(L, -2)) {
        snprintf(err, errlen, "%s", lua_tostring(L, -1));
        lua_settop(L, top);
        return MS_ECONFIG;
    }
    lua_pop(L, 1);
    return 0;
}

int ms_bridge_load_config(struct ms_bridge *b, const char *path,
                          const char *node_name, struct ms_config *cfg,
                          char *err, size_t errlen)
{
    lua_State *L = b->L;
    int top = lua_gettop(L);
    memset(cfg, 0, sizeof *cfg);
    if (push_config(b, path, err, errlen) < 0)
        return MS_ECONFIG;
    int c = lua_gettop(L); /* stack: cfg */
    lua_pushvalue(L, c);
    if (node_name)
        lua_pushstring(L, node_name);
    else
        lua_pushnil(L);
    if (ms__bridge_call_module(b, "moonshard.config", "find_node", 2, 2,
                               err, errlen) < 0) {
        lua_settop(L, top);
        return MS_ECONFIG;
    }
    if (lua_isnil(L, -2)) {
        snprintf(err, errlen, "%s", lua_tostring(L, -1));
        lua_settop(L, top);
        return MS_ECONFIG;
    }
    lua_pop(L, 1);
    int nd = lua_gettop(L); /* stack: cfg, node */
    snprintf(cfg->path, sizeof cfg->path, "%s", path);
    copy_field(L, c, "cluster", cfg->cluster, sizeof cfg->cluster);
    copy_field(L, nd, "name", cfg->node_name, sizeof cfg->node_name);
    copy_field(L, nd, "listen", cfg->listen, sizeof cfg->listen);
    char http[128];
    copy_field(L, nd, "http", http, sizeof http);
    char *colon = strrchr(http, ':');
    if (colon) {
        *colon = 0;
        char *h = http;
        if (*h == '[') { /* [::1] */
            h++;
            h[strlen(h) - 1] = 0;
        }
        snprintf(cfg->http_host, sizeof cfg->http_host, "%s", h);
        cfg->http_port = atoi(colon + 1);
    }
    lua_getfield(L, c, "nodes");
    cfg->nnodes = (int)lua_objlen(L, -1);
    for (int i = 1; i <= cfg->nnodes; i++) {
        lua_rawgeti(L, -1, i);
        if (lua_rawequal(L, -1, nd))
            cfg->node_index = i - 1;
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    copy_field(L, c, "secret", cfg->secret, sizeof cfg->secret);
    copy_field(L, c, "admin_token", cfg->admin_token,
               sizeof cfg->admin_token);
    copy_field(L, c, "database", cfg->database, sizeof cfg->database);
    lua_getfield(L, c, "admin_remote");
    cfg->admin_remote = lua_toboolean(L, -1);
    lua_pop(L, 1);
    lua_getfield(L, c, "seeds");
    for (int i = 1; lua_istable(L, -1) && i <= (int)lua_objlen(L, -1) &&
                    cfg->nseeds < 16;
         i++) {
        lua_rawgeti(L, -1, i);
        snprintf(cfg->seeds[cfg->nseeds++], sizeof cfg->seeds[0], "%s",
                 lua_tostring(L, -1) ? lua_tostring(L, -1) : "");
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    lua_getfield(L, nd, "roles");
    for (int i = 1; lua_istable(L, -1) && i <= (int)lua_objlen(L, -1); i++) {
        lua_rawgeti(L, -1, i);
        size_t used = strlen(cfg->roles);
        snprintf(cfg->roles + used, sizeof cfg->roles - used, "%s%s",
                 used ? "," : "", lua_tostring(L, -1) ? lua_tostring(L, -1)
                                                      : "");
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    lua_getfield(L, c, "limits");
    cfg->max_message = (size_t)num_field(L, -1, "max_message_bytes");
    cfg->json_max_depth = (int)num_field(L, -1, "json_max_depth");
    cfg->http_timeout_ms = (uint64_t)num_field(L, -1, "http_timeout_ms");
    cfg->http_connections = (int)num_field(L, -1, "http_connections");
    lua_pop(L, 1);
    cfg->gc_step_kb = (int)num_field(L, c, "gc_step_kb");
    cfg->gc_headroom_mb = (int)num_field(L, c, "gc_headroom_mb");
    cfg->operation_retention_ms =
        (uint64_t)num_field(L, c, "operation_retention_ms");
    cfg->database_connections = (int)num_field(L, c, "database_connections");
    cfg->handoff_timeout_ms = (uint64_t)num_field(L, c, "handoff_timeout_ms");
    cfg->rebalance_interval_ms =
        (uint64_t)num_field(L, c, "rebalance_interval_ms");
    cfg->stuck_handler_ms = (uint64_t)num_field(L, c, "stuck_handler_ms");
    cfg->stuck_handler_exit_ms =
        (uint64_t)num_field(L, c, "stuck_handler_exit_ms");
    cfg->heartbeat_interval_ms =
        (uint64_t)num_field(L, c, "heartbeat_interval_ms");
    cfg->unreachable_after_ms =
        (uint64_t)num_field(L, c, "unreachable_after_ms");
    cfg->gossip_interval_ms = (uint64_t)num_field(L, c, "gossip_interval_ms");
    cfg->gossip_fanout = (uint32_t)num_field(L, c, "gossip_fanout");
    cfg->seed_timeout_ms = (uint64_t)num_field(L, c, "seed_timeout_ms");
    cfg->lone_leave_timeout_ms =
        (uint64_t)num_field(L, c, "lone_leave_timeout_ms");
    cfg->weight = (uint32_t)num_field(L, nd, "weight");
    /* the node's own limit, false for none, or nil: the top-level one
     * (a number or false; lua_tonumber of false is 0: no limit) */
    lua_getfield(L, nd, "max_active_entities");
    int own = !lua_isnil(L, -1);
    lua_pop(L, 1);
    cfg->max_active_entities =
        (uint64_t)num_field(L, own ? nd : c, "max_active_entities");
    copy_field(L, nd, "version", cfg->version, sizeof cfg->version);
    copy_field(L, c, "api_token", cfg->api_token, sizeof cfg->api_token);
    copy_tls(L, c, nd, "tls", cfg->tls_ca, cfg->tls_cert, cfg->tls_key);
    copy_tls(L, c, nd, "gateway_tls", cfg->gw_ca, cfg->gw_cert,
             cfg->gw_key);
    char log_format[8];
    copy_field(L, c, "log_format", log_format, sizeof log_format);
    cfg->log_json = strcmp(log_format, "json") == 0;
    lua_getfield(L, c, "entity_list");
    int el = lua_gettop(L);
    cfg->ntypes = (int)lua_objlen(L, el);
    cfg->types = calloc((size_t)cfg->ntypes + 1, sizeof *cfg->types);
    if (!cfg->types || ms__bridge_part_alloc(b, cfg->ntypes) < 0) {
        lua_settop(L, top);
        return MS_ENOMEM;
    }
    for (int i = 0; i < cfg->ntypes; i++) {
        struct ms_type_config *t = &cfg->types[i];
        lua_rawgeti(L, el, i + 1);
        copy_field(L, -1, "name", t->name, sizeof t->name);
        copy_field(L, -1, "module", t->module, sizeof t->module);
        t->shard_count = (uint32_t)num_field(L, -1, "shard_count");
        t->idle_timeout_ms = (uint64_t)num_field(L, -1, "idle_timeout_ms");
        t->max_pending = (uint32_t)num_field(L, -1, "max_pending");
        t->slow_handler_ms = (uint32_t)num_field(L, -1, "slow_handler_ms");
        char on_error[16];
        copy_field(L, -1, "on_error", on_error, sizeof on_error);
        t->on_error_stop = strcmp(on_error, "stop") == 0;
        copy_field(L, -1, "allocation_id", t->allocation_id,
                   sizeof t->allocation_id);
        copy_field(L, -1, "partition_id", t->partition_id,
                   sizeof t->partition_id);
        char persistence[16];
        copy_field(L, -1, "persistence", persistence, sizeof persistence);
        t->persistence = strcmp(persistence, "events") == 0 ? MS_PERSIST_EVENTS
                       : strcmp(persistence, "state") == 0 ? MS_PERSIST_STATE
                       : MS_PERSIST_NONE;
        t->lease_duration_ms = (uint64_t)num_field(L, -1, "lease_duration_ms");
        t->lease_renew_interval_ms =
            (uint64_t)num_field(L, -1, "lease_renew_interval_ms");
        t->lease_window_ms = (uint64_t)num_field(L, -1, "lease_window_ms");
        t->snapshot_every = (uint32_t)num_field(L, -1, "snapshot_every");
        lua_getfield(L, -1, "delete_events_on_snapshot");
        t->delete_events_on_snapshot = lua_toboolean(L, -1);
        lua_pop(L, 1);
        lua_getfield(L, -1, "remember");
        if (lua_istable(L, -1)) {
            char v[32];
            copy_field(L, -1, "store", v, sizeof v);
            t->remember = strcmp(v, "file") == 0     ? MS_REMEMBER_FILE
                          : strcmp(v, "postgres") == 0 ? MS_REMEMBER_POSTGRES
                                                       : MS_REMEMBER_MEMORY;
            copy_field(L, -1, "dir", t->remember_dir, sizeof t->remember_dir);
            copy_field(L, -1, "fsync", v, sizeof v);
            t->remember_fsync = strcmp(v, "never") == 0 ? MS_FSYNC_NEVER
                                : strcmp(v, "on_compaction") == 0
                                    ? MS_FSYNC_ON_COMPACTION
                                    : MS_FSYNC_ALWAYS;
            lua_getfield(L, -1, "keep_on_idle");
            t->remember_keep_on_idle = lua_toboolean(L, -1);
            lua_pop(L, 1);
            copy_field(L, -1, "on_failure", v, sizeof v);
            t->remember_fail_closed = strcmp(v, "fail_closed") == 0;
        }
        lua_pop(L, 1);
        lua_getfield(L, -1, "partitioner");
        if (lua_isfunction(L, -1) && b->part_ref[i] == LUA_NOREF) {
            t->custom_partition = 1;
            b->part_ref[i] = luaL_ref(L, LUA_REGISTRYINDEX);
        } else {
            t->custom_partition = lua_isfunction(L, -1);
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
    }
    lua_getfield(L, c, "on_member_event");
    if (lua_isfunction(L, -1))
        ms__bridge_set_event_hook(b); /* pops it */
    else
        lua_pop(L, 1);
    b->cfg = cfg; /* names in logs until ms_bridge_start */
    /* the coordinator's strategies come from this config */
    lua_pushvalue(L, c);
    ms__bridge_call_module(b, "moonshard.alloc", "configure", 1, 0, err,
                           errlen);
    lua_settop(L, top);
    return 0;
}

int ms_bridge_node_names(struct ms_bridge *b, const char *path,
                         char names[][64], int max, char *err, size_t errlen)
{
    lua_State *L = b->L;
    int top = lua_gettop(L);
    if (push_config(b, path, err, errlen) < 0)
        return MS_ECONFIG;
    lua_getfield(L, -1, "nodes");
    int n = (int)lua_objlen(L, -1);
    if (n > max)
        n = max;
    for (int i = 0; i < n; i++) {
        lua_rawgeti(L, -1, i + 1);
        copy_field(L, -1, "name", names[i], 64);
        lua_pop(L, 1);
    }
    lua_settop(L, top);
    return n;
}
