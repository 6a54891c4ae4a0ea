/*
 * journal.h -- the SQL of persistent entities (issue 11): an entity's
 * journal (events and its latest snapshot) or its durable state, read
 * and written on a node's PostgreSQL pool (runtime/io/pg.h). Nothing
 * here blocks: every call queues a job and its callback runs on the
 * loop later (never inside the call).
 *
 * Fencing: EVERY write transaction first locks the shard's lease row
 *   SELECT ... FROM moonshard_leases WHERE cluster, type, shard, owner,
 *     epoch match AND expires_at > now() FOR SHARE
 * so an acquire that bumps the epoch waits for writers in flight; no
 * such row fails the write with MS_ESTALE ("stale_owner") and nothing is
 * written. Events carry the writer's epoch.
 *
 * Revisions: an event's (type, id, sequence) is unique; appending a
 * sequence that exists, or that the entity's snapshot covers, fails
 * with MS_ECONFLICT ("revision_conflict"). A
 * durable state is inserted at revision 1 or updated WHERE revision =
 * the expected one; a mismatch is MS_ECONFLICT too.
 *
 * Other failures are the pool's codes (MS_PG_ECONN, MS_PG_EQUERY,
 * MS_ETIMEDOUT, MS_PG_EFULL...): the write may or may not have committed
 * (a lost connection), so the caller reloads before going on.
 *
 * Group commit: writes queued in one loop turn (ms_journal_* calls
 * before control returns to the loop) go to the server as ONE
 * transaction (ms_pg_group), and while the pool's connections are busy
 * with earlier groups, writes gather for the next one; one write that
 * fails (stale, conflict) is rolled back alone and the others commit
 * (ms_pg_group: one round trip, savepoints only after a failure). Each
 * callback runs after the COMMIT of its own transaction. The writes of
 * one entity keep their order when the caller waits for each
 * write's callback before it queues the next (the host does): writes
 * queued at once may be shared out among groups that run in parallel.
 *
 * Single-threaded: call everything on the loop's thread.
 */
#ifndef MS_IO_JOURNAL_H
#define MS_IO_JOURNAL_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "pg.h"

/* Limits (each refused with MS_E2BIG / MS_EINVAL by the calls below). */
#define MS_JOURNAL_MAX_RECOVERY 10000  /* events read after the snapshot by
                                          one load; more: MS_E2BIG (set
                                          snapshot_every) */
#define MS_JOURNAL_MAX_EVENTS 1000     /* events of one append */
#define MS_JOURNAL_MAX_GROUP 256       /* writes in one group transaction */
#define MS_JOURNAL_MESSAGE_MAX 256     /* bytes of an error message */
#define MS_JOURNAL_OP_MAX 128          /* bytes of an operation id */

struct ms_journal;

/* Which entity, and the lease it writes under. Strings are borrowed for
 * the call (copied). `epoch` is the lease epoch the node holds for the
 * shard (0 is never current: the write fails with MS_ESTALE). */
struct ms_journal_entity {
    const char *type;
    const char *id;
    size_t idlen;
    uint32_t shard;
    uint64_t epoch;
    /* Operation ids (issue 11 point 7), for writes: when op_id is not
     * NULL (NUL-terminated, at most MS_JOURNAL_OP_MAX bytes), the write's
     * transaction also records the operation and its reply (op_reply,
     * NULL for a tell) in moonshard_operations; an id recorded already
     * fails the write with MS_ECONFLICT. */
    const char *op_id;
    const char *op_reply;
    size_t op_reply_len;
};

/* What a load read. Pointers are borrowed until the callback returns. */
struct ms_journal_loaded {
    int has_snapshot;        /* events: a snapshot exists */
    int64_t snapshot_seq;    /* the sequence the snapshot covers */
    const char *snapshot;    /* its state JSON, when has_snapshot */
    size_t snapshot_len;
    int nevents;             /* events after the snapshot, in order */
    const int64_t *seq;      /* [nevents] their sequences */
    const char *const *events; /* [nevents] their payload JSON */
    const size_t *lens;      /* [nevents] */
    int64_t last_seq;        /* the entity's last sequence (0: none) */
    int64_t revision;        /* state: its revision (0: no state saved) */
    const char *state;       /* state: its JSON, when revision > 0 */
    size_t state_len;
};

/* A load's outcome: err 0 and `l`, or a negative code and a message
 * (one line, at most MS_JOURNAL_MESSAGE_MAX bytes). */
typedef void (*ms_journal_load_cb)(int err, const char *message,
                                   const struct ms_journal_loaded *l,
                                   void *data);

/* A write's outcome, after its transaction ended: 0 (committed),
 * MS_ESTALE, MS_ECONFLICT or another negative code, with a message. */
typedef void (*ms_journal_write_cb)(int err, const char *message,
                                    void *data);

/* Creates a journal on `pg` (borrowed: it must outlive the journal) for
 * cluster `cluster` and lease owner `owner` (the node's name; both
 * copied), sending at most `max_groups` group transactions at once (the
 * pool's connections; 0: 2). NULL when out of memory. */
struct ms_journal *ms_journal_new(uv_loop_t *loop, struct ms_pg *pg,
                                  const char *cluster, const char *owner,
                                  int max_groups);

/* Fails the writes not yet sent with MS_ECANCELED (their callbacks run
 * here) and frees j once its timer is closed; `cb` (may be NULL) runs
 * then, on the loop. Writes and loads already in the pool hold j: close
 * the pool first (ms_pg_close fails its jobs, their callbacks run then),
 * the journal after that. */
void ms_journal_close(struct ms_journal *j, void (*cb)(void *data),
                      void *data);

/* Reads an event-sourced entity: its snapshot and the events after it
 * (at most MS_JOURNAL_MAX_RECOVERY: more is MS_E2BIG; a gap in the
 * sequences is MS_ECONFLICT). 0 and `cb` later, or a negative code and
 * no callback. */
int ms_journal_load_events(struct ms_journal *j,
                           const struct ms_journal_entity *e,
                           ms_journal_load_cb cb, void *data);

/* Reads a durable-state entity's state and revision. As above. */
int ms_journal_load_state(struct ms_journal *j,
                          const struct ms_journal_entity *e,
                          ms_journal_load_cb cb, void *data);

/* Appends `n` events (1..MS_JOURNAL_MAX_EVENTS), events[i] of lens[i]
 * bytes with sequence first_seq + i. `snapshot` (NULL: none), the state
 * after the last of them, replaces the entity's snapshot in the same
 * transaction; with `delete_covered`, the events it covers are deleted
 * there too. Everything is copied. 0 and `cb` later, or MS_EINVAL,
 * MS_E2BIG, MS_ENOMEM and no callback. */
int ms_journal_append(struct ms_journal *j, const struct ms_journal_entity *e,
                      int64_t first_seq, int n, const char *const *events,
                      const size_t *lens, const char *snapshot,
                      size_t snapshot_len, int delete_covered,
                      ms_journal_write_cb cb, void *data);

/* Saves a durable state: revision 1 when `expected` is 0 (none saved),
 * else expected + 1 where the row is at `expected`. As above. */
int ms_journal_save_state(struct ms_journal *j,
                          const struct ms_journal_entity *e,
                          int64_t expected, const char *state, size_t len,
                          ms_journal_write_cb cb, void *data);

/* Deletes a durable state at revision `expected` (> 0). As above. */
int ms_journal_delete_state(struct ms_journal *j,
                            const struct ms_journal_entity *e,
                            int64_t expected, ms_journal_write_cb cb,
                            void *data);

/* Records operation e->op_id (and its reply) alone, for a command that
 * wrote nothing else: a write with the lease check like the others. */
int ms_journal_record_op(struct ms_journal *j,
                         const struct ms_journal_entity *e,
                         ms_journal_write_cb cb, void *data);

/* A lookup's outcome: err 0 with found (1: the operation was committed;
 * reply/len its stored reply, NULL for a tell), or a negative code. */
typedef void (*ms_journal_op_cb)(int err, const char *message, int found,
                                 const char *reply, size_t len, void *data);

/* Looks up operation `op_id` of entity e (not grouped: one statement).
 * 0 and `cb` later, or a negative code and no callback. */
int ms_journal_find_op(struct ms_journal *j, const struct ms_journal_entity *e,
                       const char *op_id, ms_journal_op_cb cb, void *data);

/* Deletes the operations of the journal's cluster recorded more than
 * `retention_ms` ago (at most 10,000 rows per call). Fire and forget:
 * 0, or a negative code when it could not be queued. */
int ms_journal_expire_ops(struct ms_journal *j, uint64_t retention_ms);

/* Counters since the journal was made. */
struct ms_journal_stats {
    uint64_t commits;        /* group transactions committed (with at
                                least one write) */
    uint64_t writes;         /* writes committed */
    uint64_t events;         /* events written */
    uint64_t snapshots;      /* snapshots written */
    uint64_t states;         /* states saved or deleted */
    uint64_t stale_refused;  /* writes refused: MS_ESTALE */
    uint64_t conflicts;      /* writes refused: MS_ECONFLICT */
    uint64_t db_errors;      /* writes and loads failed otherwise */
    uint64_t loads;          /* loads that succeeded */
    uint64_t ops_recorded;   /* operation ids recorded with a write */
    uint64_t ops_found;      /* lookups that found a committed one */
    uint64_t latency_count;  /* writes timed */
    uint64_t latency_sum_us; /* their time from queueing to COMMIT */
    uint64_t latency_p50_us; /* over the last MS_JOURNAL_LAT_WINDOW */
    uint64_t latency_p99_us;
};
#define MS_JOURNAL_LAT_WINDOW 1024

void ms_journal_stats(const struct ms_journal *j,
                      struct ms_journal_stats *out);

#endif
