/*
 * bridge_int.h -- what the files of the Lua bridge share (not a public
 * API; bridge.h is). The bridge is split by job:
 *
 *   vm.c          the lua_State, package paths, the one protected call,
 *                 calls into Lua modules, GC, what runs now (watchdog)
 *   config_load.c the config script read into struct ms_config
 *   leaf.c        moonshard.core: the leaf functions handlers call
 *                 (never back into Lua) and ms_lua_next for the FFI
 *   driver.c      the behaviors loaded, driver coroutines resumed
 *                 (ms_bridge_run), asks waited for, errors handled
 *   strategy.c    partitioners and allocation strategies
 *   persist_leaf.c the leaf functions of persistent entities (core.p_*)
 *
 * There is no process-wide bridge: the leaf functions find theirs in an
 * upvalue, the driver passes it to ms_lua_next.
 */
#ifndef MS_LUA_BRIDGE_INT_H
#define MS_LUA_BRIDGE_INT_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <lua.h>

#include "../core/log.h"
#include "../core/running.h"
#include "bridge.h"

#define POOL_MAX 16
/* type=, shard= and id= of an entity: an id escapes to 4 bytes a byte */
#define ENTITY_FIELDS_MAX (128 + 4 * MS_LOG_VALUE_MAX)

/* The pace of one VM's collector (vm.c): what ms_gc_pace_set needs to live as
 * long as the VM (set `closing` before lua_close). */
struct ms_gc_pace {
    int mt;          /* registry ref: the sentinel's metatable; 0: none */
    int closing;     /* lua_close runs: the sentinel stays down */
    int pause;       /* the pause in use, percent */
    size_t headroom; /* bytes; 0: LuaJIT's pause alone */
    uint64_t cycles; /* cycles the sentinel saw end */
    int settle;      /* a cycle ended: settle the threshold (vm.c) */
    int armed;       /* a sentinel waits for the next cycle; 0: out of
                      * memory when one was due (vm.c) */
};
int ms_gc_pace_set(lua_State *L, struct ms_gc_pace *g, int headroom_mb);
/* After Lua ran: the threshold after a cycle's end, from the heap now. */
void ms__gc_pace_settle(lua_State *L, struct ms_gc_pace *g);

/* The entities whose state host.lua set this round (activation, a new
 * table returned by receive, migrate, recovery, forget), which it notes
 * through the FFI (a classic C call would end the compiled trace of each
 * such message); their addresses are taken at the round's end
 * (ms__bridge_restated_flush). Once it is full, host.lua calls
 * core.state_at instead. */
/* ms_lua_next's answer when the dispatcher parked handles: the driver
 * forgets their states (ms_lua_parked, ms_lua_release_parked) */
#define MS_LUA_PARKED 0xffffffffu

#define MS_RESTATED_MAX 8192 /* two a delivery (activation, receive) in a
                                round of node.c's ROUND_BUDGET (4096) */
struct ms_lua_restated {
    uint32_t n;
    uint32_t h[MS_RESTATED_MAX];
};

struct ms_bridge {
    lua_State *L;
    struct ms_lalloc *lalloc; /* L's allocator (lalloc.c); NULL: LuaJIT's */
    uv_loop_t *loop;
    struct ms_dispatch *d;
    const struct ms_config *cfg;
    char home[512];

    int driver_fn;     /* registry ref: moonshard.host.driver */
    int check_fn;      /* registry ref: moonshard.host.check */
    int on_error_fn;   /* registry ref: moonshard.host.on_error */
    int traceback_fn;  /* registry ref: debug.traceback */
    int gc_step_fn;    /* registry ref: gc_step_call (vm.c) */
    int cur_driver;    /* registry ref of the driver in use, or LUA_NOREF */
    int pool[POOL_MAX];
    int npool;
    struct waiting *co_of; /* [handle] -> its coroutine waiting in an ask */
    uint32_t nco;
    /* [handle] -> the address of its entity's Lua state (NULL: none
     * known), taken for the handles in `restated` at the end of a round
     * (or by core.state_at once it is full); a delivery prefetches it
     * while its payload is decoded (leaf.c) */
    const void **state_addr;
    uint32_t nstate_addr;
    int states_ref;                  /* registry ref: host.lua's states */
    struct ms_lua_restated restated; /* written by host.lua (FFI) */

    uint32_t cur_h;       /* entity whose handler runs now */
    int cur_kind;         /* its delivery's kind */
    uint64_t ask_corr;    /* the ask the running handler issued last */
    uint64_t cur_start_ns;
    int budget;
    int handled;
    uint64_t slow;
    uint64_t min_slow_ms; /* smallest slow_handler_ms of all types */
    struct ms_router *router; /* the one send path; NULL: closing */
    struct ms_bridge_reports reports;
    struct ms_bridge_persist persist; /* data NULL: no database */

    /* partitioners of the types that have one (see ms_bridge_partition) */
    int *part_ref;        /* [type] registry ref, or LUA_NOREF */
    uint64_t *part_fails; /* [type] failures, for the log */
    int npart;
    int in_leaf;          /* inside a core.* send or owner lookup */
    int in_next;          /* inside ms_lua_next (an FFI call) */
    int in_partition;     /* a partitioner runs */
    int pc_type;          /* last answer: type, id, shard */
    size_t pc_len;
    uint32_t pc_shard;
    char pc_id[MS_MAX_ID];

    /* what runs now, for the watchdog thread (see running.h) */
    struct ms_running running;

    /* the config's on_member_event (event_hook.c) */
    int event_hook;              /* registry ref, or LUA_NOREF */
    uint64_t hook_deadline_ns;   /* the running call's budget ends then */
    int hook_timed_out;          /* the running call ran past it */
    struct ms_bridge_hook_stats hook_stats;

    struct ms_gc_pace gc; /* the collector's pace (vm.c) */
};

/* An entity suspended in an ask: its coroutine, the kind of the message
 * it was handling, and the ask it waits for. A finished ask resumes the
 * coroutine only if it is that ask (an ask abandoned by a handler that
 * went on, or died, must not answer a later one). */
struct waiting {
    int ref;
    int kind;
    uint64_t corr;
};

/* ---- leaf.c: the states' addresses --------------------------------------- */

/* Takes the addresses of the states noted in b->restated (from
 * host.lua's states table) and empties it. Runs in C context, between
 * rounds. */
void ms__bridge_restated_flush(struct ms_bridge *b);

/* Handles at or above this get no address kept (no prefetch). */
#define MS_STATE_ADDR_MAX (1u << 28)

/* Keeps `p` as entity h's state address (NULL forgets it); 0, or -1 when
 * h is out of range or the array cannot grow (the entity is then not
 * prefetched; nothing else changes). */
int ms__bridge_state_addr_set(struct ms_bridge *b, uint32_t h, const void *p);
/* The address kept for h, NULL when none. */
const void *ms__bridge_state_addr(const struct ms_bridge *b, uint32_t h);

/* Sentinels yielded by driver coroutines; their addresses are the keys
 * (driver.c; core.ASK, core.IDLE and core.FREE in Lua). */
extern char ms__bridge_tok_ask, ms__bridge_tok_idle, ms__bridge_tok_free;

/* ---- vm.c ---------------------------------------------------------------- */

/* The monotonic coarse clock in ns (handler timing). Handler timing only
 * needs to see slow handlers (>= milliseconds), so the coarse clock is
 * enough and costs a few nanoseconds; inline, as it runs per message. */
static inline uint64_t ms__bridge_clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The loop's time in ms. */
static inline uint64_t ms__bridge_now_ms(struct ms_bridge *b)
{
    return uv_now(b->loop);
}

/* Publishes Lua code other than a handler as running (see running.h),
 * unless something is published already. Returns whether it published,
 * for ms__bridge_unmark. */
int ms__bridge_mark(struct ms_bridge *b, int kind, int type,
                    const char *text, size_t len);
void ms__bridge_unmark(struct ms_bridge *b, int marked);

/* Calls the function below `nargs` arguments on b->L's stack with a
 * traceback handler. Returns 0 with `nres` results on the stack, or a
 * negative code with the error text in `err` and the stack restored. */
int ms__bridge_pcall(struct ms_bridge *b, int nargs, int nres, char *err,
                     size_t errlen);

/* Calls require(module).fn with the `nargs` arguments on the stack;
 * leaves `nres` results (ms__bridge_pcall's contract). */
int ms__bridge_call_module(struct ms_bridge *b, const char *module,
                           const char *fn, int nargs, int nres, char *err,
                           size_t errlen);

/* ms__bridge_call_module, published for the watchdog as "module.fn" (and
 * the entity type it is for, when not NULL). */
int ms__bridge_call_labelled(struct ms_bridge *b, const char *module,
                             const char *fn, const char *type_name,
                             int nargs, int nres, char *err, size_t errlen);

/* core.now() and moonshard.clock.now(): wall-clock seconds. */
int ms__bridge_l_now(lua_State *L);

/* ---- leaf.c -------------------------------------------------------------- */

/* Pushes moonshard.core, its functions bound to b (package.preload). */
int ms__bridge_open_core(lua_State *L);

/* The log fields naming entity h: type=, shard=, id=, each escaped. */
void ms__bridge_entity_fields(struct ms_bridge *b, uint32_t h, char *buf,
                              size_t len);

/* Finishes entity h's current message: timing, then the dispatcher. */
void ms__bridge_finish(struct ms_bridge *b, uint32_t h);

/* ---- persist_leaf.c ------------------------------------------------------ */

/* Adds core.p_load, core.p_append, core.p_save (bound to bridge `b`) to
 * the table on top of L's stack. */
void ms__bridge_open_persist(lua_State *L, void *b);

/* ---- event_hook.c -------------------------------------------------------- */

/* Keeps the config's on_member_event (the function on top of L's stack,
 * popped) for ms_bridge_member_event. */
void ms__bridge_set_event_hook(struct ms_bridge *b);

/* ---- strategy.c ---------------------------------------------------------- */

/* Room for the partitioner refs of n types (the refs of an earlier load
 * are released). 0 or MS_ENOMEM. */
int ms__bridge_part_alloc(struct ms_bridge *b, int n);

#endif
