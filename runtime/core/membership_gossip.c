/*
 * membership_gossip.c -- the membership view's gossip (sans-IO): the
 * writer of the gossip text (membership.h, "Gossip"), its strict parser
 * (exactly that format, nothing else) and the merge of a received state
 * into this node's. See membership_int.h for the state.
 */
#include "membership_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sbuf.h"

/* --- the writer --- */

char *ms_mb_gossip_encode(const struct ms_membership *m, size_t *len)
{
    const struct state *s = &m->st;
    struct ms_sbuf b = {0};
    ms_sbuf_printf(&b,
                   "{\"v\":1,\"max_up\":%u,\"max_tomb\":%llu,\"members\":[",
                   s->max_up, ULL(s->max_tomb));
    for (uint32_t i = 0; i < s->n; i++) {
        const struct ms_mb_member *p = &s->recs[i].pub;
        ms_sbuf_printf(&b,
               "%s{\"u\":" UID ",\"n\":\"%s\",\"a\":\"%s\",\"r\":\"%s\","
               "\"ver\":\"%s\",\"w\":%u,\"i\":%llu,\"s\":\"%s\",\"o\":%u}",
               i ? "," : "", ULL(p->uid), p->name, p->address, p->roles,
               p->version, p->weight, ULL(p->incarnation),
               ms_mb_status_name(p->status), p->up_number);
    }
    ms_sbuf_printf(&b, "],\"tombstones\":[");
    for (uint32_t i = 0; i < s->ntombs; i++)
        ms_sbuf_printf(&b, "%s{\"u\":" UID ",\"q\":%llu}", i ? "," : "",
               ULL(s->tombs[i].uid), ULL(s->tombs[i].seq));
    ms_sbuf_printf(&b, "],\"seen\":[");
    const char *sep = "";
    for (uint32_t i = 0; i < s->n; i++)
        if (s->recs[i].seen) {
            ms_sbuf_printf(&b, "%s" UID, sep, ULL(s->recs[i].pub.uid));
            sep = ",";
        }
    ms_sbuf_printf(&b, "]}");
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    if (len)
        *len = b.len;
    return b.p;
}

/* --- the parser: exactly the format above, nothing else --- */

struct rd {
    const char *p, *e;
};

static int lit(struct rd *r, const char *s)
{
    size_t n = strlen(s);
    if ((size_t)(r->e - r->p) < n || memcmp(r->p, s, n) != 0)
        return 0;
    r->p += n;
    return 1;
}

static int peek(const struct rd *r, char c)
{
    return r->p < r->e && *r->p == c;
}

/* A decimal integer <= max, without sign or leading zeros. */
static int num(struct rd *r, uint64_t max, uint64_t *out)
{
    uint64_t v = 0;
    const char *start = r->p;
    while (r->p < r->e && *r->p >= '0' && *r->p <= '9') {
        unsigned d = (unsigned)(*r->p - '0');
        if (v > (max - d) / 10)
            return MS_EBADJSON;
        v = v * 10 + d;
        r->p++;
    }
    if (r->p == start || (*start == '0' && r->p - start > 1))
        return MS_EBADJSON;
    *out = v;
    return 0;
}

/* "<16 lowercase hex digits>", not zero. */
static int hex16(struct rd *r, uint64_t *out)
{
    if (r->e - r->p < 18 || r->p[0] != '"' || r->p[17] != '"')
        return MS_EBADJSON;
    uint64_t v = 0;
    for (int i = 1; i <= 16; i++) {
        char c = r->p[i];
        unsigned d;
        if (c >= '0' && c <= '9')
            d = (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            d = (unsigned)(c - 'a' + 10);
        else
            return MS_EBADJSON;
        v = v << 4 | d;
    }
    if (!v)
        return MS_EBADJSON;
    r->p += 18;
    *out = v;
    return 0;
}

/* "<plain bytes, commas too when `commas`>" into out[cap]. */
static int str(struct rd *r, char *out, size_t cap, int commas)
{
    if (!peek(r, '"'))
        return MS_EBADJSON;
    r->p++;
    size_t n = 0;
    while (r->p < r->e && *r->p != '"') {
        unsigned char c = (unsigned char)*r->p;
        if (!plain(c) && !(commas && c == ','))
            return MS_EBADJSON;
        if (n + 1 >= cap)
            return MS_E2BIG;
        out[n++] = (char)c;
        r->p++;
    }
    if (!peek(r, '"'))
        return MS_EBADJSON;
    r->p++;
    out[n] = 0;
    return 0;
}

static int parse_status(struct rd *r, int *out)
{
    for (int s = MS_MB_JOINING; s <= MS_MB_DOWN; s++) {
        char q[16];
        snprintf(q, sizeof q, "\"%s\"", ms_mb_status_name(s));
        if (lit(r, q)) {
            *out = s;
            return 0;
        }
    }
    return MS_EBADJSON;
}

#define TRY(x)                                                              \
    do {                                                                    \
        int rc_ = (x);                                                      \
        if (rc_)                                                            \
            return rc_;                                                     \
    } while (0)
#define EXPECT(r, s)                                                        \
    do {                                                                    \
        if (!lit((r), (s)))                                                 \
            return MS_EBADJSON;                                             \
    } while (0)

static int parse_member(struct rd *r, struct ms_mb_member *p)
{
    uint64_t v;
    memset(p, 0, sizeof *p);
    EXPECT(r, "{\"u\":");
    TRY(hex16(r, &p->uid));
    EXPECT(r, ",\"n\":");
    TRY(str(r, p->name, sizeof p->name, 0));
    EXPECT(r, ",\"a\":");
    TRY(str(r, p->address, sizeof p->address, 0));
    EXPECT(r, ",\"r\":");
    TRY(str(r, p->roles, sizeof p->roles, 1));
    EXPECT(r, ",\"ver\":");
    TRY(str(r, p->version, sizeof p->version, 0));
    EXPECT(r, ",\"w\":");
    TRY(num(r, UINT32_MAX, &v));
    p->weight = (uint32_t)v;
    EXPECT(r, ",\"i\":");
    TRY(num(r, UINT64_MAX, &p->incarnation));
    EXPECT(r, ",\"s\":");
    TRY(parse_status(r, &p->status));
    EXPECT(r, ",\"o\":");
    TRY(num(r, UINT32_MAX, &v));
    p->up_number = (uint32_t)v;
    EXPECT(r, "}");
    if (!p->name[0] || !p->address[0] ||
        !ms__mb_valid_roles(p->roles, strlen(p->roles)))
        return MS_EBADJSON;
    /* Joining has no up_number, Up must have one. */
    if (p->status == MS_MB_JOINING && p->up_number != 0)
        return MS_EBADJSON;
    if (p->status == MS_MB_UP && p->up_number == 0)
        return MS_EBADJSON;
    return 0;
}

static void state_free(struct state *s)
{
    free(s->recs);
    free(s->tombs);
    free(s->seen);
    memset(s, 0, sizeof *s);
}

static int parse(const char *json, size_t len, struct state *s)
{
    struct rd rr = {json, json + len}, *r = &rr;
    uint64_t v;
    memset(s, 0, sizeof *s);
    EXPECT(r, "{\"v\":1,\"max_up\":");
    TRY(num(r, UINT32_MAX, &v));
    s->max_up = (uint32_t)v;
    EXPECT(r, ",\"max_tomb\":");
    TRY(num(r, UINT64_MAX, &s->max_tomb));
    EXPECT(r, ",\"members\":[");
    while (!peek(r, ']')) {
        if (s->n && !lit(r, ","))
            return MS_EBADJSON;
        if (s->n == MS_MB_MAX_MEMBERS)
            return MS_E2BIG;
        TRY(ms__mb_reserve(s, s->n + 1));
        struct ms_mb_member *p = &s->recs[s->n].pub;
        TRY(parse_member(r, p));
        if ((s->n && p->uid <= s->recs[s->n - 1].pub.uid) ||
            p->up_number > s->max_up)
            return MS_EBADJSON;
        s->recs[s->n].seen = 0;
        s->n++;
    }
    EXPECT(r, "],\"tombstones\":[");
    while (!peek(r, ']')) {
        if (s->ntombs && !lit(r, ","))
            return MS_EBADJSON;
        if (s->ntombs == MS_MB_MAX_TOMBSTONES)
            return MS_E2BIG;
        if (!s->tombs) {
            s->tombs = malloc(MS_MB_MAX_TOMBSTONES * sizeof *s->tombs);
            if (!s->tombs)
                return MS_ENOMEM;
        }
        struct tomb *t = &s->tombs[s->ntombs];
        EXPECT(r, "{\"u\":");
        TRY(hex16(r, &t->uid));
        EXPECT(r, ",\"q\":");
        TRY(num(r, UINT64_MAX, &t->seq));
        EXPECT(r, "}");
        if ((s->ntombs && t->uid <= s->tombs[s->ntombs - 1].uid) ||
            !t->seq || t->seq > s->max_tomb || ms__mb_find(s, t->uid))
            return MS_EBADJSON;
        s->ntombs++;
    }
    EXPECT(r, "],\"seen\":[");
    while (!peek(r, ']')) {
        if (s->nseen && !lit(r, ","))
            return MS_EBADJSON;
        if (s->nseen == s->n)
            return MS_EBADJSON; /* more than members, or a duplicate */
        if (!s->seen) {
            s->seen = malloc(s->n * sizeof *s->seen);
            if (!s->seen)
                return MS_ENOMEM;
        }
        TRY(hex16(r, &v));
        if ((s->nseen && v <= s->seen[s->nseen - 1]) || !ms__mb_find(s, v))
            return MS_EBADJSON;
        s->seen[s->nseen++] = v;
    }
    EXPECT(r, "]}");
    if (r->p != r->e)
        return MS_EBADJSON;
    return 0;
}

/* --- the merge --- */

static int in_seen(const struct state *s, uint64_t uid)
{
    uint32_t i = ms__mb_lower_bound(s->seen, sizeof *s->seen, s->nseen, uid);
    return i < s->nseen && s->seen[i] == uid;
}

/* Answers the sender: SEND_GOSSIP to `uid`, address from `rs`. */
static void answer(struct ms_membership *m, const struct state *rs,
                   uint64_t uid)
{
    const struct mrec *r = ms__mb_find(rs, uid);
    if (!r || uid == m->self_uid)
        return;
    ms__mb_push(m, MS_MB_SEND_GOSSIP, r);
}

int ms_mb_gossip_merge(struct ms_membership *m, const char *json,
                       size_t len, uint64_t from_uid, uint64_t now_ms)
{
    if (!json && len)
        return MS_EINVAL;
    ms__mb_begin(m, now_ms);
    if (m->removed)
        return 0;
    if (len > MS_MB_MAX_GOSSIP)
        return MS_E2BIG;
    struct state rs;
    int rc = parse(json ? json : "", len, &rs);
    if (rc) {
        state_free(&rs);
        return rc;
    }
    if (from_uid && ms__mb_tomb_find(&m->st, from_uid)) {
        answer(m, &rs, from_uid); /* it learns that it was removed */
        state_free(&rs);
        return 0;
    }
    /* Room for the result first, so that nothing below can fail. */
    uint32_t count = m->st.n;
    for (uint32_t i = 0; i < m->st.n; i++)
        if (ms__mb_tomb_find(&rs, m->st.recs[i].pub.uid))
            count--;
    for (uint32_t i = 0; i < rs.n; i++) {
        uint64_t uid = rs.recs[i].pub.uid;
        if (!ms__mb_find(&m->st, uid) && !ms__mb_tomb_find(&m->st, uid))
            count++;
    }
    if (count > MS_MB_MAX_MEMBERS)
        rc = MS_E2BIG;
    else
        rc = ms__mb_reserve(&m->st, count);
    if (rc) {
        state_free(&rs);
        return rc;
    }
    uint64_t old = m->digest;
    uint64_t remote = ms__mb_digest_of(&rs);
    for (uint32_t i = 0; i < rs.ntombs; i++) {
        struct mrec *r = ms__mb_find(&m->st, rs.tombs[i].uid);
        if (r)
            ms__mb_remove_rec(m, r, rs.tombs[i].seq);
        else
            ms__mb_tomb_add(&m->st, rs.tombs[i].uid, rs.tombs[i].seq);
    }
    if (m->st.max_tomb < rs.max_tomb)
        m->st.max_tomb = rs.max_tomb;
    if (m->st.max_up < rs.max_up)
        m->st.max_up = rs.max_up;
    for (uint32_t i = 0; i < rs.n && !m->removed; i++) {
        const struct ms_mb_member *p = &rs.recs[i].pub;
        if (ms__mb_tomb_find(&m->st, p->uid))
            continue;
        struct mrec *r = ms__mb_find(&m->st, p->uid);
        if (!r) {
            struct ms_mb_member nm = *p;
            nm.reachable = 1;
            nm.owns_shards = !m->assume_no_shards;
            r = ms__mb_insert(&m->st, &nm);
            r->last_ack_ms = now_ms; /* a grace period to answer */
            m->dup_check = 1;
            ms__mb_push_status(m, r, 0);
            continue;
        }
        uint32_t a = r->pub.up_number, b = p->up_number;
        r->pub.up_number = !a ? b : !b ? a : a < b ? a : b;
        ms__mb_set_status(m, r, p->status);
    }
    if (m->removed) {
        state_free(&rs);
        return 0;
    }
    /* seen: the sender's set counts only for the state it describes. */
    uint64_t now = ms__mb_digest_of(&m->st);
    if (now != old) {
        m->digest = now;
        m->converged_told = 0;
        for (uint32_t i = 0; i < m->st.n; i++) {
            struct mrec *r = &m->st.recs[i];
            r->seen = r->pub.uid == m->self_uid ||
                      (now == remote && in_seen(&rs, r->pub.uid));
        }
    } else if (remote == old) {
        for (uint32_t i = 0; i < m->st.n; i++)
            if (in_seen(&rs, m->st.recs[i].pub.uid))
                m->st.recs[i].seen = 1;
    }
    /* Which seed was this? */
    const struct mrec *from = from_uid ? ms__mb_find(&m->st, from_uid) : NULL;
    for (int s = 0; from && s < m->nseeds; s++)
        if (!strcmp(m->seeds[s], from->pub.address))
            m->seed_heard[s] = 1;
    if (from_uid && (now != remote || !in_seen(&rs, m->self_uid)))
        answer(m, &rs, from_uid);
    state_free(&rs);
    ms__mb_settle(m, now_ms);
    return 0;
}
