/*
 * config.h -- the node's settings as plain C data, read once from the
 * validated Lua config (lua/moonshard/config.lua) by the bridge.
 */
#ifndef MS_CORE_CONFIG_H
#define MS_CORE_CONFIG_H

#include <stddef.h>
#include <stdint.h>

struct ms_type_config {
    char name[64];
    char module[128];
    uint32_t shard_count;
    uint64_t idle_timeout_ms;  /* 0: never */
    int on_error_stop;
    uint32_t max_pending;
    uint32_t slow_handler_ms;
    char allocation_id[256];   /* the allocation strategy's id */
    int custom_partition;      /* the config gives a partitioner function */
    char partition_id[64];     /* "fnv1a", or "custom:" and its code's hash */
    /* persistence (issue 11): MS_PERSIST_NONE, _EVENTS or _STATE */
    int persistence;
    uint64_t lease_duration_ms;       /* lease_duration */
    uint64_t lease_renew_interval_ms; /* lease_renew_interval */
    uint64_t lease_window_ms;         /* lease_window: how long messages
                                         wait for the lease */
    uint32_t snapshot_every;          /* events between snapshots; 0: never */
    int delete_events_on_snapshot;    /* delete the events a snapshot covers */
    /* remember-entities (issue 12, runtime/node/node_remember.c) */
    int remember;                     /* MS_REMEMBER_* */
    char remember_dir[512];           /* store "file": its directory */
    int remember_fsync;               /* MS_FSYNC_* (store "file") */
    int remember_keep_on_idle;        /* idle passivation keeps the id */
    int remember_fail_closed;         /* on_failure = "fail_closed" */
};

enum {
    MS_REMEMBER_NONE = 0, MS_REMEMBER_MEMORY, MS_REMEMBER_FILE,
    MS_REMEMBER_POSTGRES
};
enum { MS_FSYNC_ALWAYS = 0, MS_FSYNC_ON_COMPACTION, MS_FSYNC_NEVER };

enum { MS_PERSIST_NONE = 0, MS_PERSIST_EVENTS = 1, MS_PERSIST_STATE = 2 };

/* 1 when the type's shards hold leases (region.h "leases"): a persistent
 * type, and a type that remembers its entities in PostgreSQL (whose
 * writes are fenced by the lease epoch like every other write). */
static inline int ms_type_leased(const struct ms_type_config *t)
{
    return t->persistence != MS_PERSIST_NONE ||
           t->remember == MS_REMEMBER_POSTGRES;
}

/* Bytes of one PostgreSQL statement's text and parameters together (the
 * pool's MS_PG_STATEMENT_MAX), and the largest snapshot, durable state or
 * events of one command a persistent entity writes: 64 KiB are left for
 * the statement's SQL and its other parameters. */
#define MS_DB_STATEMENT_MAX (1 << 20)
#define MS_PERSIST_TEXT_MAX (MS_DB_STATEMENT_MAX - 65536)

struct ms_config {
    char path[1024];
    char cluster[64];
    char node_name[64];
    char listen[128];
    char http_host[128];
    int http_port;
    int nnodes;                /* nodes listed in the script */
    int node_index;            /* this node's place in that list, from 0 */
    char secret[256];          /* cluster secret ("" when not configured) */
    char admin_token[128];     /* for leave/down ("" when not configured) */
    int admin_remote;          /* admin endpoints answer non-loopback peers */
    char database[1024];       /* libpq connection string ("" when not
                                  configured); may hold a password */
    uint64_t operation_retention_ms; /* how long operation ids are kept */
    int database_connections;  /* the node's PostgreSQL pool size */
    char seeds[16][128];       /* seed addresses */
    int nseeds;
    char roles[256];           /* this node's roles, "a,b" */
    int ntypes;
    struct ms_type_config *types; /* owned; free with ms_config_free */
    size_t max_message;
    int json_max_depth;
    uint64_t http_timeout_ms;  /* limits.http_timeout */
    int http_connections;      /* limits.http_connections */
    int gc_step_kb;
    int gc_headroom_mb;        /* the most garbage let build up between
                                * Lua GC cycles (runtime/lua/vm.c); 0:
                                * LuaJIT's pause alone */
    uint64_t handoff_timeout_ms;    /* deadline of one shard move */
    uint64_t rebalance_interval_ms; /* between rebalance rounds */
    uint64_t stuck_handler_ms;      /* the watchdog logs Lua stuck this long */
    uint64_t stuck_handler_exit_ms; /* ... and exits at this; 0: never */
    /* membership (runtime/core/membership.h: struct ms_mb_config), bounds
     * checked by lua/moonshard/config.lua */
    uint64_t heartbeat_interval_ms;
    uint64_t unreachable_after_ms;
    uint64_t gossip_interval_ms;
    uint32_t gossip_fanout;
    uint64_t seed_timeout_ms;
    uint64_t lone_leave_timeout_ms;
    /* this node's entry: its weight (1..1000) and application version
     * ("" when not set: the binary's) */
    uint32_t weight;
    uint64_t max_active_entities; /* this node's limit; 0: none */
    char version[33];          /* MS_MB_MAX_VERSION bytes and a NUL */
    int log_json;              /* log_format = "json" */
    /* TLS (runtime/io/tls.h), paths resolved against the config file's
     * directory; tls_ca "" when links are plaintext, gw_cert "" when the
     * gateway is */
    char tls_ca[512], tls_cert[512], tls_key[512];
    char gw_ca[512], gw_cert[512], gw_key[512];
    char api_token[128];       /* entity endpoints ("" when not set) */
};

/* Frees what `c` owns (its types) and leaves it without them; `c` itself
 * is the caller's. */
void ms_config_free(struct ms_config *c);

#endif
