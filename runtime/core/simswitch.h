/*
 * simswitch.h -- test-only breakage switches of the deterministic
 * simulator (sim/, issue 14). They exist only in the simulator's copy of
 * the core (the ms_core_sim library, compiled with MS_SIM_SWITCHES); the
 * node's core (ms_core) has none: every hook is inside
 * #ifdef MS_SIM_SWITCHES. Each breaks one guarantee on purpose so that a
 * test can show that the simulator's invariants catch it:
 *
 *   two_owners    the coordinator publishes a new allocation to this
 *                 node's own region with another owner at the same
 *                 generation (one-owner-per-generation)
 *   skip_fence    a region does not buffer a moving shard: it keeps
 *                 sending to the old owner and reports its fence at once
 *                 (no-loss / per-sender FIFO in a graceful move)
 *   no_rollback   the coordinator never rolls back a move past its
 *                 deadline (move-ends-in-time)
 *   reply_twice   the dispatcher tells an ask's waiter twice when the
 *                 waiter's callback is this one (the simulator's
 *                 clients; the region's own waiters would crash)
 *                 (ask-ends-once)
 */
#ifndef MS_CORE_SIMSWITCH_H
#define MS_CORE_SIMSWITCH_H

#include "base.h"

#ifdef MS_SIM_SWITCHES
extern ms_ask_cb ms_sim_break_reply_twice;
extern int ms_sim_break_two_owners;
extern int ms_sim_break_skip_fence;
extern int ms_sim_break_no_rollback;
#endif

#endif
