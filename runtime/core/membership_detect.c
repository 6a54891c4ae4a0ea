/*
 * membership_detect.c -- the membership view's timers (sans-IO): failure
 * detection (heartbeats, their answers, members unreachable after
 * unreachable_after_ms), gossip rounds to `fanout` members, knocking at
 * the seeds while joining, and the end of a leave begun alone. See
 * membership.h for the model and membership_int.h for the state.
 */
#include "membership_int.h"

#include <string.h>

/* --- timers --- */

static void gossip_round(struct ms_membership *m)
{
    uint32_t eligible = 0;
    for (uint32_t i = 0; i < m->st.n; i++)
        eligible += monitored(m, &m->st.recs[i]);
    uint32_t want = eligible < m->fanout ? eligible : m->fanout;
    uint32_t i = m->gossip_cursor == UINT64_MAX
                     ? 0
                     : ms__mb_lower_bound(m->st.recs, sizeof *m->st.recs,
                                          m->st.n, m->gossip_cursor + 1);
    for (uint32_t k = 0; want && k < 2 * m->st.n; k++, i++) {
        if (i >= m->st.n)
            i = 0;
        struct mrec *r = &m->st.recs[i];
        if (!monitored(m, r))
            continue;
        ms__mb_push(m, MS_MB_SEND_GOSSIP, r);
        m->gossip_cursor = r->pub.uid;
        want--;
    }
    ms__mb_knock_seeds(m);
}

/*
 * A node that was never Up and knows no Up member (joining, or leaving
 * before its join went through) also sends its state to each seed that is
 * not a known member: that is how a join starts, and how a seed that may
 * have heard of this node learns that it is leaving.
 */
void ms__mb_knock_seeds(struct ms_membership *m)
{
    const struct mrec *self = ms__mb_find(&m->st, m->self_uid);
    if (!self || ms__mb_oldest(m, MS_MB_UP, MS_MB_UP, 1))
        return;
    if (self->pub.status != MS_MB_JOINING &&
        !(self->pub.status == MS_MB_LEAVING && !self->pub.up_number))
        return;
    for (int s = 0; s < m->nseeds; s++) {
        if (!strcmp(m->seeds[s], self->pub.address))
            continue;
        int known = 0;
        for (uint32_t j = 0; j < m->st.n && !known; j++)
            known = live(m->st.recs[j].pub.status) &&
                    !strcmp(m->st.recs[j].pub.address, m->seeds[s]);
        if (known)
            continue;
        struct ms_mb_action *a = ms__mb_push(m, MS_MB_SEND_GOSSIP, NULL);
        if (a)
            memcpy(a->address, m->seeds[s], sizeof a->address);
    }
}

void ms_mb_tick(struct ms_membership *m, uint64_t now_ms)
{
    ms__mb_begin(m, now_ms);
    if (m->removed)
        return;
    for (uint32_t i = 0; i < m->st.n; i++) {
        struct mrec *r = &m->st.recs[i];
        if (monitored(m, r) && r->pub.reachable &&
            now_ms >= r->last_ack_ms &&
            now_ms - r->last_ack_ms >= m->unreachable_ms) {
            r->pub.reachable = 0;
            ms__mb_push(m, MS_MB_MEMBER_UNREACHABLE, r);
        }
    }
    if (now_ms >= m->next_hb_ms) {
        m->next_hb_ms = now_ms + m->hb_ms;
        for (uint32_t i = 0; i < m->st.n; i++)
            if (monitored(m, &m->st.recs[i]))
                ms__mb_push(m, MS_MB_SEND_HEARTBEAT, &m->st.recs[i]);
    }
    if (now_ms >= m->next_gossip_ms) {
        m->next_gossip_ms = now_ms + m->gossip_ms;
        gossip_round(m);
    }
    if (m->lone_leave_at_ms) {
        struct mrec *self = ms__mb_find(&m->st, m->self_uid);
        if (ms__mb_ever_up(m)) {
            m->lone_leave_at_ms = 0; /* it met the cluster: leave as usual */
        } else if (self && now_ms >= m->lone_leave_at_ms) {
            /* nobody answered: nobody made this node Up or gave it
             * shards, so it removes itself (membership.h, ms_mb_leave) */
            ms__mb_remove_rec(m, self, ++m->st.max_tomb);
            return;
        }
    }
    ms__mb_settle(m, now_ms);
}

uint64_t ms_mb_next_deadline(const struct ms_membership *m, uint64_t now_ms)
{
    if (!m->started)
        return 0;
    if (m->removed)
        return UINT64_MAX;
    uint64_t due = m->next_hb_ms < m->next_gossip_ms ? m->next_hb_ms
                                                     : m->next_gossip_ms;
    for (uint32_t i = 0; i < m->st.n; i++) {
        const struct mrec *r = &m->st.recs[i];
        if (monitored(m, r) && r->pub.reachable &&
            r->last_ack_ms + m->unreachable_ms < due)
            due = r->last_ack_ms + m->unreachable_ms;
    }
    const struct mrec *self = ms__mb_find(&m->st, m->self_uid);
    uint64_t boot = m->started_ms + m->seed_timeout_ms;
    if (self && self->pub.status == MS_MB_JOINING && boot > now_ms &&
        boot < due)
        due = boot;
    if (m->lone_leave_at_ms && m->lone_leave_at_ms < due)
        due = m->lone_leave_at_ms;
    return due > now_ms ? due - now_ms : 0;
}

int ms_mb_on_heartbeat(struct ms_membership *m, uint64_t from_uid,
                       uint64_t now_ms)
{
    (void)now_ms;
    return !m->removed && !ms__mb_tomb_find(&m->st, from_uid);
}

void ms_mb_on_heartbeat_ack(struct ms_membership *m, uint64_t uid,
                            uint64_t now_ms)
{
    ms__mb_begin(m, now_ms);
    struct mrec *r = ms__mb_find(&m->st, uid);
    if (m->removed || !r || uid == m->self_uid)
        return;
    if (now_ms > r->last_ack_ms)
        r->last_ack_ms = now_ms;
    if (!r->pub.reachable) {
        r->pub.reachable = 1;
        ms__mb_push(m, MS_MB_MEMBER_REACHABLE, r);
        ms__mb_settle(m, now_ms);
    }
}
