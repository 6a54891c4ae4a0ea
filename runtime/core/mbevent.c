/*
 * mbevent.c -- membership actions turned into numbered JSON events
 * (sans-IO); see mbevent.h for the model and the format.
 *
 * Member strings (name, address, roles) are printable ASCII without
 * space, '"', '\\' and ',' (membership.h), so they are written into JSON
 * as they are.
 */
#include "mbevent.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What this module remembers of a member, for the event of its removal. */
struct known {
    uint64_t uid;
    char name[MS_MB_MAX_NAME + 1];
    char address[MS_MB_MAX_ADDRESS + 1];
    char roles[MS_MB_MAX_ROLES + 1];
};

struct ms_mbev {
    uint64_t seq;
    char node[MS_MB_MAX_NAME + 1];
    struct known *known; /* unordered; at most MS_MB_MAX_MEMBERS */
    size_t nknown, capknown;
    struct known coord, leader; /* uid 0: none */
};

int ms_mbev_new(struct ms_mbev **out, const char *node_name)
{
    if (!node_name || strlen(node_name) > MS_MB_MAX_NAME)
        return MS_EINVAL;
    struct ms_mbev *ev = calloc(1, sizeof *ev);
    if (!ev)
        return MS_ENOMEM;
    snprintf(ev->node, sizeof ev->node, "%s", node_name);
    *out = ev;
    return 0;
}

void ms_mbev_free(struct ms_mbev *ev)
{
    if (!ev)
        return;
    free(ev->known);
    free(ev);
}

uint64_t ms_mbev_seq(const struct ms_mbev *ev)
{
    return ev->seq;
}

/* ---- members remembered ---------------------------------------------- */

static struct known *find_known(struct ms_mbev *ev, uint64_t uid)
{
    for (size_t i = 0; i < ev->nknown; i++)
        if (ev->known[i].uid == uid)
            return &ev->known[i];
    return NULL;
}

static void fill_known(struct known *k, const struct ms_mb_member *m)
{
    k->uid = m->uid;
    snprintf(k->name, sizeof k->name, "%s", m->name);
    snprintf(k->address, sizeof k->address, "%s", m->address);
    snprintf(k->roles, sizeof k->roles, "%s", m->roles);
}

/* Remembers member m (its roles may be needed once it is removed). Out of
 * memory or room: not remembered, and its removal shows roles []. */
static void remember(struct ms_mbev *ev, const struct ms_mb_member *m)
{
    struct known *k = find_known(ev, m->uid);
    if (!k) {
        if (ev->nknown == ev->capknown) {
            size_t cap = ev->capknown ? ev->capknown * 2 : 8;
            if (cap > MS_MB_MAX_MEMBERS)
                cap = MS_MB_MAX_MEMBERS;
            if (cap <= ev->nknown)
                return;
            struct known *n = realloc(ev->known, cap * sizeof *n);
            if (!n)
                return;
            ev->known = n;
            ev->capknown = cap;
        }
        k = &ev->known[ev->nknown++];
    }
    fill_known(k, m);
}

static void forget(struct ms_mbev *ev, uint64_t uid)
{
    struct known *k = find_known(ev, uid);
    if (k)
        *k = ev->known[--ev->nknown];
}

/* ---- JSON ------------------------------------------------------------- */

struct out {
    char buf[MS_MBEV_MAX_JSON];
    size_t n;
};

static void put(struct out *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void put(struct out *o, const char *fmt, ...)
{
    if (o->n >= sizeof o->buf)
        return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(o->buf + o->n, sizeof o->buf - o->n, fmt, ap);
    va_end(ap);
    if (w > 0)
        o->n += (size_t)w;
}

/* {"name":..,"address":..,"uid":..,"roles":[..],"status":..,"self":..};
 * status NULL: no status field (a member no longer in the view). */
static void put_member(struct out *o, const struct known *k,
                       const char *status, int self)
{
    put(o, "{\"name\":\"%s\",\"address\":\"%s\",\"uid\":\"%016llx\","
        "\"roles\":[", k->name, k->address, (unsigned long long)k->uid);
    const char *r = k->roles;
    int first = 1;
    while (*r) {
        size_t len = strcspn(r, ",");
        if (len)
            put(o, "%s\"%.*s\"", first ? "" : ",", (int)len, r);
        first = first && !len;
        r += len;
        if (*r == ',')
            r++;
    }
    put(o, "]");
    if (status)
        put(o, ",\"status\":\"%s\"", status);
    put(o, ",\"self\":%s}", self ? "true" : "false");
}

static void begin(struct ms_mbev *ev, struct out *o, const char *kind,
                  uint64_t time_ms)
{
    o->n = 0;
    put(o, "{\"seq\":%llu,\"kind\":\"%s\",\"time_ms\":%llu,\"node\":\"%s\"",
        (unsigned long long)++ev->seq, kind, (unsigned long long)time_ms,
        ev->node);
}

static void finish(struct ms_mbev *ev, struct out *o, const char *kind,
                   ms_mbev_cb cb, void *data)
{
    put(o, "}");
    if (o->n >= sizeof o->buf) /* cannot happen within the limits */
        o->n = sizeof o->buf - 1;
    o->buf[o->n] = 0;
    cb(data, ev->seq, kind, o->buf, o->n);
}

/* ---- leader and coordinator -------------------------------------------- */

static const struct ms_mb_member *oldest(const struct ms_membership *mb,
                                         int lo, int hi)
{
    const struct ms_mb_member *best = NULL;
    size_t n = ms_mb_member_count(mb);
    for (size_t i = 0; i < n; i++) {
        const struct ms_mb_member *m = ms_mb_member_at(mb, i);
        if (m->status < lo || m->status > hi || !m->up_number)
            continue;
        if (!best || ms_mb_age_cmp(m, best) < 0)
            best = m;
    }
    return best;
}

const struct ms_mb_member *ms_mbev_leader(const struct ms_membership *mb)
{
    const struct ms_mb_member *m = oldest(mb, MS_MB_UP, MS_MB_UP);
    return m ? m : oldest(mb, MS_MB_LEAVING, MS_MB_EXITING);
}

/* Member k of a *_changed event with its status in the view now (none
 * once it is gone), or null (uid 0: no member). */
static void put_member_or_null(struct out *o, const struct ms_membership *mb,
                               const struct known *k)
{
    if (!k->uid) {
        put(o, "null");
        return;
    }
    const struct ms_mb_member *m = ms_mb_find_by_uid(mb, k->uid);
    put_member(o, k, m ? ms_mb_status_name(m->status) : NULL,
               k->uid == ms_mb_self_uid(mb));
}

/* A *_changed event: `now` is the new member (uid 0: none), `*was` the
 * one told before, which becomes `now`. */
static void changed(struct ms_mbev *ev, const struct ms_membership *mb,
                    const char *kind, const struct known *now,
                    struct known *was, uint64_t time_ms, ms_mbev_cb cb,
                    void *data)
{
    struct out o;
    begin(ev, &o, kind, time_ms);
    put(&o, ",\"member\":");
    put_member_or_null(&o, mb, now);
    put(&o, ",\"previous\":");
    put_member_or_null(&o, mb, was);
    *was = *now;
    finish(ev, &o, kind, cb, data);
}

static void check_leader(struct ms_mbev *ev, const struct ms_membership *mb,
                         uint64_t time_ms, ms_mbev_cb cb, void *data)
{
    const struct ms_mb_member *l = ms_mbev_leader(mb);
    uint64_t uid = l ? l->uid : 0;
    if (uid == ev->leader.uid)
        return;
    struct known now;
    memset(&now, 0, sizeof now);
    if (l)
        fill_known(&now, l);
    changed(ev, mb, "leader_changed", &now, &ev->leader, time_ms, cb, data);
}

void ms_mbev_settle(struct ms_mbev *ev, const struct ms_membership *mb,
                    uint64_t time_ms, ms_mbev_cb cb, void *data)
{
    if (ms_mb_self_status(mb) == MS_MB_REMOVED)
        return; /* the view is inert: no leader to tell of */
    check_leader(ev, mb, time_ms, cb, data);
}

/* ---- actions ----------------------------------------------------------- */

/* What is known of the member of action a: what this module remembers,
 * else the name and address the action carries (no roles). */
static void known_of(struct ms_mbev *ev, const struct ms_mb_action *a,
                     struct known *k)
{
    const struct known *kn = find_known(ev, a->uid);
    if (kn) {
        *k = *kn;
        return;
    }
    memset(k, 0, sizeof *k);
    k->uid = a->uid;
    snprintf(k->name, sizeof k->name, "%s", a->name);
    snprintf(k->address, sizeof k->address, "%s", a->address);
}

static const char *member_kind(int status)
{
    switch (status) {
    case MS_MB_JOINING: return "member_joining";
    case MS_MB_UP: return "member_up";
    case MS_MB_LEAVING: return "member_leaving";
    case MS_MB_EXITING: return "member_exiting";
    case MS_MB_DOWN: return "member_downed";
    case MS_MB_REMOVED: return "member_removed";
    default: return NULL;
    }
}

void ms_mbev_on_action(struct ms_mbev *ev, const struct ms_membership *mb,
                       const struct ms_mb_action *a, uint64_t time_ms,
                       ms_mbev_cb cb, void *data)
{
    const char *kind;
    const struct ms_mb_member *m = ms_mb_find_by_uid(mb, a->uid);
    if (m)
        remember(ev, m);
    switch (a->kind) {
    case MS_MB_MEMBER_JOINING:
    case MS_MB_MEMBER_UP:
    case MS_MB_MEMBER_LEAVING:
    case MS_MB_MEMBER_EXITING:
    case MS_MB_MEMBER_DOWN:
    case MS_MB_MEMBER_REMOVED:
        kind = member_kind(a->status);
        break;
    case MS_MB_MEMBER_UNREACHABLE:
        kind = "member_unreachable";
        break;
    case MS_MB_MEMBER_REACHABLE:
        kind = "member_reachable";
        break;
    case MS_MB_COORDINATOR_CHANGED: {
        struct known now;
        memset(&now, 0, sizeof now);
        if (a->uid)
            known_of(ev, a, &now);
        changed(ev, mb, "coordinator_changed", &now, &ev->coord, time_ms,
                cb, data);
        if (ms_mb_self_status(mb) != MS_MB_REMOVED)
            check_leader(ev, mb, time_ms, cb, data);
        return;
    }
    default:
        return; /* gossip, heartbeats, convergence: no event */
    }
    if (!kind)
        return;
    struct known k;
    known_of(ev, a, &k);
    /* what the member is now: the status the action says for a status
     * change, else the view's (reachability changes no status) */
    const char *status = a->kind <= MS_MB_MEMBER_REMOVED
                             ? ms_mb_status_name(a->status)
                         : m ? ms_mb_status_name(m->status)
                             : NULL;
    struct out o;
    begin(ev, &o, kind, time_ms);
    put(&o, ",\"member\":");
    put_member(&o, &k, status, a->is_self);
    if (a->kind <= MS_MB_MEMBER_REMOVED)
        put(&o, ",\"previous_status\":%s%s%s",
            a->prev_status ? "\"" : "",
            a->prev_status ? ms_mb_status_name(a->prev_status) : "null",
            a->prev_status ? "\"" : "");
    finish(ev, &o, kind, cb, data);
    if (a->kind == MS_MB_MEMBER_REMOVED)
        forget(ev, a->uid);
}
