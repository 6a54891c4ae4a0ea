/*
 * idset.h -- a set of byte-string ids (entity ids): open addressing with
 * linear probing and tombstones, each id copied. Used by the file store
 * of remember-entities (a log's live set) and by the node's memory store.
 * Single-threaded; no limit of its own (callers bound what they add).
 */
#ifndef MS_CORE_IDSET_H
#define MS_CORE_IDSET_H

#include <stddef.h>
#include <stdint.h>

struct ms_idslot {
    char *id;     /* NULL: empty; ms_idset_tomb: deleted; else the copy */
    uint32_t len;
    uint32_t hash;
};

/* Zero-initialised is an empty set. */
struct ms_idset {
    struct ms_idslot *slots;
    size_t cap;        /* a power of two, or 0 */
    size_t count;      /* live ids */
    size_t used;       /* live ids and tombstones */
    uint64_t id_bytes; /* bytes of the live ids */
};

/* Frees every id and the slots; the set is empty again. */
void ms_idset_free(struct ms_idset *s);

/* 1 when the id is in the set. */
int ms_idset_has(const struct ms_idset *s, const char *id, size_t len);

/* Adds a copy of the id: 1 when added, 0 when already there, MS_ENOMEM. */
int ms_idset_add(struct ms_idset *s, const char *id, size_t len);

/* Removes the id: 1 when removed, 0 when absent. */
int ms_idset_del(struct ms_idset *s, const char *id, size_t len);

/* The live id in slot i (0 <= i < s->cap): 1 and *id, *len, or 0 for an
 * empty or deleted slot. Walk with `for (i = 0; i < s->cap; i++)`. */
int ms_idset_at(const struct ms_idset *s, size_t i, const char **id,
                size_t *len);

#endif
