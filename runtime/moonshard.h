/*
 * moonshard.h -- the public C API of a moonshard node.
 *
 * A node is one OS process with one libuv loop and one LuaJIT VM. It hosts
 * entities, addressed by (type, id), whose behaviors are Lua modules. This
 * header is what the I/O front ends (HTTP gateway, CLI, bench) program
 * against; everything else is private to its subsystem.
 *
 * Threading: every function here must be called on the node's loop thread.
 */
#ifndef MOONSHARD_H
#define MOONSHARD_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "core/base.h"

#define MS_VERSION "0.1.0"

/* Error codes (MS_E*, 0 or negative), ms_strerror, ms_errname, MS_MAX_ID,
 * the shard hash, struct ms_stats and ms_ask_cb come from the core:
 * runtime/core/base.h. */

/* The exit status of a node that the watchdog ended: Lua code (a handler)
 * was stuck past stuck_handler_exit_ms, or while the node was asked to
 * stop (runtime/io/watchdog.h). EX_SOFTWARE of sysexits.h. */
#define MS_EXIT_STUCK 70

struct ms_node;

/* Options of ms_node_new; see lua/moonshard/config.lua for their meaning. */
struct ms_node_options {
    const char *config_path; /* cluster config script; required */
    const char *node_name;   /* which node of config.nodes; NULL: first */
};

/*
 * Loads the config script, starts the Lua VM, loads the behaviors, starts
 * the transport and membership (a single node is a cluster of one: its
 * plan owns every shard it allocates) and binds the HTTP gateway on
 * `loop`. On failure returns a negative code, writes a
 * one-line reason into `err` (including the config file and line where it
 * applies) and starts nothing. On success `*out` is owned by the caller and
 * released with ms_node_close().
 */
int ms_node_new(struct ms_node **out, uv_loop_t *loop,
                const struct ms_node_options *opts, char *err,
                size_t errlen);

/* Sets what happens when the node decides to stop by itself (it was
 * removed from the cluster): `cb(data)` is called, and should close the
 * node (and whatever else keeps the loop alive). Without it the node
 * closes itself. */
void ms_node_on_stopped(struct ms_node *n, void (*cb)(void *), void *data);

/* Makes the node's watchdog take SIGINT and SIGTERM: the first calls
 * `cb(data, signum)` on the loop thread (borrowed until the node is
 * closed), later ones are ignored; while a handler is stuck either one
 * ends the process with MS_EXIT_STUCK. A signal handler of the loop (such
 * as uv_signal) would never run while Lua code holds the loop. Returns 0
 * or a negative errno code. */
int ms_node_catch_signals(struct ms_node *n,
                          void (*cb)(void *data, int signum), void *data);

/* Stops accepting work, cancels pending asks (MS_ECANCELED), passivates
 * every entity (calling `stopped`), closes all handles and frees the node
 * once the loop has run the close callbacks. */
void ms_node_close(struct ms_node *n);

/* Index of an entity type by name, or MS_ENOTYPE. */
int ms_node_type(struct ms_node *n, const char *name, size_t len);

/* Name of the node (config.nodes[i].name), borrowed for the node's life. */
const char *ms_node_name(struct ms_node *n);

/* How long a graceful leave may take before the node stops anyway: enough
 * for its shards to move away through handoff (2 x handoff_timeout + 5 s). */
uint64_t ms_node_leave_deadline_ms(struct ms_node *n);

/* Starts moving shard `shard` of type `name` (len bytes) through handoff,
 * on the coordinator: 0, MS_ENOTYPE, MS_EBUSY, MS_EINVAL (not the ready
 * coordinator, or no owner). */
int ms_node_move(struct ms_node *n, const char *name, size_t len,
                 uint32_t shard);

/* Clears the failed mark that a remember-entities store failure left on
 * shard `shard` of type `type` (len bytes; on_failure = "fail_closed") on
 * this node, so its messages are delivered again: 1 when the shard was
 * failed here and is cleared, 0 when it was not failed here, MS_ENOTYPE
 * (no such type, or the type is not remembered), MS_EINVAL (shard out of
 * the type's range). */
int ms_node_remember_clear(struct ms_node *n, const char *type, size_t len,
                           uint32_t shard);

/* GET /v1/leases/{type}: queues a read of the lease rows that the
 * database holds for type `type` (len bytes) of this node's cluster, at
 * most the type's shard_count of them (runtime/io/lease_sql.h
 * ms_lease_sql_list, on the node's pool: nothing blocks). 0: `cb` gets,
 * once and never inside this call, 0 and the JSON, or a negative code and
 * a one-line text saying why (the database's error, its timeout, the
 * node stopping); `cb_data` must stay valid until then. Else no callback:
 * MS_ENOTYPE (no such type), MS_EINVAL (the type holds no leases: not
 * persistent, not remembered in PostgreSQL), MS_EDBCONN (no pool: no
 * `database`, or one libpq could not parse), MS_ECANCELED (the node is
 * stopping), MS_EBUSY (MS_NODE_LEASE_READS_MAX reads are running: the
 * pool is shared with the lease renewals), or the pool's refusal
 * (MS_EDBFULL, MS_ENOMEM). */
#define MS_NODE_LEASE_READS_MAX 2
int ms_node_leases(struct ms_node *n, const char *type, size_t len,
                   ms_ask_cb cb, void *cb_data);

/* HTTP address the gateway listens on ("127.0.0.1:7201"), or "". */
const char *ms_node_http_address(struct ms_node *n);

/* 1 when the gateway speaks HTTPS only (gateway_tls), else 0. */
int ms_node_gateway_tls(struct ms_node *n);

/* Writes the folder that holds lua/ and entities/ into buf (len bytes):
 * $MOONSHARD_HOME, else <binary's folder>/../share/moonshard (an
 * installed binary), else the source tree the binary was built from, else
 * the folder above the binary (runtime/home.c). */
void ms_home(char *buf, size_t len);

/* Folder holding lua/ and entities/ (MOONSHARD_HOME or the build's
 * source tree), borrowed for the node's life. */
const char *ms_node_home(struct ms_node *n);

/* This node's place in the config's node list (0: the first). */
int ms_node_index(struct ms_node *n);

/* Largest accepted payload in bytes (limits.max_message_bytes). */
size_t ms_node_max_message(struct ms_node *n);

/* The HTTP gateway's limits (limits.http_timeout in ms and
 * limits.http_connections of the config). */
void ms_node_http_limits(struct ms_node *n, uint64_t *timeout_ms,
                         int *connections);

/*
 * Checks that `json` is one strict JSON object (RFC 8259) within the
 * decoder's limits, without delivering it; the strict check of
 * runtime/core/jsoncheck.h decides alone. Returns 0, MS_EBADJSON or
 * MS_ENOTTABLE; on failure writes the reason into `err` (lua-cjson's, when
 * it refuses too).
 */
int ms_node_check_message(struct ms_node *n, const char *json, size_t len,
                          char *err, size_t errlen);

/*
 * Sends a one-way message. The payload is copied; the caller keeps its
 * buffers. Returns 0 once the message is accepted into its shard's FIFO, or
 * MS_ENOTYPE, MS_E2BIG, MS_EOVERFLOW, MS_EUNAVAIL.
 */
int ms_node_tell(struct ms_node *n, int type, const char *id, size_t idlen,
                 const char *json, size_t len);

/*
 * Sends a request; `cb` is called exactly once, never before this function
 * returns. `timeout_ms` must be > 0 (else MS_EINVAL). On a negative return
 * `cb` is not called.
 */
int ms_node_ask(struct ms_node *n, int type, const char *id, size_t idlen,
                const char *json, size_t len, uint64_t timeout_ms,
                ms_ask_cb cb, void *data);

/* Asks the entity to passivate after the messages accepted before this
 * request (an explicit, ordered stop). A no-op for an inactive entity. */
int ms_node_stop_entity(struct ms_node *n, int type, const char *id,
                        size_t idlen);

/* Copies the node's counters. */
void ms_node_stats(struct ms_node *n, struct ms_stats *out);

/* Writes the node's stats as one JSON object into buf (NUL-terminated,
 * truncated to buflen). Returns the length it needed. */
size_t ms_node_stats_json(struct ms_node *n, char *buf, size_t buflen);

/* Writes the cluster membership as seen by this node as one JSON object
 * (see ms_mb_status_json); "{}" without a cluster. Returns the length it
 * needed. */
size_t ms_node_members_json(struct ms_node *n, char *buf, size_t buflen);

/* Writes {"type":..,"id":..,"shard":N,"owner":"name"|null,"uid":..} for
 * the entity: the owner in this node's copy of the plan. */
/* The shard of an id of `type` (FNV-1a, or the type's partitioner): 0 and
 * *shard, or a negative code (MS_EPARTITION: the partitioner failed). */
int ms_node_shard_of(struct ms_node *n, int type, const char *id,
                     size_t idlen, uint32_t *shard);

size_t ms_node_owner_json(struct ms_node *n, int type, const char *id,
                          size_t idlen, char *buf, size_t buflen);

/* Writes the plan of `type` (a defensive copy with its generation). */
size_t ms_node_allocations_json(struct ms_node *n, int type, char *buf,
                                size_t buflen);

/* Eager creation: activates the entity where it lives; `cb` gets
 * {"created":true} when this request created it, else false. */
int ms_node_activate(struct ms_node *n, int type, const char *id,
                     size_t idlen, uint64_t timeout_ms, ms_ask_cb cb,
                     void *data);

/* 0 when `token` matches the configured admin_token, MS_EINVAL when none
 * is configured, UV_EACCES when it does not match, UV_EPERM when the
 * client is not on this host (`loopback` 0) and the config does not set
 * admin_remote = true. */
int ms_node_check_admin(struct ms_node *n, const char *token, size_t len,
                        int loopback);

/* This node leaves the cluster gracefully (it stops once removed). */
int ms_node_leave(struct ms_node *n);

/* Downs the member at `address` ("host:port", borrowed for the call).
 * Without `force`, a member that this node sees reachable (itself
 * included) is not downed: MS_EBUSY. Returns 0, MS_EBUSY, or MS_EINVAL
 * for an unknown address. */
int ms_node_down(struct ms_node *n, const char *address, int force);

/* Number of messages accepted but not yet handled (all shards): in the
 * shards' FIFOs, and waiting in the router for an owner. */
uint64_t ms_node_pending(struct ms_node *n);

/*
 * Calls `fn` of Lua module `module` with one string argument and returns
 * its string result, newly allocated into *out (caller frees). Used by the
 * bench and by tests. Returns 0, or a negative code with the Lua error
 * text in `err`.
 */
int ms_node_call_lua(struct ms_node *n, const char *module, const char *fn,
                     const char *arg, char **out, char *err, size_t errlen);

/* Runs a full Lua garbage collection; returns the Lua heap size in bytes. */
size_t ms_node_lua_gc(struct ms_node *n);

/* The config's gc_headroom_mb: the most garbage the node's Lua collector
 * lets build up between cycles (also at most five times the live heap;
 * 0: LuaJIT's pause alone). */
int ms_node_gc_headroom_mb(const struct ms_node *n);

#endif
