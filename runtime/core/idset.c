/*
 * idset.c -- a set of byte-string ids (idset.h).
 */
#include "idset.h"

#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "errors.h"

static char tomb_mark;
#define TOMB (&tomb_mark)

void ms_idset_free(struct ms_idset *s)
{
    for (size_t i = 0; i < s->cap; i++)
        if (s->slots[i].id && s->slots[i].id != TOMB)
            free(s->slots[i].id);
    free(s->slots);
    memset(s, 0, sizeof *s);
}

/* The slot holding the id, or -1. */
static long find(const struct ms_idset *s, const char *id, size_t len,
                 uint32_t h)
{
    if (!s->cap)
        return -1;
    for (size_t i = h & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
        const struct ms_idslot *e = &s->slots[i];
        if (!e->id)
            return -1;
        if (e->id != TOMB && e->hash == h && e->len == len &&
            memcmp(e->id, id, len) == 0)
            return (long)i;
    }
}

static uint32_t hash_of(const char *id, size_t len)
{
    return (uint32_t)ms_fnv1a64(id, len);
}

int ms_idset_has(const struct ms_idset *s, const char *id, size_t len)
{
    return find(s, id, len, hash_of(id, len)) >= 0;
}

static int resize(struct ms_idset *s, size_t cap)
{
    struct ms_idslot *n = calloc(cap, sizeof *n);
    if (!n)
        return MS_ENOMEM;
    for (size_t i = 0; i < s->cap; i++) {
        struct ms_idslot *e = &s->slots[i];
        if (!e->id || e->id == TOMB)
            continue;
        size_t j = e->hash & (cap - 1);
        while (n[j].id)
            j = (j + 1) & (cap - 1);
        n[j] = *e;
    }
    free(s->slots);
    s->slots = n;
    s->cap = cap;
    s->used = s->count;
    return 0;
}

int ms_idset_add(struct ms_idset *s, const char *id, size_t len)
{
    uint32_t h = hash_of(id, len);
    if (find(s, id, len, h) >= 0)
        return 0;
    if ((s->used + 1) * 4 > s->cap * 3) {
        size_t cap = s->cap ? s->cap : 16;
        while ((s->count + 1) * 2 > cap)
            cap *= 2;
        if (resize(s, cap) < 0)
            return MS_ENOMEM;
    }
    char *copy = malloc(len ? len : 1);
    if (!copy)
        return MS_ENOMEM;
    memcpy(copy, id, len);
    size_t i = h & (s->cap - 1);
    while (s->slots[i].id && s->slots[i].id != TOMB)
        i = (i + 1) & (s->cap - 1);
    if (!s->slots[i].id)
        s->used++;
    s->slots[i] = (struct ms_idslot){copy, (uint32_t)len, h};
    s->count++;
    s->id_bytes += len;
    return 1;
}

int ms_idset_del(struct ms_idset *s, const char *id, size_t len)
{
    long i = find(s, id, len, hash_of(id, len));
    if (i < 0)
        return 0;
    free(s->slots[i].id);
    s->slots[i].id = TOMB;
    s->count--;
    s->id_bytes -= len;
    return 1;
}

int ms_idset_at(const struct ms_idset *s, size_t i, const char **id,
                size_t *len)
{
    const struct ms_idslot *e = &s->slots[i];
    if (!e->id || e->id == TOMB)
        return 0;
    *id = e->id;
    *len = e->len;
    return 1;
}
