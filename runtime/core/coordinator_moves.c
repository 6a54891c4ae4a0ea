/*
 * coordinator_moves.c -- the coordinator's handoff moves (sans-IO): a
 * move's steps (HANDOFF and the regions' fences, STOP to the old owner,
 * STOPPED and the placing of the shard), its deadline and resends, the
 * moves of leaving members and the rebalance rounds. See coordinator.h for
 * the model (Moves) and coordinator_int.h for the state.
 */
#include "coordinator_int.h"
#include "simswitch.h"

#include <stdlib.h>
#include <string.h>

/* --- moves --------------------------------------------------------------- */

static int entry_cmp(const void *a, const void *b)
{
    const struct ms_plan_entry *x = a, *y = b;
    return x->shard < y->shard ? -1 : x->shard > y->shard;
}

static int u32_cmp(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static struct move *find_move(struct ms_coord *c, int ti, uint32_t shard)
{
    if (!c->types[ti].moving || !c->types[ti].moving[shard])
        return NULL;
    for (size_t i = 0; i < c->nmoves; i++)
        if (c->moves[i].ti == ti && c->moves[i].shard == shard)
            return &c->moves[i];
    return NULL;
}

static void drop_move(struct ms_coord *c, struct move *mv)
{
    c->types[mv->ti].moving[mv->shard] = 0;
    free(mv->need);
    *mv = c->moves[--c->nmoves];
}

void ms__coord_forget_move(struct ms_coord *c, int ti, uint32_t shard)
{
    struct move *mv = find_move(c, ti, shard);
    if (mv) {
        c->mst.aborted++;
        drop_move(c, mv);
    }
}

/* Forgets every move (this object stops coordinating); a next
 * coordinator finishes nothing and rolls everything back by publishing
 * the regions' views at a higher generation. */
void ms__coord_clear_moves(struct ms_coord *c)
{
    c->mst.aborted += c->nmoves;
    for (size_t i = 0; i < c->nmoves; i++) {
        struct ctype *t = &c->types[c->moves[i].ti];
        if (t->moving)
            t->moving[c->moves[i].shard] = 0;
        free(c->moves[i].need);
    }
    c->nmoves = 0;
}

/* Sends member `uid` the HANDOFF of the moves of type ti under way (only
 * shard `only`'s when >= 0), and makes the moves still waiting for fences
 * wait for its fence too: a member that did not hear of a move when it
 * began (it came later) must not route to the old owner meanwhile. */
int ms__coord_tell_moves(struct ms_coord *c, uint64_t uid, int ti,
                         int64_t only)
{
    if (!c->nmoves)
        return 0;
    struct ms_plan_entry *e = malloc(c->nmoves * sizeof *e);
    if (!e)
        return MS_ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i < c->nmoves; i++) {
        struct move *mv = &c->moves[i];
        if (mv->ti != ti || (only >= 0 && mv->shard != (uint32_t)only))
            continue;
        if (mv->phase == FENCING) {
            size_t j = 0;
            while (j < mv->nneed && mv->need[j] != uid)
                j++;
            if (j == mv->nneed) {
                if (mv->nneed == mv->needcap) {
                    size_t cap = mv->needcap * 2 + 1;
                    uint64_t *nn = realloc(mv->need, cap * sizeof *nn);
                    if (!nn) {
                        free(e);
                        return MS_ENOMEM;
                    }
                    mv->need = nn;
                    mv->needcap = cap;
                }
                mv->need[mv->nneed++] = uid;
            }
        }
        e[k++] = (struct ms_plan_entry){mv->shard, mv->from, mv->hgen};
    }
    int rc = 0;
    if (k) {
        qsort(e, k, sizeof *e, entry_cmp);
        rc = ms__coord_emit_kind(c, uid, ti, MS_PLAN_MSG_HANDOFF, e, k);
    }
    free(e);
    return rc;
}

static int fenced(struct ms_coord *c, struct move *mv, uint64_t region);

/* Region `region` is gone: it no longer holds up any move. Moves that
 * then have every fence go on to STOP. */
int ms__coord_on_fenced_by(struct ms_coord *c, uint64_t region)
{
    for (int ti = 0; ti < c->ntypes; ti++) {
        struct ms_plan_entry *e = NULL;
        size_t k = 0;
        uint64_t from = 0;
        /* one STOP per old owner: take them one owner at a time */
        for (;;) {
            from = 0;
            k = 0;
            for (size_t i = 0; i < c->nmoves; i++) {
                struct move *mv = &c->moves[i];
                if (mv->ti != ti || mv->phase != FENCING ||
                    (from && mv->from != from) || !fenced(c, mv, region))
                    continue;
                if (!e && !(e = malloc(c->nmoves * sizeof *e)))
                    return MS_ENOMEM;
                from = mv->from;
                e[k++] = (struct ms_plan_entry){mv->shard, from, mv->hgen};
            }
            if (!k)
                break;
            qsort(e, k, sizeof *e, entry_cmp);
            int rc = ms__coord_emit_kind(c, from, ti, MS_PLAN_MSG_STOP, e, k);
            if (rc) {
                free(e);
                return rc;
            }
        }
        free(e);
    }
    return 0;
}

/*
 * Starts moving shards[0..n) (ascending) of type ti: those with an owner
 * and no move under way. All share one handoff generation; one HANDOFF
 * broadcast announces them.
 */
static int start_moves(struct ms_coord *c, int ti, const uint32_t *shards,
                       size_t n, int voluntary, uint64_t now_ms)
{
    struct ctype *t = &c->types[ti];
    if (c->state != READY || !t->known || n == 0)
        return 0;
    struct ms_plan_entry *e = malloc(n * sizeof *e);
    if (!e)
        return MS_ENOMEM;
    size_t k = 0;
    uint64_t hgen = 0;
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t s = shards[i];
        if (s >= t->shard_count || !t->owner[s] || t->moving[s])
            continue;
        if (!hgen) {
            if (c->generation >= gen_limit(c))
                break;
            hgen = ++c->generation;
        }
        if (c->nmoves == c->movecap) {
            size_t cap = c->movecap ? c->movecap * 2 : 16;
            struct move *nm = realloc(c->moves, cap * sizeof *nm);
            if (!nm) {
                rc = MS_ENOMEM;
                break;
            }
            c->moves = nm;
            c->movecap = cap;
        }
        struct move *mv = &c->moves[c->nmoves];
        memset(mv, 0, sizeof *mv);
        mv->need = malloc((c->nmembers + 1) * sizeof *mv->need);
        if (!mv->need) {
            rc = MS_ENOMEM;
            break;
        }
        mv->needcap = c->nmembers + 1;
        for (size_t j = 0; j < c->nmembers; j++)
            mv->need[mv->nneed++] = c->members[j].uid;
        mv->ti = ti;
        mv->shard = s;
        mv->from = t->owner[s];
        mv->hgen = hgen;
        mv->started_ms = mv->sent_ms = now_ms;
        mv->deadline_ms = now_ms + c->handoff_timeout_ms;
        mv->phase = FENCING;
        mv->voluntary = voluntary;
        c->nmoves++;
        if (c->nmoves > c->mst.peak)
            c->mst.peak = c->nmoves;
        t->moving[s] = 1;
        c->mst.started++;
        e[k++] = (struct ms_plan_entry){s, mv->from, hgen};
    }
    if (k) {
        int erc = ms__coord_emit_kind(c, 0, ti, MS_PLAN_MSG_HANDOFF, e, k);
        if (erc)
            rc = erc;
    }
    free(e);
    return rc;
}

int ms_coord_move(struct ms_coord *c, int type, uint32_t shard,
                  uint64_t now_ms)
{
    if (c->state != READY || type < 0 || type >= c->ntypes ||
        !c->types[type].known || shard >= c->types[type].shard_count ||
        !c->types[type].owner[shard])
        return MS_EINVAL;
    if (c->types[type].moving[shard])
        return MS_EBUSY;
    return start_moves(c, type, &shard, 1, 1, now_ms);
}

/* The move an answer of old owner `from` names (entry e), if it is in
 * `phase`. */
static struct move *answered(struct ms_coord *c, int ti, uint64_t from,
                             const struct ms_plan_entry *e, int phase)
{
    struct move *mv = find_move(c, ti, e->shard);
    if (!mv || mv->hgen != e->gen || mv->from != from || mv->phase != phase)
        return NULL;
    return mv;
}

/* Region `region` fenced move mv (or is gone). Returns 1 when that was
 * the last fence: the move goes on to STOPPING. */
static int fenced(struct ms_coord *c, struct move *mv, uint64_t region)
{
    for (size_t j = 0; j < mv->nneed; j++)
        if (mv->need[j] == region) {
            mv->need[j] = mv->need[--mv->nneed];
            break;
        }
    if (mv->nneed || mv->phase != FENCING)
        return 0;
    mv->phase = STOPPING;
    mv->sent_ms = c->now_ms;
    return 1;
}

/* A region's fence passed the old owner, which relays it (`from` is the
 * old owner), or a region without a connection to the old owner reports
 * that nothing of its own is on the way there (`from` is the region, as
 * in the entry). Moves whose every region fenced go on to STOP, one
 * message per old owner. */
int ms__coord_on_fenced(struct ms_coord *c, uint64_t from, int ti,
                        const struct ms_plan_msg *m)
{
    /* twice the entries: the second half sorts out the other owners */
    struct ms_plan_entry *e = malloc((2 * m->nentries + 1) * sizeof *e);
    if (!e)
        return MS_ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i < m->nentries; i++) {
        const struct ms_plan_entry *x = &m->entries[i];
        struct move *mv = find_move(c, ti, x->shard);
        if (!mv || mv->hgen != x->gen || mv->phase != FENCING ||
            (mv->from != from && x->owner != from))
            continue;
        if (fenced(c, mv, x->owner))
            e[k++] = (struct ms_plan_entry){mv->shard, mv->from, mv->hgen};
    }
    int rc = 0;
    while (k && !rc) {
        /* the entries of the first old owner left, in shard order */
        uint64_t to = e[0].owner;
        size_t n = 0, rest = 0;
        for (size_t i = 0; i < k; i++) {
            if (e[i].owner == to)
                e[n++] = e[i];
            else
                e[k + rest++] = e[i]; /* k + rest < 2 * nentries */
        }
        rc = ms__coord_emit_kind(c, to, ti, MS_PLAN_MSG_STOP, e, n);
        memmove(e, e + k, rest * sizeof *e);
        k = rest;
    }
    free(e);
    return rc;
}

/* Ends move mv: the shard goes to `owner` (0: unassigned) at a new
 * generation, stored in *out for the caller's broadcast. */
static void end_move(struct ms_coord *c, struct move *mv, uint64_t owner,
                     struct ms_plan_entry *out)
{
    uint64_t g = ++c->generation;
    ms__coord_set_owner(c, mv->ti, mv->shard, owner, g);
    *out = (struct ms_plan_entry){mv->shard, owner, g};
    drop_move(c, mv);
}

/* The old owner stopped the shards of `m`: place each and publish them
 * in one broadcast. Several shards are placed with one allocate_many
 * call, which sees them as one-by-one placing would; without it (or when
 * it cannot run) each is placed with allocate, its move ended before the
 * next is placed. */
int ms__coord_on_stopped(struct ms_coord *c, uint64_t from, int ti,
                         const struct ms_plan_msg *m)
{
    enum { ERR = 256 }; /* the bytes of each shard's reason */
    size_t cap = m->nentries + 1;
    struct ms_plan_entry *e = malloc(cap * sizeof *e);
    uint32_t *sh = calloc(cap, sizeof *sh);
    uint64_t *to = malloc(cap * sizeof *to);
    char *errs = calloc(cap, ERR);
    if (!e || !sh || !to || !errs) {
        free(e);
        free(sh);
        free(to);
        free(errs);
        return MS_ENOMEM;
    }
    /* the moves this answer ends (its entries are ascending and unique:
     * plan.h), within the generations left */
    size_t n = 0;
    for (size_t i = 0; i < m->nentries; i++) {
        struct move *mv = answered(c, ti, from, &m->entries[i], STOPPING);
        if (!mv || c->generation + 1 + n >= gen_limit(c))
            continue;
        mv->phase = PLACING;
        sh[n++] = mv->shard;
    }
    const char *code = "strategy";
    int many = ms__coord_place_many(c, ti, sh, n, from, to, &code, errs,
                                    ERR) == 0;
    const struct member *fm = ms__coord_find_member(c, from);
    for (size_t i = 0; i < n; i++) {
        uint32_t s = sh[i];
        struct move *mv = find_move(c, ti, s);
        /* the strategy sees the shard unassigned */
        ms__coord_set_owner(c, ti, s, 0, c->types[ti].gen[s]);
        char *err = errs + i * ERR;
        if (!many) {
            err[0] = 0;
            to[i] = ms__coord_place(c, ti, s, from, &code, err, ERR);
        }
        if (to[i] == from && fm && fm->leaving)
            to[i] = 0;
        if (!to[i])
            ms__coord_note(c, "shard %u of %s was stopped at %016llx and "
                           "is left unassigned: %s", s, c->types[ti].name,
                           (unsigned long long)from,
                           err[0] ? err : "no new owner");
        if (to[i])
            c->mst.finished++;
        else
            c->mst.aborted++; /* stopped, but placed nowhere */
        end_move(c, mv, to[i], &e[i]);
    }
    int rc = n ? ms__coord_emit_entries(c, 0, ti, e, n) : 0;
    free(e);
    free(sh);
    free(to);
    free(errs);
    return rc;
}

/* Rolls back the moves past their deadline: the old owner keeps the shard
 * (published at a new generation, which ends every region's buffering);
 * a shard whose old owner is gone is published unassigned. */
int ms__coord_expire_moves(struct ms_coord *c, uint64_t now_ms)
{
#ifdef MS_SIM_SWITCHES
    if (ms_sim_break_no_rollback)
        return 0;
#endif
    for (int ti = 0; ti < c->ntypes; ti++) {
        struct ms_plan_entry *e = NULL;
        size_t k = 0;
        for (size_t i = 0; i < c->nmoves;) {
            struct move *mv = &c->moves[i];
            if (mv->ti != ti || mv->deadline_ms > now_ms ||
                c->generation + 1 >= gen_limit(c)) {
                i++;
                continue;
            }
            if (!e && !(e = malloc(c->nmoves * sizeof *e)))
                return MS_ENOMEM;
            ms__coord_note(c, "handoff of %s shard %u from %016llx aborted "
                           "after %llu ms: %s", c->types[ti].name,
                           mv->shard, (unsigned long long)mv->from,
                           (unsigned long long)(now_ms - mv->started_ms),
                           mv->phase == FENCING
                               ? "regions did not fence in time"
                               : "the old owner did not stop in time");
            c->mst.aborted++;
            uint64_t keep = ms__coord_may_keep(c, ti, mv->from) ? mv->from : 0;
            end_move(c, mv, keep, &e[k++]); /* moves the last into i */
        }
        if (k) {
            qsort(e, k, sizeof *e, entry_cmp);
            int rc = ms__coord_emit_entries(c, 0, ti, e, k);
            free(e);
            if (rc)
                return rc;
        } else {
            free(e);
        }
    }
    return 0;
}

/* Sends again what a move waits for, every MS_COORD_RESEND_MS: the
 * HANDOFF to the regions (one whose fence got lost, say on a connection
 * that was not up yet, fences again; the others' repeats are ignored) or
 * the STOP to the old owner. Repeats are harmless: a region re-fences,
 * an old owner that stopped answers again, and the coordinator counts each
 * fence once. */
int ms__coord_resend_moves(struct ms_coord *c, uint64_t now_ms)
{
    if (!c->nmoves)
        return 0;
    struct ms_plan_entry *e = malloc(c->nmoves * sizeof *e);
    if (!e)
        return MS_ENOMEM;
    int rc = 0;
    for (int ti = 0; ti < c->ntypes && !rc; ti++) {
        for (int phase = FENCING; phase <= STOPPING && !rc; phase++) {
            for (;;) {
                size_t k = 0;
                uint64_t to = 0;
                for (size_t i = 0; i < c->nmoves; i++) {
                    struct move *mv = &c->moves[i];
                    if (mv->ti != ti || mv->phase != phase ||
                        now_ms - mv->sent_ms < MS_COORD_RESEND_MS ||
                        (phase == STOPPING && to && mv->from != to))
                        continue;
                    to = mv->from;
                    mv->sent_ms = now_ms;
                    e[k++] = (struct ms_plan_entry){mv->shard, mv->from,
                                                    mv->hgen};
                }
                if (!k)
                    break;
                qsort(e, k, sizeof *e, entry_cmp);
                rc = phase == FENCING
                         ? ms__coord_emit_kind(c, 0, ti, MS_PLAN_MSG_HANDOFF,
                                               e, k)
                         : ms__coord_emit_kind(c, to, ti, MS_PLAN_MSG_STOP,
                                               e, k);
                if (rc || phase == FENCING)
                    break;
            }
        }
    }
    free(e);
    return rc;
}

/* --- leaving members and rebalance rounds -------------------------------- */

/* 1 when some member that is not leaving can host type ti. */
static int has_staying_host(const struct ms_coord *c, int ti)
{
    for (size_t i = 0; i < c->nmembers; i++)
        if (!c->members[i].leaving && can_host(c, ti, &c->members[i]))
            return 1;
    return 0;
}

/* Moves the shards of leaving members away (not voluntary: no policy
 * suppresses them). With no member left to take them, they are given up
 * (unassigned) at once, as nobody could take them over. */
int ms__coord_move_leavers(struct ms_coord *c, uint64_t now_ms)
{
    /* a region that cannot fence would hold every move to its deadline:
     * wait until every member is reachable again (or downed) */
    for (size_t i = 0; i < c->nmembers; i++)
        if (!c->members[i].reachable)
            return 0;
    for (size_t i = 0; i < c->nmembers; i++) {
        if (!c->members[i].leaving)
            continue;
        uint64_t uid = c->members[i].uid;
        for (int ti = 0; ti < c->ntypes; ti++) {
            struct ctype *t = &c->types[ti];
            if (!t->known || !c->members[i].owned[ti])
                continue;
            if (!has_staying_host(c, ti)) {
                int rc = ms__coord_sweep_owner(c, ti, uid, 1);
                if (rc)
                    return rc;
                continue;
            }
            uint32_t *sh = malloc(t->shard_count * sizeof *sh);
            if (!sh)
                return MS_ENOMEM;
            size_t n = 0;
            for (uint32_t s = 0; s < t->shard_count; s++)
                if (t->owner[s] == uid && !t->moving[s])
                    sh[n++] = s;
            int rc = start_moves(c, ti, sh, n, 0, now_ms);
            free(sh);
            if (rc)
                return rc;
        }
    }
    return 0;
}

/* One rebalance round of type ti through the caller's callback. */
static int round_type(struct ms_coord *c, int ti, uint64_t now_ms)
{
    struct ctype *t = &c->types[ti];
    size_t nh = ms__coord_hosts_of(c, ti);
    if (!t->known || nh == 0)
        return 0;
    uint32_t *out = malloc(t->shard_count * sizeof *out);
    if (!out)
        return MS_ENOMEM;
    /* shards on a live member that may not own them (the strategy's
     * `eligible`: roles, say) move through handoff whatever the policy
     * says: these moves are not voluntary */
    size_t k = 0;
    for (uint32_t s = 0; s < t->shard_count; s++) {
        uint64_t o = t->owner[s];
        if (o && !t->moving[s] && ms__coord_find_member(c, o) &&
            !eligible(c, ti, o))
            out[k++] = s;
    }
    int rc0 = k ? start_moves(c, ti, out, k, 0, now_ms) : 0;
    if (rc0) {
        free(out);
        return rc0;
    }
    struct ms_coord_view v = {ti, t->name, t->shard_count, t->owner,
                              c->hosts, nh, t->moving};
    char err[256] = "";
    int n = c->rebalance(c->data, ti, &v, out, t->shard_count, err,
                         sizeof err);
    int rc = 0;
    if (n < 0) {
        c->mst.strategy_errors++;
        ms__coord_note(c, "rebalance of %s failed: %s", t->name,
                       err[0] ? err : "no reason given");
    } else if (n > 0) {
        if ((size_t)n > t->shard_count)
            n = (int)t->shard_count;
        qsort(out, (size_t)n, sizeof *out, u32_cmp);
        rc = start_moves(c, ti, out, (size_t)n, 1, now_ms);
    }
    free(out);
    return rc;
}

int ms__coord_run_rounds(struct ms_coord *c, uint64_t now_ms)
{
    c->next_round_ms = now_ms + c->rebalance_interval_ms;
    c->reconcile = 0;
    if (!c->rebalance)
        return 0;
    /* no voluntary moves while a member leaves: its shards move first,
     * and a round would count it among the places to balance over */
    for (size_t i = 0; i < c->nmembers; i++)
        if (c->members[i].leaving)
            return 0;
    c->mst.rounds++;
    for (int ti = 0; ti < c->ntypes; ti++) {
        int rc = round_type(c, ti, now_ms);
        if (rc)
            return rc;
    }
    return 0;
}

void ms_coord_reconcile(struct ms_coord *c)
{
    c->reconcile = 1;
}

/* --- queries ------------------------------------------------------------- */

void ms_coord_move_stats(const struct ms_coord *c,
                         struct ms_coord_move_stats *out)
{
    *out = c->mst;
    out->in_progress = c->nmoves;
}

int ms_coord_move_at(const struct ms_coord *c, size_t i, uint64_t now_ms,
                     struct ms_coord_move_info *out)
{
    if (i >= c->nmoves)
        return 0;
    const struct move *mv = &c->moves[i];
    out->type = mv->ti;
    out->shard = mv->shard;
    out->from = mv->from;
    out->hgen = mv->hgen;
    out->stopping = mv->phase == STOPPING;
    out->voluntary = mv->voluntary;
    out->age_ms = now_ms > mv->started_ms ? now_ms - mv->started_ms : 0;
    out->fences_left = mv->nneed;
    return 1;
}

int ms_coord_leave_done(const struct ms_coord *c, uint64_t uid)
{
    const struct member *mb = ms__coord_find_member(c, uid);
    if (c->state != READY || !mb || !mb->leaving)
        return 0;
    for (int ti = 0; ti < c->ntypes; ti++)
        if (mb->owned[ti])
            return 0;
    for (size_t i = 0; i < c->nmoves; i++)
        if (c->moves[i].from == uid)
            return 0;
    return 1;
}
