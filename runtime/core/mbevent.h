/*
 * mbevent.h -- membership events (sans-IO): the actions of the membership
 * state machine (membership.h) turned into numbered JSON events for the
 * config's on_member_event hook and the HTTP stream GET /v1/events.
 *
 * Model: the I/O layer hands every action it drains to ms_mbev_on_action
 * and calls ms_mbev_settle once the queue is empty. Each event gets the
 * next number of this node (`seq`, from 1, one sequence for every kind)
 * and is handed to the callback as one JSON object:
 *
 *   {"seq":N,"kind":"member_up","time_ms":T,"node":"<this node>",
 *    "member":{"name":..,"address":..,"uid":"<hex16>","roles":[..],
 *              "status":"up","self":false},
 *    "previous_status":"joining"}
 *
 * kinds: member_joining, member_up, member_leaving, member_exiting,
 * member_downed, member_removed (the status it reached; a status can be
 * skipped, as membership.h says: a member first seen Up gives only
 * member_up, one removed by another node's gossip before this node saw it
 * Down only member_removed), member_unreachable, member_reachable (this
 * node's own observation), coordinator_changed (the oldest Up member) and
 * leader_changed (the member that authors status changes: the
 * coordinator, or, when no member is Up, the oldest Leaving or Exiting
 * member that was once Up). The two are the same member whenever one is
 * Up, so the two kinds mostly come in pairs: coordinator_changed first.
 * Their "member" is the new one and "previous" the one before, each null
 * when there is none; they have no "previous_status".
 *
 * `uid` is the member's 64-bit uid as 16 hex digits, as GET /v1/members
 * writes it. `time_ms` is the wall clock the caller passes (ms since the
 * epoch). A removed member is gone from the view: its roles come from what
 * this module saw of it before (up to MS_MB_MAX_MEMBERS members are
 * kept), else [].
 *
 * Threading: none; one owner calls everything.
 */
#ifndef MS_CORE_MBEVENT_H
#define MS_CORE_MBEVENT_H

#include <stddef.h>
#include <stdint.h>

#include "membership.h"

/* Bytes of one event's JSON, at most (two members with every field at its
 * limit fit). */
#define MS_MBEV_MAX_JSON 4096

/* Receives one event: its number, kind and JSON (borrowed for the call,
 * NUL-terminated). */
typedef void (*ms_mbev_cb)(void *data, uint64_t seq, const char *kind,
                           const char *json, size_t len);

struct ms_mbev;

/* Creates the event source of node `node_name` (copied, <= 64 bytes).
 * 0 and *out (free with ms_mbev_free), or MS_ENOMEM / MS_EINVAL. */
int ms_mbev_new(struct ms_mbev **out, const char *node_name);

/* Frees it. NULL is a no-op. */
void ms_mbev_free(struct ms_mbev *ev);

/*
 * One action drained from `mb` (borrowed for the call). MEMBER_*,
 * reachability and COORDINATOR_CHANGED give an event, and a coordinator
 * change may give a leader_changed after it; other kinds give none.
 * `cb` is called for each event before this returns.
 */
void ms_mbev_on_action(struct ms_mbev *ev, const struct ms_membership *mb,
                       const struct ms_mb_action *a, uint64_t time_ms,
                       ms_mbev_cb cb, void *data);

/* After the action queue was drained: a leader_changed when the leader
 * changed without a coordinator change (the cluster winding down). */
void ms_mbev_settle(struct ms_mbev *ev, const struct ms_membership *mb,
                    uint64_t time_ms, ms_mbev_cb cb, void *data);

/* The number of the last event, 0 before the first. */
uint64_t ms_mbev_seq(const struct ms_mbev *ev);

/* The leader as this module defines it (see above), or NULL. Borrowed
 * like ms_mb_member_at's answer. */
const struct ms_mb_member *ms_mbev_leader(const struct ms_membership *mb);

#endif
