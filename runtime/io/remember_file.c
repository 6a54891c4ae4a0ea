/*
 * remember_file.c -- the file store of remember-entities: an append log
 * per (type, shard) with a CRC-32C per record (remember_file.h).
 */
#include "remember_file.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/errors.h"
#include "../core/idset.h"
#include "../core/log.h"

#define MAGIC "MSRLOG1\n"
#define MAGIC_LEN 8
#define REC_HEAD 3 /* op, len */
#define REC_TAIL 4 /* crc */
#define REC_MAX (REC_HEAD + MS_MAX_ID + REC_TAIL)
#define TYPE_MAX 64
#define SHARD_LIMIT 65536u
#define IO_CHUNK (128 * 1024)

/* ---- CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) ---------- */

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[i] = c;
    }
}

static uint32_t crc32c(const unsigned char *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    while (n--)
        c = crc_table[(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

/* ---- the store ------------------------------------------------------ */

struct rlog {
    int in_use;
    int fd; /* -1: no file yet */
    char type[TYPE_MAX + 1];
    uint32_t shard;
    uint64_t size;    /* bytes of the file */
    uint64_t records; /* records in the file */
    uint64_t last_use;
    struct ms_idset set;
};

struct ms_remember_file {
    char dir[MS_REMEMBER_FILE_MAX_DIR + 1];
    int dirfd;
    enum ms_remember_fsync policy;
    int max_open;
    uint64_t tick;
    struct rlog *logs;
    struct ms_remember_file_stats st;
};

int ms_remember_file_fsync_policy(const char *name,
                                  enum ms_remember_fsync *out)
{
    if (!name)
        return MS_EINVAL;
    if (!strcmp(name, "always"))
        *out = MS_REMEMBER_FSYNC_ALWAYS;
    else if (!strcmp(name, "on_compaction"))
        *out = MS_REMEMBER_FSYNC_ON_COMPACTION;
    else if (!strcmp(name, "never"))
        *out = MS_REMEMBER_FSYNC_NEVER;
    else
        return MS_EINVAL;
    return 0;
}

static void log_line(int level, const struct ms_remember_file *s,
                     const struct rlog *l, const char *fmt, int err,
                     unsigned long long n)
{
    char f[512];
    size_t at = ms_log_field_s(f, sizeof f, 0, "dir", s->dir);
    at = ms_log_field_s(f, sizeof f, at, "type", l->type);
    ms_log_field_u(f, sizeof f, at, "shard", l->shard);
    if (err)
        ms_log(level, f, "%s (%s)", fmt,
               err <= -4096 ? ms_strerror(err) : strerror(-err));
    else if (n)
        ms_log(level, f, "%s: %llu bytes", fmt, n);
    else
        ms_log(level, f, "%s", fmt);
}

static int do_sync(struct ms_remember_file *s, int fd, int dir)
{
    s->st.fsyncs++;
    int rc = dir ? fsync(fd) : fdatasync(fd);
    return rc < 0 ? -errno : 0;
}

static int write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (w == 0)
            return -EIO;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int ms_remember_file_new(const char *dir, enum ms_remember_fsync policy,
                         int max_open, struct ms_remember_file **out)
{
    *out = NULL;
    if (!dir || !*dir || strlen(dir) > MS_REMEMBER_FILE_MAX_DIR ||
        max_open < 1 || max_open > MS_REMEMBER_FILE_MAX_OPEN ||
        (policy != MS_REMEMBER_FSYNC_ALWAYS &&
         policy != MS_REMEMBER_FSYNC_ON_COMPACTION &&
         policy != MS_REMEMBER_FSYNC_NEVER))
        return MS_EINVAL;
    pthread_once(&crc_once, crc_init);
    struct ms_remember_file *s = calloc(1, sizeof *s);
    if (!s)
        return MS_ENOMEM;
    s->logs = calloc((size_t)max_open, sizeof *s->logs);
    if (!s->logs) {
        free(s);
        return MS_ENOMEM;
    }
    strcpy(s->dir, dir);
    s->policy = policy;
    s->max_open = max_open;
    s->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc = 0;
    if (s->dirfd < 0) {
        rc = -errno;
        goto fail;
    }
    *out = s;
    return 0;
fail:
    if (s->dirfd >= 0)
        close(s->dirfd);
    free(s->logs);
    free(s);
    return rc;
}

static void log_close(struct rlog *l)
{
    if (l->fd >= 0)
        close(l->fd);
    ms_idset_free(&l->set);
    memset(l, 0, sizeof *l);
    l->fd = -1;
}

void ms_remember_file_free(struct ms_remember_file *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->max_open; i++)
        if (s->logs[i].in_use)
            log_close(&s->logs[i]);
    free(s->logs);
    close(s->dirfd);
    free(s);
}

static int name_ok(const char *type, uint32_t shard)
{
    if (!type || shard >= SHARD_LIMIT)
        return 0;
    size_t n = strlen(type);
    if (n < 1 || n > TYPE_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = type[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

static void file_name(char *buf, size_t cap, const struct rlog *l,
                      const char *suffix)
{
    snprintf(buf, cap, "%s.%u.rlog%s", l->type, (unsigned)l->shard, suffix);
}

/* Encodes one record into buf (REC_MAX bytes); returns its length. */
static size_t encode(unsigned char *buf, int op, const char *id,
                     size_t len)
{
    buf[0] = (unsigned char)op;
    buf[1] = (unsigned char)(len & 0xFF);
    buf[2] = (unsigned char)(len >> 8);
    memcpy(buf + REC_HEAD, id, len);
    uint32_t c = crc32c(buf, REC_HEAD + len);
    unsigned char *t = buf + REC_HEAD + len;
    t[0] = (unsigned char)c;
    t[1] = (unsigned char)(c >> 8);
    t[2] = (unsigned char)(c >> 16);
    t[3] = (unsigned char)(c >> 24);
    return REC_HEAD + len + REC_TAIL;
}

/*
 * Reads the open file of l into its set, from just after the header.
 * Returns 0 with *good the offset after the last good record, or an
 * error. A damaged record stops the read (*good points at it).
 */
static int replay(struct rlog *l, uint64_t *good)
{
    unsigned char *buf = malloc(IO_CHUNK);
    if (!buf)
        return MS_ENOMEM;
    size_t have = 0, at = 0;
    uint64_t off = MAGIC_LEN; /* file offset of buf[at] */
    int eof = 0, rc = 0, bad = 0;
    if (lseek(l->fd, MAGIC_LEN, SEEK_SET) < 0) {
        rc = -errno;
        goto out;
    }
    while (!bad) {
        /* parse what is in the buffer */
        while (have - at >= REC_HEAD) {
            unsigned char *r = buf + at;
            size_t len = (size_t)r[1] | ((size_t)r[2] << 8);
            if ((r[0] != MS_REMEMBER_START && r[0] != MS_REMEMBER_STOP) ||
                len < 1 || len > MS_MAX_ID) {
                bad = 1;
                break;
            }
            size_t n = REC_HEAD + len + REC_TAIL;
            if (have - at < n)
                break;
            const unsigned char *t = r + REC_HEAD + len;
            uint32_t c = (uint32_t)t[0] | ((uint32_t)t[1] << 8) |
                         ((uint32_t)t[2] << 16) | ((uint32_t)t[3] << 24);
            if (c != crc32c(r, REC_HEAD + len)) {
                bad = 1;
                break;
            }
            if (l->records >= MS_REMEMBER_FILE_MAX_RECORDS) {
                rc = MS_E2BIG;
                goto out;
            }
            if (r[0] == MS_REMEMBER_START) {
                if (l->set.count >= MS_REMEMBER_FILE_MAX_LIVE &&
                    !ms_idset_has(&l->set, (char *)r + REC_HEAD, len)) {
                    rc = MS_E2BIG;
                    goto out;
                }
                if (ms_idset_add(&l->set, (char *)r + REC_HEAD, len) < 0) {
                    rc = MS_ENOMEM;
                    goto out;
                }
            } else {
                ms_idset_del(&l->set, (char *)r + REC_HEAD, len);
            }
            l->records++;
            at += n;
            off += n;
        }
        if (bad || eof)
            break;
        memmove(buf, buf + at, have - at);
        have -= at;
        at = 0;
        ssize_t r = read(l->fd, buf + have, IO_CHUNK - have);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            rc = -errno;
            goto out;
        }
        if (r == 0)
            eof = 1;
        have += (size_t)r;
    }
    *good = off;
out:
    free(buf);
    return rc;
}

/* Opens the file of l (creating it when `create`) and replays it. */
static int log_load(struct ms_remember_file *s, struct rlog *l, int create)
{
    char name[TYPE_MAX + 32];
    file_name(name, sizeof name, l, "");
    int fd = openat(s->dirfd, name, O_RDWR | O_APPEND | O_CLOEXEC);
    int created = 0;
    if (fd < 0 && errno == ENOENT) {
        if (!create)
            return 0; /* an empty set without a file */
        fd = openat(s->dirfd, name, O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC,
                    0644);
        created = 1;
    }
    if (fd < 0)
        return -errno;
    l->fd = fd;
    /* one writer per log: another store (another node of this machine)
     * holding it open means the shard is still that node's */
    if (flock(fd, LOCK_EX | LOCK_NB) < 0)
        return errno == EWOULDBLOCK ? MS_EBUSY : -errno;
    struct stat sb;
    if (fstat(fd, &sb) < 0)
        return -errno;
    uint64_t size = (uint64_t)sb.st_size;
    unsigned char head[MAGIC_LEN];
    size_t hn = size < MAGIC_LEN ? (size_t)size : MAGIC_LEN;
    if (hn && pread(fd, head, hn, 0) != (ssize_t)hn)
        return -EIO;
    if (memcmp(head, MAGIC, hn) != 0) {
        log_line(MS_LOG_ERROR, s, l,
                 "remember log has a foreign header: refused", 0, 0);
        return MS_EINVAL;
    }
    if (size < MAGIC_LEN) { /* new, or a torn creation */
        if (size)
            log_line(MS_LOG_WARN, s, l, "remember log: torn header reset",
                     0, size);
        if (ftruncate(fd, 0) < 0)
            return -errno;
        int rc = write_all(fd, MAGIC, MAGIC_LEN);
        if (!rc && s->policy == MS_REMEMBER_FSYNC_ALWAYS) {
            rc = do_sync(s, fd, 0);
            if (!rc && (created || size))
                rc = do_sync(s, s->dirfd, 1);
        }
        if (rc)
            return rc;
        l->size = MAGIC_LEN;
        return 0;
    }
    uint64_t good = MAGIC_LEN;
    int rc = replay(l, &good);
    if (rc)
        return rc;
    if (good < size) {
        s->st.cuts++;
        s->st.cut_bytes += size - good;
        log_line(MS_LOG_WARN, s, l,
                 "remember log: damaged tail cut (torn or corrupt record)", 0,
                 size - good);
        if (ftruncate(fd, (off_t)good) < 0)
            return -errno;
        if (s->policy != MS_REMEMBER_FSYNC_NEVER &&
            (rc = do_sync(s, fd, 0)) < 0)
            return rc;
    }
    l->size = good;
    return 0;
}

/* The log of (type, shard), opened and replayed if needed; NULL with *rc
 * set on failure. */
static struct rlog *log_get(struct ms_remember_file *s, const char *type,
                            uint32_t shard, int create, int *rc)
{
    *rc = 0;
    struct rlog *free_slot = NULL, *lru = NULL;
    for (int i = 0; i < s->max_open; i++) {
        struct rlog *l = &s->logs[i];
        if (!l->in_use) {
            if (!free_slot)
                free_slot = l;
            continue;
        }
        if (l->shard == shard && !strcmp(l->type, type)) {
            if (l->fd < 0 && create) { /* known empty, now written */
                log_close(l);
                free_slot = l;
                break;
            }
            l->last_use = ++s->tick;
            return l;
        }
        if (!lru || l->last_use < lru->last_use)
            lru = l;
    }
    struct rlog *l = free_slot;
    if (!l) {
        s->st.lru_closes++;
        log_close(lru);
        l = lru;
    }
    memset(l, 0, sizeof *l);
    l->fd = -1;
    strcpy(l->type, type);
    l->shard = shard;
    s->st.opens++;
    *rc = log_load(s, l, create);
    if (*rc) {
        s->st.errors++;
        log_line(MS_LOG_WARN, s, l, "remember log: open failed", *rc, 0);
        log_close(l);
        return NULL;
    }
    l->in_use = 1;
    l->last_use = ++s->tick;
    return l;
}

/* Writes the live set of l to a temp file and renames it over the log. */
static int compact(struct ms_remember_file *s, struct rlog *l)
{
    if (l->fd < 0)
        return 0;
    char tmp[TYPE_MAX + 32], name[TYPE_MAX + 32];
    file_name(tmp, sizeof tmp, l, ".tmp");
    file_name(name, sizeof name, l, "");
    int fd = openat(s->dirfd, tmp,
                    O_RDWR | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    /* the new inode becomes the log: lock it before it is renamed over */
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        int e = -errno;
        close(fd);
        return e;
    }
    unsigned char *buf = malloc(IO_CHUNK);
    int rc = buf ? 0 : MS_ENOMEM;
    size_t n = 0;
    uint64_t size = MAGIC_LEN;
    if (buf) {
        memcpy(buf, MAGIC, MAGIC_LEN);
        n = MAGIC_LEN;
    }
    for (size_t i = 0; !rc && i < l->set.cap; i++) {
        const char *id;
        size_t idlen;
        if (!ms_idset_at(&l->set, i, &id, &idlen))
            continue;
        if (IO_CHUNK - n < REC_MAX) {
            rc = write_all(fd, buf, n);
            n = 0;
        }
        size_t k = encode(buf + n, MS_REMEMBER_START, id, idlen);
        n += k;
        size += k;
    }
    if (!rc && n)
        rc = write_all(fd, buf, n);
    free(buf);
    if (!rc && s->policy != MS_REMEMBER_FSYNC_NEVER)
        rc = do_sync(s, fd, 0);
    if (!rc && renameat(s->dirfd, tmp, s->dirfd, name) < 0)
        rc = -errno;
    if (rc) {
        close(fd);
        unlinkat(s->dirfd, tmp, 0);
        return rc;
    }
    /* the new file is the log now, whatever the directory sync says */
    close(l->fd);
    l->fd = fd;
    l->size = size;
    l->records = l->set.count;
    s->st.compactions++;
    if (s->policy != MS_REMEMBER_FSYNC_NEVER)
        rc = do_sync(s, s->dirfd, 1);
    return rc;
}

static int compact_due(const struct rlog *l)
{
    uint64_t compacted = MAGIC_LEN + l->set.id_bytes +
                         (uint64_t)(REC_HEAD + REC_TAIL) * l->set.count;
    if (l->size > MS_REMEMBER_FILE_COMPACT_BYTES && l->size > 2 * compacted)
        return 1;
    return l->records >= MS_REMEMBER_FILE_COMPACT_MIN &&
           l->records > (uint64_t)MS_REMEMBER_FILE_COMPACT_FACTOR *
                            l->set.count;
}

int ms_remember_file_append_batch(struct ms_remember_file *s,
                                  const char *type, uint32_t shard,
                                  const struct ms_remember_rec *recs,
                                  size_t n)
{
    if (!s || !name_ok(type, shard) || (n && !recs) ||
        n > MS_REMEMBER_FILE_MAX_BATCH)
        return MS_EINVAL;
    for (size_t i = 0; i < n; i++) {
        if (!recs[i].id || recs[i].idlen < 1 ||
            (recs[i].op != MS_REMEMBER_START &&
             recs[i].op != MS_REMEMBER_STOP))
            return MS_EINVAL;
        if (recs[i].idlen > MS_MAX_ID)
            return MS_E2BIG;
    }
    if (!n)
        return 0;
    int rc;
    struct rlog *l = log_get(s, type, shard, 1, &rc);
    if (!l)
        return rc;
    if (l->records + n > MS_REMEMBER_FILE_MAX_RECORDS) {
        if (l->set.count < l->records && (rc = compact(s, l)) != 0) {
            s->st.errors++;
            log_line(MS_LOG_WARN, s, l, "remember log: compaction failed",
                     rc, 0);
            return rc;
        }
        if (l->records + n > MS_REMEMBER_FILE_MAX_RECORDS)
            return MS_E2BIG;
    }
    unsigned char one[REC_MAX];
    unsigned char *buf = n == 1 ? one : malloc(n * REC_MAX);
    if (!buf)
        return MS_ENOMEM;
    size_t len = 0, written = 0;
    rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        const struct ms_remember_rec *r = &recs[i];
        if (r->op == MS_REMEMBER_START) {
            if (ms_idset_has(&l->set, r->id, r->idlen))
                continue;
            if (l->set.count >= MS_REMEMBER_FILE_MAX_LIVE)
                rc = MS_E2BIG;
            else if (ms_idset_add(&l->set, r->id, r->idlen) < 0)
                rc = MS_ENOMEM;
            if (rc)
                break;
        } else if (!ms_idset_del(&l->set, r->id, r->idlen)) {
            continue;
        }
        len += encode(buf + len, (int)r->op, r->id, r->idlen);
        written++;
    }
    /* the set holds the changes: a failure drops them with the log, which
     * is then read back from the file on next use */
    if (rc) {
        log_close(l); /* nothing of the batch was written */
    } else if (written) {
        rc = write_all(l->fd, buf, len);
        if (!rc && s->policy == MS_REMEMBER_FSYNC_ALWAYS)
            rc = do_sync(s, l->fd, 0);
        if (rc) {
            s->st.errors++;
            log_line(MS_LOG_WARN, s, l, "remember log: write failed", rc, 0);
            log_close(l);
        }
    }
    if (buf != one)
        free(buf);
    if (rc || !written)
        return rc;
    s->st.appends += written;
    l->size += len;
    l->records += written;
    if (compact_due(l)) {
        int crc = compact(s, l);
        if (crc) {
            s->st.errors++;
            log_line(MS_LOG_WARN, s, l, "remember log: compaction failed",
                     crc, 0);
        }
    }
    return 0;
}

int ms_remember_file_append(struct ms_remember_file *s, const char *type,
                            uint32_t shard, enum ms_remember_op op,
                            const char *id, size_t idlen)
{
    struct ms_remember_rec r = { op, id, idlen };
    return ms_remember_file_append_batch(s, type, shard, &r, 1);
}

int ms_remember_file_list(struct ms_remember_file *s, const char *type,
                          uint32_t shard, ms_remember_file_id_fn fn,
                          void *data)
{
    if (!s || !name_ok(type, shard) || !fn)
        return MS_EINVAL;
    int rc;
    struct rlog *l = log_get(s, type, shard, 0, &rc);
    if (!l)
        return rc;
    const char *id;
    size_t idlen;
    for (size_t i = 0; i < l->set.cap; i++)
        if (ms_idset_at(&l->set, i, &id, &idlen) && fn(data, id, idlen))
            break;
    return 0;
}

int ms_remember_file_count(struct ms_remember_file *s, const char *type,
                           uint32_t shard, size_t *count)
{
    if (!s || !name_ok(type, shard) || !count)
        return MS_EINVAL;
    int rc;
    struct rlog *l = log_get(s, type, shard, 0, &rc);
    if (!l)
        return rc;
    *count = l->set.count;
    return 0;
}

int ms_remember_file_compact(struct ms_remember_file *s, const char *type,
                             uint32_t shard)
{
    if (!s || !name_ok(type, shard))
        return MS_EINVAL;
    int rc;
    struct rlog *l = log_get(s, type, shard, 0, &rc);
    if (!l)
        return rc;
    rc = compact(s, l);
    if (rc) {
        s->st.errors++;
        log_line(MS_LOG_WARN, s, l, "remember log: compaction failed", rc,
                 0);
    }
    return rc;
}

void ms_remember_file_close_log(struct ms_remember_file *s, const char *type,
                                uint32_t shard)
{
    for (int i = 0; s && i < s->max_open; i++) {
        struct rlog *l = &s->logs[i];
        if (l->in_use && l->shard == shard && !strcmp(l->type, type))
            log_close(l);
    }
}

void ms_remember_file_stats(const struct ms_remember_file *s,
                            struct ms_remember_file_stats *out)
{
    *out = s->st;
}
