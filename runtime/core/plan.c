/*
 * plan.c -- a region's copy of a plan, the fence, and the CONTROL message
 * codec (sans-IO). See plan.h for the model and the format.
 *
 * The codec is driven by one table: for each kind, its name and the keys it
 * carries, in order. The encoder writes exactly those keys and the decoder
 * expects exactly them, so the two cannot drift apart. The decoder is a
 * cursor over the bytes with no recursion; the only allocation is the entry
 * array, bounded by MS_PLAN_MSG_MAX_ENTRIES.
 */
#include "plan.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ms_plan {
    uint32_t shard_count;
    uint64_t generation;   /* max of gen[] */
    uint64_t *owner;       /* [shard_count] */
    uint64_t *gen;         /* [shard_count] */
};

/* --- the region's copy ---------------------------------------------------- */

struct ms_plan *ms_plan_new(uint32_t shard_count)
{
    if (shard_count == 0 || shard_count > MS_PLAN_MAX_SHARDS)
        return NULL;
    struct ms_plan *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->shard_count = shard_count;
    p->owner = calloc(shard_count, sizeof *p->owner);
    p->gen = calloc(shard_count, sizeof *p->gen);
    if (!p->owner || !p->gen) {
        ms_plan_free(p);
        return NULL;
    }
    return p;
}

void ms_plan_free(struct ms_plan *p)
{
    if (!p)
        return;
    free(p->owner);
    free(p->gen);
    free(p);
}

uint32_t ms_plan_shard_count(const struct ms_plan *p)
{
    return p->shard_count;
}

uint64_t ms_plan_generation(const struct ms_plan *p)
{
    return p->generation;
}

uint64_t ms_plan_owner(const struct ms_plan *p, uint32_t shard,
                       uint64_t *gen)
{
    if (shard >= p->shard_count) {
        if (gen)
            *gen = 0;
        return 0;
    }
    if (gen)
        *gen = p->gen[shard];
    return p->owner[shard];
}

int ms_plan_apply(struct ms_plan *p, uint32_t shard, uint64_t owner,
                  uint64_t gen)
{
    if (shard >= p->shard_count || gen == 0 || gen > MS_PLAN_MAX_GEN)
        return MS_EINVAL;
    if (gen <= p->gen[shard])
        return 0;
    p->owner[shard] = owner;
    p->gen[shard] = gen;
    if (gen > p->generation)
        p->generation = gen;
    return 1;
}

int ms_plan_apply_msg(struct ms_plan *p, const struct ms_plan_msg *m)
{
    if (m->kind != MS_PLAN_MSG_PLAN || m->shard_count != p->shard_count)
        return MS_EINVAL;
    for (size_t i = 0; i < m->nentries; i++)
        if (m->entries[i].shard >= p->shard_count || m->entries[i].gen == 0 ||
            m->entries[i].gen > MS_PLAN_MAX_GEN)
            return MS_EINVAL;
    int applied = 0;
    for (size_t i = 0; i < m->nentries; i++)
        applied += ms_plan_apply(p, m->entries[i].shard, m->entries[i].owner,
                                 m->entries[i].gen);
    return applied;
}

int ms_plan_owns(const struct ms_plan *p, uint32_t shard, uint64_t self_uid,
                 uint64_t sender_gen)
{
    if (shard >= p->shard_count || self_uid == 0)
        return 0;
    return p->owner[shard] == self_uid && p->gen[shard] >= sender_gen;
}

uint32_t ms_plan_count_owned(const struct ms_plan *p, uint64_t uid)
{
    uint32_t n = 0;
    for (uint32_t s = 0; s < p->shard_count; s++)
        n += p->owner[s] == uid;
    return n;
}

/* --- the fence ------------------------------------------------------------ */

int ms_plan_fence_check(struct ms_plan_fence *f, uint64_t term,
                        uint64_t from_uid)
{
    if (term > f->term) {
        f->term = term;
        f->coordinator = from_uid;
        return 1;
    }
    return term == f->term && term != 0 && from_uid == f->coordinator;
}

/* --- the message table ---------------------------------------------------- */

enum field { F_TERM, F_TYPE, F_SHARDS, F_SHARD, F_FP, F_CODE, F_REASON, F_E };

static const char *const field_key[] = {
    [F_TERM] = "term",   [F_TYPE] = "type", [F_SHARDS] = "shards",
    [F_SHARD] = "shard", [F_FP] = "fp",     [F_CODE] = "code",
    [F_REASON] = "reason", [F_E] = "e",
};

#define MAX_FIELDS 5

struct kind {
    const char *name;
    int term0_ok;          /* term 0 allowed */
    int nfields;
    enum field fields[MAX_FIELDS];
};

/* Indexed by enum ms_plan_msg_kind. */
static const struct kind kinds[] = {
    [MS_PLAN_MSG_VIEW_REQUEST] = {"view_request", 0, 1, {F_TERM}},
    [MS_PLAN_MSG_VIEW] = {"view", 0, 5,
                          {F_TERM, F_TYPE, F_SHARDS, F_FP, F_E}},
    [MS_PLAN_MSG_VIEW_DONE] = {"view_done", 0, 1, {F_TERM}},
    [MS_PLAN_MSG_STALE_TERM] = {"stale_term", 1, 1, {F_TERM}},
    [MS_PLAN_MSG_PLAN] = {"plan", 0, 4, {F_TERM, F_TYPE, F_SHARDS, F_E}},
    [MS_PLAN_MSG_ALLOC] = {"alloc", 1, 3, {F_TERM, F_TYPE, F_SHARD}},
    [MS_PLAN_MSG_ALLOC_REFUSED] = {"alloc_refused", 1, 5,
                                   {F_TERM, F_TYPE, F_SHARD, F_CODE,
                                    F_REASON}},
    [MS_PLAN_MSG_REGISTER_REFUSED] = {"register_refused", 0, 3,
                                      {F_TERM, F_TYPE, F_REASON}},
    [MS_PLAN_MSG_HANDOFF] = {"handoff", 0, 4, {F_TERM, F_TYPE, F_SHARDS, F_E}},
    [MS_PLAN_MSG_FENCE] = {"fence", 1, 4, {F_TERM, F_TYPE, F_SHARDS, F_E}},
    [MS_PLAN_MSG_FENCED] = {"fenced", 1, 4, {F_TERM, F_TYPE, F_SHARDS, F_E}},
    [MS_PLAN_MSG_STOP] = {"stop", 0, 4, {F_TERM, F_TYPE, F_SHARDS, F_E}},
    [MS_PLAN_MSG_STOPPED] = {"stopped", 0, 4,
                             {F_TERM, F_TYPE, F_SHARDS, F_E}},
};

#define NKINDS ((int)(sizeof kinds / sizeof kinds[0]))

static const struct kind *kind_of(int k)
{
    return k > 0 && k < NKINDS && kinds[k].name ? &kinds[k] : NULL;
}

const char *ms_plan_msg_kind_name(int kind)
{
    const struct kind *k = kind_of(kind);
    return k ? k->name : "unknown";
}

static int name_byte(unsigned char c)
{
    return c >= 0x21 && c <= 0x7e && c != '"' && c != '\\';
}

static int code_byte(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || c == '_';
}

static int valid_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > MS_PLAN_MAX_TYPE_NAME)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!name_byte((unsigned char)s[i]))
            return 0;
    return 1;
}

static int valid_code(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > MS_PLAN_MAX_CODE)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!code_byte((unsigned char)s[i]))
            return 0;
    return 1;
}

/* --- encoder -------------------------------------------------------------- */

struct sb {
    char *p;
    size_t n, cap;
    int err;
};

static void sb_reserve(struct sb *b, size_t more)
{
    if (b->err)
        return;
    if (b->n + more + 1 > MS_PLAN_MSG_MAX + 1) {
        b->err = MS_E2BIG;
        return;
    }
    if (b->n + more + 1 <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + more + 1)
        cap *= 2;
    char *np = realloc(b->p, cap);
    if (!np) {
        b->err = MS_ENOMEM;
        return;
    }
    b->p = np;
    b->cap = cap;
}

static void sb_put(struct sb *b, const char *s, size_t n)
{
    sb_reserve(b, n);
    if (b->err)
        return;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void sb_str(struct sb *b, const char *s)
{
    sb_put(b, s, strlen(s));
}

static void __attribute__((format(printf, 2, 3)))
sb_printf(struct sb *b, const char *fmt, ...)
{
    char tmp[96];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp) {
        if (!b->err)
            b->err = MS_EINVAL;
        return;
    }
    sb_put(b, tmp, (size_t)n);
}

/* A JSON string with the escapes of plan.h: \" \\ and \u00xx. */
static void sb_escaped(struct sb *b, const char *s)
{
    sb_put(b, "\"", 1);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\') {
            char e[2] = {'\\', (char)*c};
            sb_put(b, e, 2);
        } else if (*c < 0x20 || *c == 0x7f) {
            sb_printf(b, "\\u%04x", *c);
        } else {
            sb_put(b, (const char *)c, 1);
        }
    }
    sb_put(b, "\"", 1);
}

static int check_entries(const struct ms_plan_msg *m)
{
    if (m->nentries > MS_PLAN_MSG_MAX_ENTRIES)
        return MS_E2BIG;
    if (m->nentries && !m->entries)
        return MS_EINVAL;
    for (size_t i = 0; i < m->nentries; i++) {
        const struct ms_plan_entry *e = &m->entries[i];
        if (e->shard >= m->shard_count || e->gen == 0 ||
            e->gen > MS_PLAN_MAX_GEN ||
            (i > 0 && e->shard <= m->entries[i - 1].shard))
            return MS_EINVAL;
    }
    return 0;
}

static int check_msg(const struct ms_plan_msg *m, const struct kind *k)
{
    if (m->term > MS_PLAN_MAX_TERM || (m->term == 0 && !k->term0_ok))
        return MS_EINVAL;
    for (int i = 0; i < k->nfields; i++) {
        switch (k->fields[i]) {
        case F_TERM:
            break;
        case F_TYPE:
            if (!valid_name(m->type))
                return MS_EINVAL;
            break;
        case F_SHARDS:
            if (m->shard_count == 0 || m->shard_count > MS_PLAN_MAX_SHARDS)
                return MS_EINVAL;
            break;
        case F_SHARD:
            if (m->shard >= MS_PLAN_MAX_SHARDS)
                return MS_EINVAL;
            break;
        case F_FP:
            if (strlen(m->fingerprint) > MS_PLAN_MAX_FINGERPRINT)
                return MS_EINVAL;
            break;
        case F_CODE:
            if (!valid_code(m->code))
                return MS_EINVAL;
            break;
        case F_REASON:
            if (strlen(m->reason) > MS_PLAN_MAX_REASON)
                return MS_EINVAL;
            break;
        case F_E: {
            int rc = check_entries(m);
            if (rc)
                return rc;
            break;
        }
        }
    }
    return 0;
}

int ms_plan_msg_encode(const struct ms_plan_msg *m, char **out, size_t *len)
{
    *out = NULL;
    if (len)
        *len = 0;
    const struct kind *k = kind_of(m->kind);
    if (!k)
        return MS_EINVAL;
    int rc = check_msg(m, k);
    if (rc)
        return rc;
    struct sb b = {0};
    sb_str(&b, "{\"t\":\"");
    sb_str(&b, k->name);
    sb_put(&b, "\"", 1);
    for (int i = 0; i < k->nfields; i++) {
        sb_printf(&b, ",\"%s\":", field_key[k->fields[i]]);
        switch (k->fields[i]) {
        case F_TERM:
            sb_printf(&b, "%llu", (unsigned long long)m->term);
            break;
        case F_TYPE:
            sb_printf(&b, "\"%s\"", m->type);
            break;
        case F_SHARDS:
            sb_printf(&b, "%lu", (unsigned long)m->shard_count);
            break;
        case F_SHARD:
            sb_printf(&b, "%lu", (unsigned long)m->shard);
            break;
        case F_FP:
            sb_escaped(&b, m->fingerprint);
            break;
        case F_CODE:
            sb_printf(&b, "\"%s\"", m->code);
            break;
        case F_REASON:
            sb_escaped(&b, m->reason);
            break;
        case F_E:
            sb_put(&b, "[", 1);
            for (size_t j = 0; j < m->nentries; j++) {
                const struct ms_plan_entry *e = &m->entries[j];
                sb_printf(&b, "%s[%lu,\"%016llx\",%llu]", j ? "," : "",
                          (unsigned long)e->shard,
                          (unsigned long long)e->owner,
                          (unsigned long long)e->gen);
            }
            sb_put(&b, "]", 1);
            break;
        }
    }
    sb_put(&b, "}", 1);
    if (b.err) {
        free(b.p);
        return b.err;
    }
    *out = b.p;
    if (len)
        *len = b.n;
    return 0;
}

/* --- decoder -------------------------------------------------------------- */

struct rd {
    const char *p;
    size_t n, i;
    int err;       /* 0, MS_EBADJSON, MS_E2BIG or MS_ENOMEM; sticky */
};

static int fail(struct rd *r, int err)
{
    if (!r->err)
        r->err = err;
    return -1;
}

static int lit(struct rd *r, const char *s)
{
    size_t l = strlen(s);
    if (r->err)
        return -1;
    if (r->n - r->i < l || memcmp(r->p + r->i, s, l) != 0)
        return fail(r, MS_EBADJSON);
    r->i += l;
    return 0;
}

/* An unsigned decimal without leading zeros, at most `max`. */
static int num(struct rd *r, uint64_t max, uint64_t *out)
{
    if (r->err)
        return -1;
    size_t start = r->i;
    uint64_t v = 0;
    while (r->i < r->n && r->p[r->i] >= '0' && r->p[r->i] <= '9') {
        if (r->i - start >= 16) /* MS_PLAN_MAX_GEN has 16 digits */
            return fail(r, MS_EBADJSON);
        v = v * 10 + (uint64_t)(r->p[r->i] - '0');
        r->i++;
    }
    size_t digits = r->i - start;
    if (digits == 0 || (digits > 1 && r->p[start] == '0') || v > max)
        return fail(r, MS_EBADJSON);
    *out = v;
    return 0;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* "<16 lowercase hex digits>" */
static int hex16(struct rd *r, uint64_t *out)
{
    if (lit(r, "\"") != 0)
        return -1;
    if (r->n - r->i < 17 || r->p[r->i + 16] != '"')
        return fail(r, MS_EBADJSON);
    uint64_t v = 0;
    for (int k = 0; k < 16; k++) {
        int h = hexval(r->p[r->i + (size_t)k]);
        if (h < 0)
            return fail(r, MS_EBADJSON);
        v = v << 4 | (uint64_t)h;
    }
    r->i += 17;
    *out = v;
    return 0;
}

enum str_class { S_NAME, S_CODE, S_TEXT };

/*
 * A string into out[max + 1]. S_NAME and S_CODE take no escapes; S_TEXT
 * takes exactly the escapes sb_escaped() writes.
 */
static int str(struct rd *r, enum str_class cls, char *out, size_t max)
{
    if (lit(r, "\"") != 0)
        return -1;
    size_t n = 0;
    for (;;) {
        if (r->i >= r->n)
            return fail(r, MS_EBADJSON);
        unsigned char c = (unsigned char)r->p[r->i++];
        if (c == '"')
            break;
        if (n == max)
            return fail(r, MS_E2BIG);
        if (cls == S_NAME) {
            if (!name_byte(c))
                return fail(r, MS_EBADJSON);
        } else if (cls == S_CODE) {
            if (!code_byte(c))
                return fail(r, MS_EBADJSON);
        } else if (c == '\\') {
            if (r->i >= r->n)
                return fail(r, MS_EBADJSON);
            char e = r->p[r->i++];
            if (e == '"' || e == '\\') {
                c = (unsigned char)e;
            } else if (e == 'u' && r->n - r->i >= 4 &&
                       r->p[r->i] == '0' && r->p[r->i + 1] == '0' &&
                       hexval(r->p[r->i + 2]) >= 0 &&
                       hexval(r->p[r->i + 3]) >= 0) {
                c = (unsigned char)(hexval(r->p[r->i + 2]) << 4 |
                                    hexval(r->p[r->i + 3]));
                r->i += 4;
                /* only what the encoder escapes; NUL is never a byte */
                if (c == 0 || (c >= 0x20 && c != 0x7f))
                    return fail(r, MS_EBADJSON);
            } else {
                return fail(r, MS_EBADJSON);
            }
        } else if (c < 0x20 || c == 0x7f) {
            return fail(r, MS_EBADJSON);
        }
        out[n++] = (char)c;
    }
    out[n] = '\0';
    if (n == 0 && cls != S_TEXT)
        return fail(r, MS_EBADJSON);
    return 0;
}

static int entries(struct rd *r, struct ms_plan_msg *m)
{
    size_t cap = 0;
    if (lit(r, "[") != 0)
        return -1;
    if (r->i < r->n && r->p[r->i] == ']') {
        r->i++;
        return 0;
    }
    for (;;) {
        if (m->nentries == MS_PLAN_MSG_MAX_ENTRIES)
            return fail(r, MS_E2BIG);
        if (m->nentries == cap) {
            cap = cap ? cap * 2 : 16;
            if (cap > MS_PLAN_MSG_MAX_ENTRIES)
                cap = MS_PLAN_MSG_MAX_ENTRIES;
            struct ms_plan_entry *ne =
                realloc(m->entries, cap * sizeof *ne);
            if (!ne)
                return fail(r, MS_ENOMEM);
            m->entries = ne;
        }
        struct ms_plan_entry *e = &m->entries[m->nentries];
        uint64_t shard, gen;
        if (lit(r, "[") || num(r, MS_PLAN_MAX_SHARDS - 1, &shard) ||
            lit(r, ",") || hex16(r, &e->owner) || lit(r, ",") ||
            num(r, MS_PLAN_MAX_GEN, &gen) || lit(r, "]"))
            return -1;
        if (gen == 0)
            return fail(r, MS_EBADJSON);
        e->shard = (uint32_t)shard;
        e->gen = gen;
        if (m->nentries > 0 && e->shard <= m->entries[m->nentries - 1].shard)
            return fail(r, MS_EBADJSON);
        m->nentries++;
        if (r->i < r->n && r->p[r->i] == ']') {
            r->i++;
            return 0;
        }
        if (lit(r, ",") != 0)
            return -1;
    }
}

int ms_plan_msg_decode(const char *buf, size_t len, struct ms_plan_msg *out)
{
    memset(out, 0, sizeof *out);
    if (len > MS_PLAN_MSG_MAX)
        return MS_E2BIG;
    if (!buf)
        return MS_EBADJSON;
    struct rd r = {buf, len, 0, 0};
    char kname[24];
    const struct kind *k = NULL;
    if (lit(&r, "{\"t\":") == 0 &&
        str(&r, S_CODE, kname, sizeof kname - 1) == 0) {
        for (int i = 1; i < NKINDS; i++)
            if (kinds[i].name && strcmp(kinds[i].name, kname) == 0) {
                k = &kinds[i];
                out->kind = i;
            }
        if (!k)
            fail(&r, MS_EBADJSON);
    } else if (r.err == MS_E2BIG) {
        r.err = MS_EBADJSON; /* an overlong kind is an unknown kind */
    }
    for (int i = 0; k && !r.err && i < k->nfields; i++) {
        char key[16];
        uint64_t v;
        snprintf(key, sizeof key, ",\"%s\":", field_key[k->fields[i]]);
        if (lit(&r, key) != 0)
            break;
        switch (k->fields[i]) {
        case F_TERM:
            if (num(&r, MS_PLAN_MAX_TERM, &out->term) == 0 &&
                out->term == 0 && !k->term0_ok)
                fail(&r, MS_EBADJSON);
            break;
        case F_TYPE:
            str(&r, S_NAME, out->type, MS_PLAN_MAX_TYPE_NAME);
            break;
        case F_SHARDS:
            if (num(&r, MS_PLAN_MAX_SHARDS, &v) == 0) {
                if (v == 0)
                    fail(&r, MS_EBADJSON);
                out->shard_count = (uint32_t)v;
            }
            break;
        case F_SHARD:
            if (num(&r, MS_PLAN_MAX_SHARDS - 1, &v) == 0)
                out->shard = (uint32_t)v;
            break;
        case F_FP:
            str(&r, S_TEXT, out->fingerprint, MS_PLAN_MAX_FINGERPRINT);
            break;
        case F_CODE:
            str(&r, S_CODE, out->code, MS_PLAN_MAX_CODE);
            break;
        case F_REASON:
            str(&r, S_TEXT, out->reason, MS_PLAN_MAX_REASON);
            break;
        case F_E:
            if (entries(&r, out) == 0 && out->nentries > 0 &&
                out->entries[out->nentries - 1].shard >= out->shard_count)
                fail(&r, MS_EBADJSON);
            break;
        }
    }
    lit(&r, "}");
    if (!r.err && r.i != r.n)
        fail(&r, MS_EBADJSON);
    if (r.err) {
        ms_plan_msg_free(out);
        memset(out, 0, sizeof *out);
        return r.err;
    }
    return 0;
}

void ms_plan_msg_free(struct ms_plan_msg *m)
{
    free(m->entries);
    m->entries = NULL;
    m->nentries = 0;
}

/* --- the view ------------------------------------------------------------- */

int ms_plan_view_encode(const struct ms_plan *p, const char *type,
                        const char *fingerprint, uint64_t term,
                        uint32_t *cursor, char **out, size_t *len)
{
    *out = NULL;
    if (len)
        *len = 0;
    if (!type || !fingerprint ||
        strlen(type) > MS_PLAN_MAX_TYPE_NAME ||
        strlen(fingerprint) > MS_PLAN_MAX_FINGERPRINT)
        return MS_EINVAL;
    struct ms_plan_msg *m = calloc(1, sizeof *m);
    struct ms_plan_entry *e = malloc(MS_PLAN_MSG_MAX_ENTRIES * sizeof *e);
    if (!m || !e) {
        free(m);
        free(e);
        return MS_ENOMEM;
    }
    m->kind = MS_PLAN_MSG_VIEW;
    m->term = term;
    memcpy(m->type, type, strlen(type) + 1);
    m->shard_count = p->shard_count;
    memcpy(m->fingerprint, fingerprint, strlen(fingerprint) + 1);
    m->entries = e;
    uint32_t s = *cursor;
    for (; s < p->shard_count && m->nentries < MS_PLAN_MSG_MAX_ENTRIES; s++)
        if (p->gen[s] > 0)
            e[m->nentries++] =
                (struct ms_plan_entry){s, p->owner[s], p->gen[s]};
    int rc = ms_plan_msg_encode(m, out, len);
    if (rc == 0)
        *cursor = s;
    free(e);
    free(m);
    return rc;
}
