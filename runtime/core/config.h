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
};

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
    int admin_remote;
    char database[1024];       /* libpq connection string ("" when not
                                  configured); may hold a password */          /* admin endpoints answer non-loopback peers */
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
    uint64_t handoff_timeout_ms;    /* deadline of one shard move */
    uint64_t rebalance_interval_ms; /* between rebalance rounds */
    uint64_t stuck_handler_ms;      /* the watchdog logs Lua stuck this long */
    uint64_t stuck_handler_exit_ms; /* ... and exits at this; 0: never */
};

/* Frees what `c` owns (its types) and leaves it without them; `c` itself
 * is the caller's. */
void ms_config_free(struct ms_config *c);

#endif
