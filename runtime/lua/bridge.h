/*
 * bridge.h -- the C/Lua boundary: the only part of the host that includes
 * lua.h. It owns the node's lua_State, calls Lua through one protected
 * wrapper, and exposes the dispatcher to Lua as leaf functions
 * (moonshard.core) that only enqueue and never call back into Lua.
 *
 * The leaf functions find their bridge in an upvalue (no process-wide
 * bridge); the files behind this header are mapped in bridge_int.h.
 */
#ifndef MS_LUA_BRIDGE_H
#define MS_LUA_BRIDGE_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "../core/config.h"
#include "../core/dispatch.h"

struct ms_router;

struct ms_bridge;

/* Creates the Lua VM with package paths for `home`/lua, `home`/entities
 * and the config file's folder. Returns 0 or MS_ENOMEM. */
int ms_bridge_new(struct ms_bridge **out, uv_loop_t *loop, const char *home);

/* Closes the VM and frees the bridge. */
void ms_bridge_free(struct ms_bridge *b);

/*
 * Loads and validates the config script at `path` through
 * moonshard.config, and fills `cfg` for node `node_name` (NULL: the first
 * node). Returns 0, or MS_ECONFIG with the one-line reason ("FILE:LINE:
 * field: ...") in `err`. On success the caller owns cfg's allocations
 * (ms_config_free).
 */
int ms_bridge_load_config(struct ms_bridge *b, const char *path,
                          const char *node_name, struct ms_config *cfg,
                          char *err, size_t errlen);

/* Loads the config script at `path` and copies the names of its nodes
 * (at most `max`). Returns how many, or MS_ECONFIG with `err`. */
int ms_bridge_node_names(struct ms_bridge *b, const char *path,
                         char names[][64], int max, char *err, size_t errlen);

/* Binds the dispatcher (borrowed) and loads every behavior module. A
 * module that fails to load is logged and its type marked unavailable;
 * this never fails the node. Returns 0 or a negative code with `err`. */
int ms_bridge_start(struct ms_bridge *b, struct ms_dispatch *d,
                    const struct ms_config *cfg, char *err, size_t errlen);

/* What core.owner and core.stats report: the node's JSON writers of the
 * control API (see ms_node_owner_json and ms_node_stats_json). */
struct ms_bridge_reports {
    void *data;
    size_t (*owner)(void *data, int type, const char *id, size_t idlen,
                    char *buf, size_t len);
    size_t (*stats)(void *data, char *buf, size_t len);
};

/* The one send path of entity sends (core.tell, ask, activate) and of
 * core.allocations and core.reconcile: the node's router (borrowed), and
 * what core.owner and core.stats report (copied). NULL (the node is
 * closing) refuses sends with MS_ECANCELED. */
void ms_bridge_set_router(struct ms_bridge *b, struct ms_router *r,
                          const struct ms_bridge_reports *reports);

/*
 * The node's side of persistent entities (issue 11), called by the leaf
 * functions core.p_load, core.p_append and core.p_save (persist_leaf.c).
 * Each starts the work for the entity (type, shard, id; borrowed for the
 * call) and ends ask `corr` later with ms_dispatch_ask_complete: on
 * success, load's payload is the loaded journal (the framing is
 * documented in persist_leaf.c), a write's is "{}"; on failure the error
 * object {"code","message"}. A hook that returns a negative code does
 * not end the ask (the leaf does). `state` NULL in save: delete.
 * Strings and arrays are borrowed for the call.
 */
/* The operation id a write records (issue 11 point 7) and the reply to
 * keep with it (NULL: a tell); borrowed for the call. */
struct ms_bridge_op {
    const char *id;
    const char *reply;
    size_t reply_len;
};

struct ms_bridge_persist {
    void *data;
    int (*load)(void *data, int type, uint32_t shard, const char *id,
                size_t idlen, int64_t corr);
    /* `op`: NULL, or the operation to record in the same transaction */
    int (*append)(void *data, int type, uint32_t shard, const char *id,
                  size_t idlen, int64_t first_seq, int n,
                  const char *const *events, const size_t *lens,
                  const char *snapshot, size_t snapshot_len,
                  int delete_covered, const struct ms_bridge_op *op,
                  int64_t corr);
    int (*save)(void *data, int type, uint32_t shard, const char *id,
                size_t idlen, int64_t expected, const char *state,
                size_t len, const struct ms_bridge_op *op, int64_t corr);
    /* records `op` alone (a command that wrote nothing else) */
    int (*record)(void *data, int type, uint32_t shard, const char *id,
                  size_t idlen, const struct ms_bridge_op *op, int64_t corr);
    /* looks `op_id` up: the wait ends with "0" (not committed), "1" (a
     * tell committed) or "2" and the stored reply */
    int (*find)(void *data, int type, uint32_t shard, const char *id,
                size_t idlen, const char *op_id, int64_t corr);
};

/* Sets the hooks (copied); NULL: persistent writes and loads fail with
 * MS_EDBCONN (no database). */
void ms_bridge_set_persist(struct ms_bridge *b,
                           const struct ms_bridge_persist *p);

/* Runs ready work: resumes entities whose asks finished, then up to
 * `budget` deliveries. Returns the number of messages handled. */
int ms_bridge_run(struct ms_bridge *b, int budget);

/* One incremental GC step of `kb` kilobytes (called when the loop idles).
 * Returns 1 when the step finished a collection cycle. */
int ms_bridge_gc_step(struct ms_bridge *b, int kb);

/* Full collection; returns the Lua heap in bytes. */
size_t ms_bridge_gc_full(struct ms_bridge *b);

/* The collector's pace (vm.c): up to `headroom_mb` MB of garbage, and
 * five times the live heap, build up between cycles, at least LuaJIT's
 * doubling of the live heap; 0 leaves LuaJIT's pause. Called once, before the first message. MS_ENOMEM. */
int ms_bridge_gc_pace(struct ms_bridge *b, int headroom_mb);

struct ms_bridge_gc {
    size_t heap;     /* the Lua heap now, bytes (live and garbage) */
    uint64_t cycles; /* cycles finished since the pace was set */
    int pause;       /* the pause in use, percent */
    size_t headroom; /* bytes; 0: LuaJIT's pause alone */
};
void ms_bridge_gc_stats(struct ms_bridge *b, struct ms_bridge_gc *out);

/* The ms_partition_fn of the dispatcher (data: the bridge): runs the
 * type's partitioner function from the config, partitioner(id,
 * shard_count), on the coroutine of the core.* call under way (an
 * entity's send) or the main state, and checks that it returns an integer
 * in 0..shard_count-1. A failure is logged (the first ones, then every
 * power of two) and returns MS_EPARTITION. The last answer is kept, since
 * the router and the dispatcher ask for the same id in a row. */
int ms_bridge_partition(void *data, int type, const char *id, size_t idlen,
                        uint32_t shard_count, uint32_t *shard);

/* moonshard.host.check: lua-cjson's verdict on `json` (0, MS_EBADJSON or
 * MS_ENOTTABLE) and, on a refusal, its message in `err`. Lenient (it takes
 * `1.`, raw control characters...): ms_node_check_message uses it only to
 * explain what the strict check refused, never to accept. */
int ms_bridge_check(struct ms_bridge *b, const char *json, size_t len,
                    char *err, size_t errlen);

/* See ms_node_call_lua. */
int ms_bridge_call(struct ms_bridge *b, const char *module, const char *fn,
                   const char *arg, char **out, char *err, size_t errlen);

/* Runs require(module)[fn](arg) in a fresh, separate Lua VM with the same
 * package paths (and moonshard.clock), then closes it; the bench's floor
 * runs there, with no runtime around it; gc_headroom_mb > 0 gives its
 * collector the node's pace (ms_bridge_gc_pace). *out is the string result
 * (caller frees). Returns 0 or a negative code with `err`. */
int ms_lua_run_isolated(const char *home, const char *module, const char *fn,
                        const char *arg, int gc_headroom_mb, char **out,
                        char *err, size_t errlen);

/* Runs the allocation strategy of `type_name` (moonshard.alloc) on a view
 * (JSON, see lua/moonshard/alloc.lua). Returns 0 with the chosen member's
 * name, or a negative code with the strategy's reason in `err`. */
/* Runs the rebalance of `type_name` (moonshard.alloc.rebalance) over
 * `view_json`: stores at most `max` shards in out[] and returns their
 * number, or a negative code with a reason in err. */
/* moonshard.alloc.eligible(type_name, member_json): 1 when the member may
 * own the type's shards (the strategy's `eligible`; 1 without one, and
 * when it fails, logged). */
int ms_bridge_eligible(struct ms_bridge *b, const char *type_name,
                       const char *member_json);

int ms_bridge_rebalance(struct ms_bridge *b, const char *type_name,
                        const char *view_json, uint32_t *out, size_t max,
                        char *err, size_t errlen);

int ms_bridge_allocate(struct ms_bridge *b, const char *type_name,
                       uint32_t shard, const char *view_json, char *name,
                       size_t namelen, char *err, size_t errlen);

/* moonshard.alloc.allocate_many: shards[0..n) placed in order over one
 * view (ms_router_allocate_many_fn); names[i * namelen] "" where shard i
 * has no member, with its reason in err[i * errlen]. 0, or a negative
 * code with the reason in err[0]. */
int ms_bridge_allocate_many(struct ms_bridge *b, const char *type_name,
                            const uint32_t *shards, size_t n,
                            const char *view_json, char *names,
                            size_t namelen, char *err, size_t errlen);

/*
 * Membership events (runtime/core/mbevent.h) and the config's
 * on_member_event hook (lua/moonshard/events.lua, README "Membership
 * events"). ms_bridge_member_event calls the hook with the event `json`
 * (borrowed for the call) decoded to a table, on the main state, with
 * the isolation of a handler: an error is logged and counted, never
 * raised further; the call is published to the watchdog as
 * "on_member_event"; a call that runs past MS_EVENT_HOOK_BUDGET_MS is
 * stopped by a count hook with an error, even one the hook catches (JIT
 * compilation is off for the hook's own code and the functions in its
 * upvalues, so the count hook sees their loops; other code it calls is
 * watched by the watchdog only, as handlers are), and one past MS_EVENT_HOOK_SLOW_MS is logged as slow. Returns 0,
 * or a negative code when the hook failed. Without a hook: 0.
 */
#define MS_EVENT_HOOK_BUDGET_MS 1000
#define MS_EVENT_HOOK_SLOW_MS 100

struct ms_bridge_hook_stats {
    uint64_t calls;    /* hook calls */
    uint64_t errors;   /* ... that raised an error (timeouts included) */
    uint64_t timeouts; /* ... that ran past the budget */
    uint64_t slow;     /* ... that took MS_EVENT_HOOK_SLOW_MS or more */
};

int ms_bridge_member_event(struct ms_bridge *b, const char *json,
                           size_t len);

/* 1 when the config has an on_member_event hook. */
int ms_bridge_has_member_hook(struct ms_bridge *b);

/* The hook's counters so far. */
void ms_bridge_member_hook_stats(struct ms_bridge *b,
                                 struct ms_bridge_hook_stats *out);

/* Slow handlers seen so far are counted here. */
uint64_t ms_bridge_slow_count(struct ms_bridge *b);

/* What the loop thread runs now: the handler (entity type, shard, id) or
 * other Lua code, published at every delivery for a reader on another
 * thread (runtime/core/running.h). Owned by the bridge; valid until
 * ms_bridge_free. */
struct ms_running;
const struct ms_running *ms_bridge_running(struct ms_bridge *b);

#endif
