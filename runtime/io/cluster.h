/*
 * cluster.h -- binds the membership state machine to the transport and the
 * loop: heartbeats, gossip, joins through seeds, leave and down.
 */
#ifndef MS_IO_CLUSTER_H
#define MS_IO_CLUSTER_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "../core/config.h"
#include "../core/frame.h"

struct ms_cluster;

struct ms_cluster_hooks {
    void *data;
    /* A frame of a kind the cluster layer does not handle itself (TELL,
     * ASK, REPLY, CONTROL, ...) from authenticated peer `uid`. */
    void (*on_frame)(void *data, uint64_t uid, const struct ms_frame *f);
    /* The coordinator changed (0: none). */
    void (*on_coordinator)(void *data, uint64_t uid);
    /* Member `uid` reached status `status` (enum ms_mb_status). */
    void (*on_member)(void *data, uint64_t uid, int status, int is_self);
    /* The transport authenticated a connection to peer `uid`: its first, a
     * dial after one ended, or a second one that replaced the first (both
     * nodes dialed at once): what went out on an earlier one may be lost.
     * NULL: not told. */
    void (*on_connected)(void *data, uint64_t uid);
    /* This node was removed or downed: the node should stop. */
    void (*on_self_removed)(void *data);
    /* A membership event (runtime/core/mbevent.h): its number, kind and
     * JSON, borrowed for the call. NULL: events are not made. */
    void (*on_event)(void *data, uint64_t seq, const char *kind,
                     const char *json, size_t len);
};

/* Starts the transport listener and the membership of this node. Returns
 * 0 or a negative code with a one-line reason in `err`. `cfg` is borrowed
 * for the cluster's life. */
int ms_cluster_start(struct ms_cluster **out, uv_loop_t *loop,
                     const struct ms_config *cfg,
                     const struct ms_cluster_hooks *hooks, char *err,
                     size_t errlen);

/* Leaves gracefully: Leaving, then Exiting once the node owns no shards,
 * then Removed (on_self_removed), also from Joining (see ms_mb_leave: a
 * node that never met the cluster is removed after a short grace).
 * MS_EINVAL when this node is Down or Removed already. */
int ms_cluster_leave(struct ms_cluster *c);

/* Downs the member at `address` (operator; borrowed for the call).
 * Unless `force` is set, refuses with MS_EBUSY when a live incarnation at
 * that address is reachable from here (this node itself always is): a
 * member that answers heartbeats may still be running its shards.
 * Returns 0 (also when it is Down already), MS_EBUSY, or MS_EINVAL when
 * no member has this address. */
int ms_cluster_down(struct ms_cluster *c, const char *address, int force);

/* Tells the membership whether member `uid` still owns shards. */
void ms_cluster_set_owns_shards(struct ms_cluster *c, uint64_t uid, int owns);

/* Sends a frame to member `uid`. 0, UV_ENOTCONN, or a negative code. */
int ms_cluster_send(struct ms_cluster *c, uint64_t uid,
                    const struct ms_frame *f);

uint64_t ms_cluster_self_uid(struct ms_cluster *c);
uint64_t ms_cluster_coordinator(struct ms_cluster *c);
/* 1 when `uid` is a member that is Up (or Leaving) and reachable here. */
int ms_cluster_member_usable(struct ms_cluster *c, uint64_t uid);
/* Name of member `uid`, or NULL. Borrowed until the next membership call. */
const char *ms_cluster_member_name(struct ms_cluster *c, uint64_t uid);

/* The membership view as JSON (see ms_mb_status_json). */
size_t ms_cluster_members_json(struct ms_cluster *c, char *buf, size_t len);

/* Transport counters as JSON fields (no braces). */
size_t ms_cluster_stats_json(struct ms_cluster *c, char *buf, size_t len);

/* The membership state machine, for the routing and coordinator layers
 * (borrowed). */
struct ms_membership *ms_cluster_membership(struct ms_cluster *c);

/* Closes the transport and frees the cluster from the close callbacks. */
void ms_cluster_close(struct ms_cluster *c);

#endif
