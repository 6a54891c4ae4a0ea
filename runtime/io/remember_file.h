/*
 * remember_file.h -- the file store of remember-entities (issue 12): one
 * append log per (entity type, shard) in a directory of this machine,
 * recording which ids of a remembered type are running.
 *
 * The node (runtime/node/node_remember.c) writes through it what the
 * write-behind queue (core/remember.h) drains, and lists a shard's ids
 * when the shard starts here.
 *
 * Files: <dir>/<type>.<shard>.rlog. Several nodes of one machine may
 * share the directory, so a shard's log follows the shard from node to
 * node there: an open log is held with flock(2), and a second store
 * (another node, this process or another) that opens the same log gets
 * MS_EBUSY until the first closes it (ms_remember_file_close_log, when
 * its shard moves away, or the process ends). Compaction writes
 * <type>.<shard>.rlog.tmp and renames it over the log.
 *
 * Format of a log (integers little-endian):
 *
 *   header = "MSRLOG1\n"                         8 bytes
 *   record = op:u8 len:u16 id:len crc:u32        7 + len bytes
 *
 * op is 1 (start: the id is running) or 2 (stop: it is not); len is
 * 1..MS_MAX_ID; crc is the CRC-32C (Castagnoli) of op, len and id. Replay
 * reads records in order, a start adds the id to the set and a stop
 * removes it. A record that is short (a torn write), has a bad op or
 * length, or a wrong checksum ends the log: the file is cut there (one
 * WARN line, counted in `cuts`) and what came before is the set. A file
 * shorter than the header whose bytes are a prefix of it is a torn
 * creation and is reset; a file with another header is refused
 * (MS_EINVAL), never cut: it is not ours.
 *
 * In memory: an open log keeps its file descriptor and its live set, so
 * an append writes only records that change the set (a start of a live
 * id and a stop of an unknown id write nothing). At most `max_open` logs
 * are open; opening one more closes the least recently used (its set is
 * dropped and read back from the file when it is next used).
 *
 * fsync policy:
 *   "always"        each append (or batch) that writes is fdatasync'ed
 *                   before it returns, and so is a compaction (file and
 *                   directory); a new log's directory entry is synced
 *                   once; a damaged tail cut at replay is synced;
 *   "on_compaction" appends are left to the page cache (a machine crash
 *                   may lose the latest ones; a process crash does not);
 *                   compactions and cuts are synced as above;
 *   "never"         nothing is synced (tests, throwaway machines).
 *
 * Compaction rewrites a log as one start per live id, and runs by itself
 * after an append once the log holds at least MS_REMEMBER_FILE_COMPACT_MIN
 * records and more than MS_REMEMBER_FILE_COMPACT_FACTOR records per live
 * id, or once it is larger than MS_REMEMBER_FILE_COMPACT_BYTES and more
 * than twice its compacted size. If a compaction fails, the old log stays
 * in place and the error is returned. A temp file left by a crash in the
 * middle of a compaction is never read, and is overwritten by the next.
 *
 * Errors: a write or sync that fails closes the log (its set is dropped),
 * so the next call replays what the file holds; the caller decides what a
 * failure means (remember.on_failure). Nothing here aborts the process.
 *
 * Blocking and single-threaded: every call does file I/O on the calling
 * thread. Call one store from one thread at a time.
 */
#ifndef MS_IO_REMEMBER_FILE_H
#define MS_IO_REMEMBER_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "../core/base.h"
#include "../core/remember.h" /* enum ms_remember_op */

#define MS_REMEMBER_FILE_MAX_OPEN 1024       /* max_open at most */
#define MS_REMEMBER_FILE_MAX_LIVE 1000000    /* live ids of one shard */
#define MS_REMEMBER_FILE_COMPACT_MIN 1024 /* records before auto-compacting */
#define MS_REMEMBER_FILE_COMPACT_FACTOR 4    /* records per live id */
#define MS_REMEMBER_FILE_MAX_DIR 3072        /* bytes of the directory path */
#define MS_REMEMBER_FILE_MAX_BATCH 1024      /* records of one batch */
/* The two bounds below may be lowered at build time (the C test does). */
#ifndef MS_REMEMBER_FILE_MAX_RECORDS
/* Records of one log: replay refuses a longer log (MS_E2BIG) and an
 * append that would pass it is refused (MS_E2BIG) unless a compaction
 * makes room first. */
#define MS_REMEMBER_FILE_MAX_RECORDS 8000000
#endif
#ifndef MS_REMEMBER_FILE_COMPACT_BYTES
/* A log larger than this, of which more than half is history (records
 * that a compaction would drop), is compacted. */
#define MS_REMEMBER_FILE_COMPACT_BYTES (64u << 20)
#endif

enum ms_remember_fsync {
    MS_REMEMBER_FSYNC_ALWAYS,
    MS_REMEMBER_FSYNC_ON_COMPACTION,
    MS_REMEMBER_FSYNC_NEVER
};

/* Counters of a store since ms_remember_file_new. */
struct ms_remember_file_stats {
    uint64_t appends;      /* records written */
    uint64_t fsyncs;       /* fdatasync/fsync calls made (files and dir) */
    uint64_t compactions;  /* logs rewritten */
    uint64_t cuts;         /* damaged tails cut at replay */
    uint64_t cut_bytes;    /* bytes removed by those cuts */
    uint64_t opens;        /* logs opened (each replays its file) */
    uint64_t lru_closes;   /* logs closed to stay within max_open */
    uint64_t errors;       /* failed writes, syncs, reads, renames */
};

struct ms_remember_file;

/* Parses "always" | "on_compaction" | "never" into *out; returns 0, or
 * MS_EINVAL for anything else (NULL included). */
int ms_remember_file_fsync_policy(const char *name,
                                  enum ms_remember_fsync *out);

/*
 * Opens a store over the directory `dir` (borrowed, copied; it must exist
 * and be writable) with the fsync policy and a bound on open logs
 * (1..MS_REMEMBER_FILE_MAX_OPEN). On success *out is the store (caller
 * frees with ms_remember_file_free) and 0 is returned; else MS_EINVAL
 * (bad argument, path too long), MS_ENOMEM, or a negative errno of the
 * failed call. Any call that opens a log another store holds gets
 * MS_EBUSY.
 */
int ms_remember_file_new(const char *dir, enum ms_remember_fsync policy,
                         int max_open, struct ms_remember_file **out);

/* Closes every log, releases the lock and frees the store (NULL: no-op).
 * Syncs nothing more: what the policy did not sync is left to the
 * kernel. */
void ms_remember_file_free(struct ms_remember_file *s);

/*
 * Records a start or a stop of `id` (`idlen` bytes, 1..MS_MAX_ID, any
 * bytes; borrowed) in the log of (`type`, `shard`): `type` is 1..64 bytes
 * of [A-Za-z0-9_-] (a file name part), shard < 65536. Opens (and
 * replays) the log if it is not open. Returns 0 once the record is
 * written (and synced under "always"), or when it changes nothing;
 * MS_EINVAL for a bad argument, MS_E2BIG for an id too long, a shard
 * past MS_REMEMBER_FILE_MAX_LIVE ids or a log at
 * MS_REMEMBER_FILE_MAX_RECORDS that compaction cannot shorten, MS_ENOMEM,
 * or a negative errno. After an error the record may or may not be in
 * the file (a failed sync); the log is closed and read back on next use.
 * May compact the log afterwards (a failed compaction is counted and
 * logged, and does not fail the append, which is already written).
 */
int ms_remember_file_append(struct ms_remember_file *s, const char *type,
                            uint32_t shard, enum ms_remember_op op,
                            const char *id, size_t idlen);

/* One record of a batch; `id` borrowed for the call. */
struct ms_remember_rec {
    enum ms_remember_op op;
    const char *id;
    size_t idlen;
};

/*
 * Records n (0..MS_REMEMBER_FILE_MAX_BATCH) starts and stops of one
 * shard's log in order, as ms_remember_file_append does one, with ONE
 * write and, under "always", ONE sync for all of them: the way to batch
 * what a write-behind queue drained. Every record is checked before
 * anything happens (MS_EINVAL, MS_E2BIG for an id too long); the batch is
 * written whole or not at all, except that a failed write or sync may
 * leave a prefix of it in the file (read back on next use, a torn record
 * cut). Returns 0 or an error as for append.
 */
int ms_remember_file_append_batch(struct ms_remember_file *s,
                                  const char *type, uint32_t shard,
                                  const struct ms_remember_rec *recs,
                                  size_t n);

/* Calls fn(data, id, idlen) once per live id of the shard's log (ids
 * borrowed for the call; order unspecified); fn returning non-zero stops
 * the walk. fn must not call into the store. Opens (and replays) the log
 * if needed; a missing log is an empty set (no file is created). Returns
 * 0 (walk done or stopped), or an error as for append. */
typedef int (*ms_remember_file_id_fn)(void *data, const char *id,
                                      size_t idlen);
int ms_remember_file_list(struct ms_remember_file *s, const char *type,
                          uint32_t shard, ms_remember_file_id_fn fn,
                          void *data);

/* The number of live ids of the shard's log (opening it as list does) in
 * *count. Returns 0 or an error as for list. */
int ms_remember_file_count(struct ms_remember_file *s, const char *type,
                           uint32_t shard, size_t *count);

/* Rewrites the shard's log as its live set now (see the header comment).
 * A missing log stays missing. Returns 0 or an error; on error the old
 * log is unchanged. */
int ms_remember_file_compact(struct ms_remember_file *s, const char *type,
                             uint32_t shard);

/* Closes the shard's log if it is open: its lock is released and its
 * set dropped (read back from the file on next use). The node calls it
 * when the shard moves away and before it lists a shard that starts. */
void ms_remember_file_close_log(struct ms_remember_file *s, const char *type,
                                uint32_t shard);

/* Copies the store's counters into *out. */
void ms_remember_file_stats(const struct ms_remember_file *s,
                            struct ms_remember_file_stats *out);

#endif
