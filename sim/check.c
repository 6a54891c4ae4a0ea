/*
 * check.c -- the invariants of the simulation, checked after every event
 * (check_after_event), at every delivery and commit, and at the end of a
 * run (check_final). Each failure names its invariant:
 *
 *   one-owner-per-generation   no two nodes' plans give one (type, shard,
 *                              generation) two different owners
 *   only-up                    per incarnation: a shard's plan generation,
 *                              the coordinator's terms and generations and
 *                              the lease epochs it saw never go down; the
 *                              table's epochs only go up
 *   single-activation          an ordinary entity is active on at most one
 *                              node while the cluster is healthy (no fault
 *                              active, every view converged and equal,
 *                              every live member reachable)
 *   one-committer              a commit the table accepted was made by the
 *                              current lease holder, and commits of a shard
 *                              never go back to an older epoch
 *   no-loss-in-graceful-move   a tell accepted while no fault was near is
 *                              delivered (moves and leaves are not faults)
 *   per-sender-fifo            one sender's messages reach an entity in
 *                              send order, each at most once
 *   ask-ends-once              every ask ends, and exactly once
 *   move-ends-in-time          a move is finished or rolled back within
 *                              handoff_timeout (+ one second of ticks)
 *   converges-after-faults     once faults stop, within the run's bound:
 *                              every node Up, views converged and equal,
 *                              one coordinator, its plan published and
 *                              equal to every region's, every shard owned
 *                              by a live member
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "world.h"

/* --- (type, shard, generation) -> owner ----------------------------------- */

static uint64_t own_hash(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return k;
}

static void own_grow(void);

/* Records the owner; returns the owner recorded before (or `owner`). */
static uint64_t own_put(uint64_t key, uint64_t owner)
{
    if (2 * (W.own_n + 1) > W.own_cap)
        own_grow();
    size_t i = own_hash(key) & (W.own_cap - 1);
    while (W.own_key[i]) {
        if (W.own_key[i] == key)
            return W.own_val[i];
        i = (i + 1) & (W.own_cap - 1);
    }
    W.own_key[i] = key;
    W.own_val[i] = owner;
    W.own_n++;
    return owner;
}

static void own_grow(void)
{
    uint64_t *k = W.own_key, *v = W.own_val;
    size_t cap = W.own_cap;
    W.own_cap *= 2;
    W.own_key = calloc(W.own_cap, sizeof *W.own_key);
    W.own_val = calloc(W.own_cap, sizeof *W.own_val);
    W.own_n = 0;
    for (size_t i = 0; i < cap; i++)
        if (k[i])
            own_put(k[i], v[i]);
    free(k);
    free(v);
}

/* --- after every event ---------------------------------------------------- */

static void check_node(struct node *n, int ticked)
{
    for (int t = 0; t < SIM_NTYPES; t++) {
        uint32_t sc = n->tc[t].shard_count;
        for (uint32_t s = 0; s < sc; s++) {
            uint64_t gen;
            uint64_t owner = ms_region_owner(n->rg, t, s, &gen);
            if (gen == n->gen_seen[t][s])
                continue;
            if (gen < n->gen_seen[t][s]) {
                violation("only-up", "%s: %s/%u went from generation %llu "
                          "down to %llu", n->name, n->tc[t].name, s,
                          (unsigned long long)n->gen_seen[t][s],
                          (unsigned long long)gen);
                return;
            }
            n->gen_seen[t][s] = gen;
            trace((int)(n - W.n), "plan %s/%u -> %016llx at %llu",
                  n->tc[t].name, s, (unsigned long long)owner,
                  (unsigned long long)gen);
            uint64_t key = (gen << 6) | ((uint64_t)t << 5) | s;
            uint64_t before = own_put(key, owner);
            if (before != owner) {
                violation("one-owner-per-generation", "%s/%u at generation "
                          "%llu: %s has owner %016llx, another node had "
                          "%016llx", n->tc[t].name, s,
                          (unsigned long long)gen, n->name,
                          (unsigned long long)owner,
                          (unsigned long long)before);
                return;
            }
        }
    }
    struct ms_coord *c = ms_region_coord(n->rg);
    uint64_t mt = ms_coord_max_term(c), cg = ms_coord_generation(c);
    if (mt < n->max_term_seen || cg < n->coord_gen_seen) {
        violation("only-up", "%s: coordinator term %llu -> %llu, generation "
                  "%llu -> %llu", n->name,
                  (unsigned long long)n->max_term_seen,
                  (unsigned long long)mt,
                  (unsigned long long)n->coord_gen_seen,
                  (unsigned long long)cg);
        return;
    }
    n->max_term_seen = mt;
    n->coord_gen_seen = cg;
    const struct ms_lease *l = ms_region_lease(n->rg);
    for (uint32_t s = 0; l && s < SIM_ACCOUNT_SHARDS; s++) {
        uint64_t e = ms_lease_epoch(l, 1, s);
        if (e < n->epoch_seen[s]) {
            violation("only-up", "%s: the lease epoch of Account/%u went "
                      "from %llu down to %llu", n->name, s,
                      (unsigned long long)n->epoch_seen[s],
                      (unsigned long long)e);
            return;
        }
        n->epoch_seen[s] = e;
    }
    /* a move's deadline is kept by the coordinator's tick (the region's
     * sweep): checked right after one, so that a paused coordinator is
     * judged once it runs again */
    if (ticked && ms_coord_active(c)) {
        struct ms_coord_move_stats ms;
        ms_coord_move_stats(c, &ms);
        for (size_t i = 0; i < ms.in_progress; i++) {
            struct ms_coord_move_info mi;
            if (ms_coord_move_at(c, i, node_now(n), &mi) &&
                mi.age_ms > SIM_HANDOFF_MS + 1000) {
                violation("move-ends-in-time", "%s: the move of %s/%u from "
                          "%016llx is %llu ms old (deadline %d ms)",
                          n->name, n->tc[mi.type].name, mi.shard,
                          (unsigned long long)mi.from,
                          (unsigned long long)mi.age_ms, SIM_HANDOFF_MS);
                return;
            }
        }
    }
}

void check_after_event(int slot, int ticked)
{
    if (slot >= 0 && W.n[slot].alive)
        check_node(&W.n[slot], ticked);
    if (W.failed)
        return;
    int dup = -1;
    for (int e = 0; e < W.nents; e++)
        if (W.ents[e].type == 0 && W.act_count[e] > 1) {
            dup = e;
            break;
        }
    if (dup >= 0 && world_healthy()) {
        char where[128] = "";
        size_t o = 0;
        for (int s = 0; s < W.nslots; s++)
            if (W.n[s].alive && W.n[s].active[dup])
                o += (size_t)snprintf(where + o, sizeof where - o, " %s",
                                      W.n[s].name);
        violation("single-activation", "entity %s is active on%s while the "
                  "cluster is healthy", W.ents[dup].id, where);
    }
}

void check_delivery(int slot, int ent, int inc, uint64_t seq, size_t m)
{
    struct msg *g = &W.msgs[m];
    W.res->delivered++;
    if (g->ent != ent || g->inc != inc || g->seq != seq) {
        violation("per-sender-fifo", "%s: message #%zu arrived at %s with "
                  "other content", W.n[slot].name, m, W.ents[ent].id);
        return;
    }
    g->delivered++;
    if (inc < 0 || inc >= SIM_MAX_INCS || W.inc_zombie[W.n[slot].inc])
        return;
    if (seq <= W.last_deliv[inc][ent]) {
        violation("per-sender-fifo", "%s: %s got q%llu from i%d after "
                  "q%llu (out of order or twice)", W.n[slot].name,
                  W.ents[ent].id, (unsigned long long)seq, inc,
                  (unsigned long long)W.last_deliv[inc][ent]);
        return;
    }
    W.last_deliv[inc][ent] = seq;
}

void check_commit(int type, uint32_t shard, int inc, const char *owner,
                  uint64_t epoch, int64_t db_now)
{
    const struct leasedb_row *r = leasedb_row(&W.db, type, shard);
    if (!leasedb_holds(&W.db, type, shard, owner, epoch, db_now)) {
        violation("one-committer", "a commit of Account/%u by %s (i%d) "
                  "with epoch %llu succeeded while the lease row says "
                  "owner %s epoch %llu, %s", shard, owner, inc,
                  (unsigned long long)epoch, r ? r->owner : "-",
                  r ? (unsigned long long)r->epoch : 0ULL,
                  r && r->expires_at_ms > db_now ? "live" : "expired");
        return;
    }
    if (epoch < W.commit_epoch[shard] ||
        (epoch == W.commit_epoch[shard] && inc != W.commit_inc[shard] &&
         W.inc_alive[W.commit_inc[shard]])) {
        violation("one-committer", "Account/%u: i%d committed with epoch "
                  "%llu after i%d with epoch %llu", shard, inc,
                  (unsigned long long)epoch, W.commit_inc[shard],
                  (unsigned long long)W.commit_epoch[shard]);
        return;
    }
    W.commit_epoch[shard] = epoch;
    W.commit_inc[shard] = inc;
}

/* --- at the end ----------------------------------------------------------- */

static int near_fault(uint64_t t)
{
    for (int i = 0; i < W.nfaults; i++) {
        uint64_t s = W.faults[i].start, e = W.faults[i].end;
        if (s <= t + 15000 && (e == UINT64_MAX || e + 10000 >= t))
            return 1;
    }
    return 0;
}

/* The convergence predicate; with `loud` a failure is a violation. */
int check_converged(int loud)
{
    uint64_t digest = 0, leader = 0;
    struct node *cn = NULL;
    for (int s = 0; s < W.nslots; s++) {
        struct node *n = &W.n[s];
        if (!n->alive)
            continue;
        const struct ms_mb_member *ld = ms_mb_leader(n->mb);
        if (ms_mb_self_status(n->mb) != MS_MB_UP || !ms_mb_converged(n->mb) ||
            (digest && ms_mb_digest(n->mb) != digest) || !ld ||
            (leader && ld->uid != leader)) {
            if (loud)
                violation("converges-after-faults", "%s: status %s, converged "
                      "%d, leader %016llx: the views did not converge "
                      "within %llu ms after the faults", n->name,
                      ms_mb_status_name(ms_mb_self_status(n->mb)),
                      ms_mb_converged(n->mb),
                      ld ? (unsigned long long)ld->uid : 0ULL,
                      (unsigned long long)(W.now - W.sch->faults_end_ms));
            return 0;
        }
        digest = ms_mb_digest(n->mb);
        leader = ld->uid;
        if (n->uid == leader)
            cn = n;
    }
    if (!cn || !ms_coord_ready(ms_region_coord(cn->rg))) {
        if (loud)
                violation("converges-after-faults", "no ready coordinator %llu ms "
                  "after the faults",
                  (unsigned long long)(W.now - W.sch->faults_end_ms));
        return 0;
    }
    struct ms_coord *c = ms_region_coord(cn->rg);
    for (int t = 0; t < SIM_NTYPES; t++)
        for (uint32_t s = 0; s < cn->tc[t].shard_count; s++) {
            uint64_t g;
            uint64_t o = ms_coord_owner(c, t, s, &g);
            int os = -1;
            for (int k = 0; k < W.nslots; k++)
                if (W.n[k].alive && W.n[k].uid == o)
                    os = k;
            if (!o || os < 0) {
                if (loud)
                violation("converges-after-faults", "%s/%u has no live "
                          "owner (%016llx) %llu ms after the faults",
                          cn->tc[t].name, s, (unsigned long long)o,
                          (unsigned long long)(W.now -
                                               W.sch->faults_end_ms));
                return 0;
            }
            for (int k = 0; k < W.nslots; k++) {
                if (!W.n[k].alive)
                    continue;
                uint64_t g2;
                uint64_t o2 = ms_region_owner(W.n[k].rg, t, s, &g2);
                /* a region may lag (plans are repaired when used: a
                 * NOT_OWNER makes the sender ask again), but never be
                 * ahead of the coordinator with another owner */
                if (g2 > g && o2 != o) {
                    if (loud)
                        violation("converges-after-faults", "%s/%u: %s's "
                                  "plan says %016llx at %llu, ahead of the "
                                  "coordinator's %016llx at %llu",
                                  cn->tc[t].name, s, W.n[k].name,
                                  (unsigned long long)o2,
                                  (unsigned long long)g2,
                                  (unsigned long long)o,
                                  (unsigned long long)g);
                    return 0;
                }
            }
        }
    return 1;
}

void check_final(void)
{
    if (!W.converged_at)
        check_converged(1);
    if (W.failed)
        return;
    uint64_t end = W.now;
    for (size_t m = 0; m < W.nmsgs && !W.failed; m++) {
        struct msg *g = &W.msgs[m];
        if (g->final && g->delivered <= 0) {
            violation("converges-after-faults", "the tell #%zu of i%d to "
                      "%s (shard %u), sent %llu ms after the faults, was "
                      "not delivered within %llu ms", m, g->inc,
                      W.ents[g->ent].id, W.ents[g->ent].shard,
                      (unsigned long long)(g->t - W.sch->faults_end_ms),
                      (unsigned long long)(end - g->t));
            break;
        }
        if (g->kind == 2 && !g->ended &&
            g->t + SIM_ASK_TIMEOUT_MS + 2000 < end)
            violation("ask-ends-once", "ask #%zu of %s (i%d q%llu) at %llu "
                      "ms never ended", m, W.ents[g->ent].id, g->inc,
                      (unsigned long long)g->seq, (unsigned long long)g->t);
        if (g->kind == 1 && g->delivered == 0 && g->t + 15000 < end &&
            !near_fault(g->t) &&
            (W.inc_alive[g->inc] || W.inc_stop_t[g->inc] > g->t + 15000))
            violation("no-loss-in-graceful-move", "tell #%zu to %s (i%d "
                      "q%llu) accepted at %llu ms, no fault near, never "
                      "delivered", m, W.ents[g->ent].id, g->inc,
                      (unsigned long long)g->seq, (unsigned long long)g->t);
    }
}
