/* The file store of remember-entities (runtime/io/remember_file.h):
 * replay, damaged tails cut, compaction, fsync policies, LRU of open
 * logs, bad input, and a writer SIGKILLed in the middle of its appends.
 * Everything happens in a temp directory that is removed at the end. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../runtime/core/errors.h"
#include "../../runtime/core/log.h"
#include "../../runtime/io/remember_file.h"
#include "check.h"

static char root[256];
static int warns;

static void sink(void *data, const char *line, size_t len)
{
    (void)data;
    if (len > 30 && memmem(line, len, " WARN ", 6))
        warns++;
}

/* A fresh subdirectory of the temp root. */
static const char *subdir(const char *name)
{
    static char p[512];
    snprintf(p, sizeof p, "%s/%s", root, name);
    CHECK(mkdir(p, 0755) == 0);
    return p;
}

static void rm_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char p[1024];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode))
            rm_tree(p);
        else
            unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

/* ---- the live set as text: sorted ids joined by ',' ----------------- */

struct ids {
    char v[64][32];
    int n;
};

static int collect(void *data, const char *id, size_t len)
{
    struct ids *s = data;
    if (s->n < 64 && len < 32) {
        memcpy(s->v[s->n], id, len);
        s->v[s->n][len] = 0;
    }
    s->n++;
    return 0;
}

static int cmp(const void *a, const void *b)
{
    return strcmp(a, b);
}

static const char *set_of(struct ms_remember_file *s, const char *type,
                          uint32_t shard)
{
    static char out[2048];
    struct ids ids = { .n = 0 };
    out[0] = 0;
    if (ms_remember_file_list(s, type, shard, collect, &ids) != 0)
        return "<error>";
    if (ids.n > 64)
        return "<too many>";
    qsort(ids.v, (size_t)ids.n, sizeof ids.v[0], cmp);
    for (int i = 0; i < ids.n; i++) {
        if (i)
            strcat(out, ",");
        strcat(out, ids.v[i]);
    }
    return out;
}

static int add(struct ms_remember_file *s, const char *type, uint32_t shard,
               int op, const char *id)
{
    return ms_remember_file_append(s, type, shard, op, id, strlen(id));
}

static off_t size_of(const char *dir, const char *name)
{
    char p[1024];
    struct stat sb;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return stat(p, &sb) == 0 ? sb.st_size : -1;
}

static struct ms_remember_file *open_store(const char *dir,
                                           enum ms_remember_fsync pol)
{
    struct ms_remember_file *s = NULL;
    CHECK(ms_remember_file_new(dir, pol, 8, &s) == 0);
    return s;
}

/* ---- the tests ------------------------------------------------------ */

static void test_policies_and_args(void)
{
    enum ms_remember_fsync p;
    CHECK(ms_remember_file_fsync_policy("always", &p) == 0 &&
          p == MS_REMEMBER_FSYNC_ALWAYS);
    CHECK(ms_remember_file_fsync_policy("on_compaction", &p) == 0 &&
          p == MS_REMEMBER_FSYNC_ON_COMPACTION);
    CHECK(ms_remember_file_fsync_policy("never", &p) == 0 &&
          p == MS_REMEMBER_FSYNC_NEVER);
    CHECK(ms_remember_file_fsync_policy("sometimes", &p) == MS_EINVAL);
    CHECK(ms_remember_file_fsync_policy(NULL, &p) == MS_EINVAL);

    const char *dir = subdir("args");
    struct ms_remember_file *s = NULL, *t = NULL;
    CHECK(ms_remember_file_new(dir, MS_REMEMBER_FSYNC_NEVER, 0, &s) ==
          MS_EINVAL);
    CHECK(ms_remember_file_new(dir, MS_REMEMBER_FSYNC_NEVER,
                               MS_REMEMBER_FILE_MAX_OPEN + 1, &s) ==
          MS_EINVAL);
    CHECK(ms_remember_file_new("/nonexistent/remember", MS_REMEMBER_FSYNC_NEVER,
                               4, &s) == -ENOENT);
    s = open_store(dir, MS_REMEMBER_FSYNC_NEVER);
    /* two stores may share a directory; one log has one writer at a
     * time: the second gets MS_EBUSY until the first closes the log */
    t = open_store(dir, MS_REMEMBER_FSYNC_NEVER);
    CHECK(ms_remember_file_append(s, "L", 1, MS_REMEMBER_START, "a", 1) == 0);
    CHECK(ms_remember_file_append(t, "L", 1, MS_REMEMBER_START, "b", 1) ==
          MS_EBUSY);
    CHECK(ms_remember_file_append(t, "L", 2, MS_REMEMBER_START, "b", 1) == 0);
    ms_remember_file_close_log(s, "L", 1);
    CHECK(ms_remember_file_append(t, "L", 1, MS_REMEMBER_START, "b", 1) == 0);
    size_t cnt = 0;
    CHECK(ms_remember_file_count(t, "L", 1, &cnt) == 0 && cnt == 2);
    CHECK(ms_remember_file_count(s, "L", 1, &cnt) == MS_EBUSY);
    ms_remember_file_free(t);
    t = NULL;
    CHECK(ms_remember_file_count(s, "L", 1, &cnt) == 0 && cnt == 2);

    char big[MS_MAX_ID + 1];
    memset(big, 'x', sizeof big);
    CHECK(ms_remember_file_append(s, "T", 0, MS_REMEMBER_START, big,
                                  MS_MAX_ID + 1) == MS_E2BIG);
    CHECK(ms_remember_file_append(s, "T", 0, MS_REMEMBER_START, big,
                                  MS_MAX_ID) == 0);
    CHECK(ms_remember_file_append(s, "T", 0, MS_REMEMBER_START, big, 0) ==
          MS_EINVAL);
    CHECK(add(s, "../T", 0, MS_REMEMBER_START, "a") == MS_EINVAL);
    CHECK(add(s, "T.x", 0, MS_REMEMBER_START, "a") == MS_EINVAL);
    CHECK(add(s, "", 0, MS_REMEMBER_START, "a") == MS_EINVAL);
    CHECK(add(s, "T", 65536, MS_REMEMBER_START, "a") == MS_EINVAL);
    CHECK(add(s, "T", 0, 3, "a") == MS_EINVAL);
    /* ids are bytes: NUL and newlines included */
    CHECK(ms_remember_file_append(s, "T", 1, MS_REMEMBER_START, "a\0b\n",
                                  4) == 0);
    size_t n = 0;
    CHECK(ms_remember_file_count(s, "T", 1, &n) == 0 && n == 1);
    ms_remember_file_free(s);
    /* the lock went with the store */
    s = open_store(dir, MS_REMEMBER_FSYNC_NEVER);
    CHECK(ms_remember_file_count(s, "T", 1, &n) == 0 && n == 1);
    CHECK(ms_remember_file_count(s, "T", 0, &n) == 0 && n == 1);
    ms_remember_file_free(s);
}

static void test_replay_and_reopen(void)
{
    const char *dir = subdir("replay");
    struct ms_remember_file *s = open_store(dir, MS_REMEMBER_FSYNC_NEVER);
    CHECK(strcmp(set_of(s, "Order", 3), "") == 0);
    CHECK(size_of(dir, "Order.3.rlog") == -1); /* listing creates nothing */
    CHECK(add(s, "Order", 3, MS_REMEMBER_START, "a") == 0);
    CHECK(add(s, "Order", 3, MS_REMEMBER_START, "b") == 0);
    CHECK(add(s, "Order", 3, MS_REMEMBER_START, "c") == 0);
    CHECK(add(s, "Order", 3, MS_REMEMBER_STOP, "b") == 0);
    CHECK(add(s, "Order", 3, MS_REMEMBER_START, "d") == 0);
    CHECK(add(s, "Order", 4, MS_REMEMBER_START, "z") == 0);
    struct ms_remember_file_stats st;
    ms_remember_file_stats(s, &st);
    CHECK(st.appends == 6);
    /* changes nothing, writes nothing */
    CHECK(add(s, "Order", 3, MS_REMEMBER_START, "a") == 0);
    CHECK(add(s, "Order", 3, MS_REMEMBER_STOP, "b") == 0);
    CHECK(add(s, "Order", 3, MS_REMEMBER_STOP, "never") == 0);
    ms_remember_file_stats(s, &st);
    CHECK(st.appends == 6);
    CHECK(strcmp(set_of(s, "Order", 3), "a,c,d") == 0);
    CHECK(strcmp(set_of(s, "Order", 4), "z") == 0);
    ms_remember_file_free(s);

    /* reopen after close: the set comes back from the file */
    s = open_store(dir, MS_REMEMBER_FSYNC_NEVER);
    CHECK(strcmp(set_of(s, "Order", 3), "a,c,d") == 0);
    CHECK(strcmp(set_of(s, "Order", 4), "z") == 0);
    CHECK(add(s, "Order", 3, MS_REMEMBER_STOP, "a") == 0);
    ms_remember_file_free(s);
    s = open_store(dir, MS_REMEMBER_FSYNC_NEVER);
    CHECK(strcmp(set_of(s, "Order", 3), "c,d") == 0);
    ms_remember_file_stats(s, &st);
    CHECK(st.cuts == 0);
    ms_remember_file_free(s);
}

/* Writes a log a,b,c (records of 7 + 1 bytes after the 8-byte header),
 * damages it with `damage` and checks the replay. */
static void damaged(const char *name, void (*damage)(const char *path),
                    const char *want, off_t want_size)
{
    const char *dir = subdir(name);
    struct ms_remember_file *s = open_store(dir, MS_REMEMBER_FSYNC_ALWAYS);
    CHECK(add(s, "T", 0, MS_REMEMBER_START, "a") == 0);
    CHECK(add(s, "T", 0, MS_REMEMBER_START, "b") == 0);
    CHECK(add(s, "T", 0, MS_REMEMBER_START, "c") == 0);
    ms_remember_file_free(s);
    CHECK(size_of(dir, "T.0.rlog") == 8 + 3 * 8);
    char path[1024];
    snprintf(path, sizeof path, "%s/T.0.rlog", dir);
    damage(path);

    int w = warns;
    s = open_store(dir, MS_REMEMBER_FSYNC_ALWAYS);
    CHECK(strcmp(set_of(s, "T", 0), want) == 0);
    struct ms_remember_file_stats st;
    ms_remember_file_stats(s, &st);
    CHECK(st.cuts == 1);
    CHECK(warns == w + 1); /* the cut is logged */
    CHECK(size_of(dir, "T.0.rlog") == want_size); /* cut at the damage */
    /* the log goes on after the cut */
    CHECK(add(s, "T", 0, MS_REMEMBER_START, "e") == 0);
    ms_remember_file_free(s);
    s = open_store(dir, MS_REMEMBER_FSYNC_ALWAYS);
    char want_e[64];
    snprintf(want_e, sizeof want_e, "%s%se", want, *want ? "," : "");
    CHECK(strcmp(set_of(s, "T", 0), want_e) == 0);
    ms_remember_file_stats(s, &st);
    CHECK(st.cuts == 0);
    ms_remember_file_free(s);
}

static void truncate_3(const char *path)
{
    CHECK(truncate(path, 8 + 3 * 8 - 3) == 0);
}

static void flip_byte(const char *path, off_t at)
{
    int fd = open(path, O_RDWR);
    unsigned char c;
    CHECK(pread(fd, &c, 1, at) == 1);
    c ^= 0x20;
    CHECK(pwrite(fd, &c, 1, at) == 1);
    close(fd);
}

static void corrupt_last_id(const char *path)
{
    flip_byte(path, 8 + 2 * 8 + 3); /* the id byte of the third record */
}

static void corrupt_last_crc(const char *path)
{
    flip_byte(path, 8 + 3 * 8 - 1);
}

static void corrupt_middle_len(const char *path)
{
    flip_byte(path, 8 + 1 * 8 + 2); /* len of "b" becomes 0x2001 */
}

static void append_garbage(const char *path)
{
    int fd = open(path, O_WRONLY | O_APPEND);
    CHECK(write(fd, "\x01\x05\x00" "ab", 5) == 5); /* a torn "start" */
    close(fd);
}

static void test_damage(void)
{
    damaged("torn", truncate_3, "a,b", 8 + 2 * 8);
    damaged("bad_id", corrupt_last_id, "a,b", 8 + 2 * 8);
    damaged("bad_crc", corrupt_last_crc, "a,b", 8 + 2 * 8);
    /* a bad record in the middle: what follows it is lost too */
    damaged("bad_middle", corrupt_middle_len, "a", 8 + 1 * 8);
    damaged("garbage", append_garbage, "a,b,c", 8 + 3 * 8);

    /* a torn creation (a prefix of the header) is reset; a foreign file
     * is refused and left alone */
    const char *dir = subdir("headers");
    char path[1024];
    snprintf(path, sizeof path, "%s/T.0.rlog", dir);
    FILE *f = fopen(path, "w");
    fputs("MSR", f);
    fclose(f);
    snprintf(path, sizeof path, "%s/T.1.rlog", dir);
    f = fopen(path, "w");
    fputs("not a remember log\n", f);
    fclose(f);
    struct ms_remember_file *s = open_store(dir, MS_REMEMBER_FSYNC_NEVER);
    CHECK(strcmp(set_of(s, "T", 0), "") == 0);
    CHECK(add(s, "T", 0, MS_REMEMBER_START, "a") == 0);
    CHECK(add(s, "T", 1, MS_REMEMBER_START, "a") == MS_EINVAL);
    size_t n;
    CHECK(ms_remember_file_count(s, "T", 1, &n) == MS_EINVAL);
    ms_remember_file_free(s);
    CHECK(size_of(dir, "T.1.rlog") == 19);
    s = open_store(dir, MS_REMEMBER_FSYNC_NEVER);
    CHECK(strcmp(set_of(s, "T", 0), "a") == 0);
    ms_remember_file_free(s);
}

static void test_compaction(void)
{
    const char *dir = subdir("compact");
    struct ms_remember_file *s = open_store(dir, MS_REMEMBER_FSYNC_NEVER);
    char id[32];
    /* churn: 40 ids started and stopped 10 times, then 5 left running */
    for (int round = 0; round < 10; round++)
        for (int i = 0; i < 40; i++) {
            snprintf(id, sizeof id, "id%02d", i);
            CHECK(add(s, "T", 7, MS_REMEMBER_START, id) == 0);
            if (round < 9 || i >= 5)
                CHECK(add(s, "T", 7, MS_REMEMBER_STOP, id) == 0);
        }
    const char *want = "id00,id01,id02,id03,id04";
    CHECK(strcmp(set_of(s, "T", 7), want) == 0);
    off_t before = size_of(dir, "T.7.rlog");
    /* a temp file left by a compaction that crashed is overwritten */
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s/T.7.rlog.tmp", dir);
    FILE *f = fopen(tmp, "w");
    fputs("MSRLOG1\n left over by a crash, longer than the new log .....\n"
          "...............................................................",
          f);
    fclose(f);
    CHECK(ms_remember_file_compact(s, "T", 7) == 0);
    off_t after = size_of(dir, "T.7.rlog");
    CHECK(after == 8 + 5 * 11);
    CHECK(after < before);
    CHECK(size_of(dir, "T.7.rlog.tmp") == -1);
    CHECK(strcmp(set_of(s, "T", 7), want) == 0);
    /* appends go to the compacted file */
    CHECK(add(s, "T", 7, MS_REMEMBER_STOP, "id00") == 0);
    ms_remember_file_free(s);
    s = open_store(dir, MS_REMEMBER_FSYNC_NEVER);
    CHECK(strcmp(set_of(s, "T", 7), "id01,id02,id03,id04") == 0);
    /* a missing log stays missing */
    CHECK(ms_remember_file_compact(s, "T", 8) == 0);
    CHECK(size_of(dir, "T.8.rlog") == -1);

    /* compaction by itself: churn past COMPACT_MIN records with a small
     * live set keeps the file bounded */
    struct ms_remember_file_stats st;
    for (int i = 0; i < 3 * MS_REMEMBER_FILE_COMPACT_MIN; i++) {
        snprintf(id, sizeof id, "c%d", i % 50);
        add(s, "T", 9, (i / 50) % 2 ? MS_REMEMBER_STOP : MS_REMEMBER_START,
            id);
    }
    ms_remember_file_stats(s, &st);
    CHECK(st.compactions >= 2);
    CHECK(size_of(dir, "T.9.rlog") <
          8 + (off_t)(MS_REMEMBER_FILE_COMPACT_MIN + 50) * 10);
    size_t n = 0;
    CHECK(ms_remember_file_count(s, "T", 9, &n) == 0);
    ms_remember_file_free(s);
    s = open_store(dir, MS_REMEMBER_FSYNC_NEVER);
    size_t m = 0;
    CHECK(ms_remember_file_count(s, "T", 9, &m) == 0 && m == n);
    ms_remember_file_free(s);
}

static void test_fsync_counts(void)
{
    struct ms_remember_file_stats st;
    struct ms_remember_file *s = open_store(subdir("fs_always"),
                                            MS_REMEMBER_FSYNC_ALWAYS);
    CHECK(add(s, "T", 0, MS_REMEMBER_START, "a") == 0); /* creates */
    ms_remember_file_stats(s, &st);
    uint64_t base = st.fsyncs;
    CHECK(base == 3); /* header, directory entry, record */
    for (int i = 0; i < 10; i++) {
        char id[8];
        snprintf(id, sizeof id, "x%d", i);
        CHECK(add(s, "T", 0, MS_REMEMBER_START, id) == 0);
    }
    ms_remember_file_stats(s, &st);
    CHECK(st.fsyncs == base + 10);
    CHECK(add(s, "T", 0, MS_REMEMBER_START, "a") == 0); /* no write */
    ms_remember_file_stats(s, &st);
    CHECK(st.fsyncs == base + 10);
    ms_remember_file_free(s);

    s = open_store(subdir("fs_oncompact"), MS_REMEMBER_FSYNC_ON_COMPACTION);
    for (int i = 0; i < 10; i++) {
        char id[8];
        snprintf(id, sizeof id, "x%d", i);
        CHECK(add(s, "T", 0, MS_REMEMBER_START, id) == 0);
    }
    ms_remember_file_stats(s, &st);
    CHECK(st.fsyncs == 0);
    CHECK(ms_remember_file_compact(s, "T", 0) == 0);
    ms_remember_file_stats(s, &st);
    CHECK(st.fsyncs == 2); /* the new file and the directory */
    ms_remember_file_free(s);

    s = open_store(subdir("fs_never"), MS_REMEMBER_FSYNC_NEVER);
    CHECK(add(s, "T", 0, MS_REMEMBER_START, "a") == 0);
    CHECK(ms_remember_file_compact(s, "T", 0) == 0);
    ms_remember_file_stats(s, &st);
    CHECK(st.fsyncs == 0);
    ms_remember_file_free(s);
}

static void test_lru(void)
{
    const char *dir = subdir("lru");
    struct ms_remember_file *s = NULL;
    CHECK(ms_remember_file_new(dir, MS_REMEMBER_FSYNC_NEVER, 2, &s) == 0);
    char id[8];
    for (int round = 0; round < 3; round++)
        for (uint32_t sh = 0; sh < 5; sh++) {
            snprintf(id, sizeof id, "r%d", round);
            CHECK(add(s, "T", sh, MS_REMEMBER_START, id) == 0);
        }
    struct ms_remember_file_stats st;
    ms_remember_file_stats(s, &st);
    CHECK(st.lru_closes >= 10);
    /* at most 2 logs open: descriptors are bounded */
    int open_logs = 0;
    DIR *d = opendir("/proc/self/fd");
    if (d) {
        struct dirent *e;
        char p[320], target[1024];
        while ((e = readdir(d))) {
            snprintf(p, sizeof p, "/proc/self/fd/%s", e->d_name);
            ssize_t n = readlink(p, target, sizeof target - 1);
            if (n > 0) {
                target[n] = 0;
                if (strstr(target, "/lru/T."))
                    open_logs++;
            }
        }
        closedir(d);
        CHECK(open_logs <= 2);
    }
    for (uint32_t sh = 0; sh < 5; sh++)
        CHECK(strcmp(set_of(s, "T", sh), "r0,r1,r2") == 0);
    ms_remember_file_free(s);
}

/* The byte bound compacts a large log that is mostly history, and never
 * one that is large because its live set is (the test builds with a
 * 256 KiB bound). */
static void test_byte_bound(void)
{
    const char *dir = subdir("bytes");
    struct ms_remember_file *s = open_store(dir, MS_REMEMBER_FSYNC_NEVER);
    char id[501];
    struct ms_remember_file_stats st;
    for (int i = 0; i < 600; i++) { /* 600 x 507 bytes: past the bound */
        memset(id, 'a' + i % 26, 500);
        snprintf(id, sizeof id, "%04d", i);
        id[4] = '-';
        CHECK(ms_remember_file_append(s, "B", 0, MS_REMEMBER_START, id,
                                      500) == 0);
    }
    ms_remember_file_stats(s, &st);
    CHECK(size_of(dir, "B.0.rlog") > (off_t)MS_REMEMBER_FILE_COMPACT_BYTES);
    CHECK(st.compactions == 0); /* all of it is live */
    for (int i = 0; i < 400; i++) {
        memset(id, 'a' + i % 26, 500);
        snprintf(id, sizeof id, "%04d", i);
        id[4] = '-';
        CHECK(ms_remember_file_append(s, "B", 0, MS_REMEMBER_STOP, id,
                                      500) == 0);
    }
    ms_remember_file_stats(s, &st);
    CHECK(st.compactions >= 1); /* below COMPACT_MIN records: bytes did */
    size_t n = 0;
    CHECK(ms_remember_file_count(s, "B", 0, &n) == 0 && n == 200);
    ms_remember_file_free(s);
    s = open_store(dir, MS_REMEMBER_FSYNC_NEVER);
    CHECK(ms_remember_file_count(s, "B", 0, &n) == 0 && n == 200);
    ms_remember_file_free(s);
}

/* A log never holds more than MAX_RECORDS records (20,000 in the test
 * build): an append at the bound compacts first, and is refused when
 * compaction cannot make room. */
static void test_record_bound(void)
{
    const char *dir = subdir("records");
    struct ms_remember_file *s = open_store(dir, MS_REMEMBER_FSYNC_NEVER);
    char id[16];
    for (int i = 0; i < 6000; i++) {
        snprintf(id, sizeof id, "r%d", i);
        CHECK(add(s, "R", 0, MS_REMEMBER_START, id) == 0);
    }
    int fails = 0;
    for (int i = 0; i < 20000; i++)
        fails += add(s, "R", 0, i % 2 ? MS_REMEMBER_STOP : MS_REMEMBER_START,
                     "churn") != 0;
    CHECK(fails == 0);
    struct ms_remember_file_stats st;
    ms_remember_file_stats(s, &st);
    CHECK(st.compactions >= 1);
    CHECK(size_of(dir, "R.0.rlog") <=
          8 + (off_t)MS_REMEMBER_FILE_MAX_RECORDS * (7 + 6));
    size_t n = 0;
    CHECK(ms_remember_file_count(s, "R", 0, &n) == 0 && n == 6000);
    ms_remember_file_free(s);
    s = open_store(dir, MS_REMEMBER_FSYNC_NEVER);
    CHECK(ms_remember_file_count(s, "R", 0, &n) == 0 && n == 6000);

    /* all live: nothing to compact away */
    for (int i = 0; i < MS_REMEMBER_FILE_MAX_RECORDS; i++) {
        snprintf(id, sizeof id, "f%d", i);
        CHECK(add(s, "R", 1, MS_REMEMBER_START, id) == 0);
    }
    CHECK(add(s, "R", 1, MS_REMEMBER_START, "one-more") == MS_E2BIG);
    ms_remember_file_free(s);
    s = open_store(dir, MS_REMEMBER_FSYNC_NEVER);
    CHECK(ms_remember_file_count(s, "R", 1, &n) == 0 &&
          n == MS_REMEMBER_FILE_MAX_RECORDS);
    ms_remember_file_free(s);
}

/* A write that fails half way (the file size limit stands in for a full
 * disk; root ignores directory permissions) is an error, counted; the
 * log is read back from the file, the torn record cut. A compaction that
 * cannot write its temp file leaves the old log in place. */
static void test_write_failure(void)
{
    const char *dir = subdir("efbig");
    struct ms_remember_file *s = open_store(dir, MS_REMEMBER_FSYNC_ALWAYS);
    CHECK(add(s, "W", 0, MS_REMEMBER_START, "a") == 0);
    CHECK(add(s, "W", 0, MS_REMEMBER_START, "b") == 0);
    CHECK(add(s, "W", 0, MS_REMEMBER_STOP, "b") == 0);
    off_t size = size_of(dir, "W.0.rlog");
    struct rlimit old, lim;
    CHECK(getrlimit(RLIMIT_FSIZE, &old) == 0);
    signal(SIGXFSZ, SIG_IGN);
    lim = old;
    lim.rlim_cur = (rlim_t)size + 4;
    CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    CHECK(add(s, "W", 0, MS_REMEMBER_START, "cccccc") == -EFBIG);
    CHECK(size_of(dir, "W.0.rlog") == size + 4); /* a torn record */
    lim.rlim_cur = 10; /* less than header and one record */
    CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    CHECK(ms_remember_file_compact(s, "W", 0) == -EFBIG);
    CHECK(size_of(dir, "W.0.rlog.tmp") == -1);
    CHECK(setrlimit(RLIMIT_FSIZE, &old) == 0);
    signal(SIGXFSZ, SIG_DFL);
    struct ms_remember_file_stats st;
    ms_remember_file_stats(s, &st);
    CHECK(st.errors == 2);
    CHECK(st.cuts == 1); /* the compaction's open replayed and cut */
    CHECK(size_of(dir, "W.0.rlog") == size);
    CHECK(strcmp(set_of(s, "W", 0), "a") == 0);
    CHECK(add(s, "W", 0, MS_REMEMBER_START, "d") == 0);
    ms_remember_file_free(s);
    s = open_store(dir, MS_REMEMBER_FSYNC_ALWAYS);
    CHECK(strcmp(set_of(s, "W", 0), "a,d") == 0);
    ms_remember_file_free(s);
}

/* A batch: records applied in order, one write and one sync for all;
 * a bad record refuses the whole batch before anything is written. */
static void test_batch(void)
{
    const char *dir = subdir("batch");
    struct ms_remember_file *s = open_store(dir, MS_REMEMBER_FSYNC_ALWAYS);
    CHECK(add(s, "T", 0, MS_REMEMBER_START, "w") == 0);
    struct ms_remember_file_stats st0, st;
    ms_remember_file_stats(s, &st0);
    struct ms_remember_rec recs[] = {
        { MS_REMEMBER_START, "x", 1 }, { MS_REMEMBER_START, "y", 1 },
        { MS_REMEMBER_STOP, "x", 1 },  { MS_REMEMBER_START, "z", 1 },
        { MS_REMEMBER_START, "y", 1 }, { MS_REMEMBER_STOP, "w", 1 },
    };
    CHECK(ms_remember_file_append_batch(s, "T", 0, recs, 6) == 0);
    ms_remember_file_stats(s, &st);
    CHECK(st.appends == st0.appends + 5); /* the second start of y: none */
    CHECK(st.fsyncs == st0.fsyncs + 1);
    CHECK(strcmp(set_of(s, "T", 0), "y,z") == 0);

    struct ms_remember_rec bad[] = {
        { MS_REMEMBER_START, "v", 1 }, { MS_REMEMBER_STOP, "y", 0 },
    };
    CHECK(ms_remember_file_append_batch(s, "T", 0, bad, 2) == MS_EINVAL);
    bad[1].idlen = MS_MAX_ID + 1;
    CHECK(ms_remember_file_append_batch(s, "T", 0, bad, 2) == MS_E2BIG);
    CHECK(ms_remember_file_append_batch(s, "T", 0, bad,
                                        MS_REMEMBER_FILE_MAX_BATCH + 1) ==
          MS_EINVAL);
    CHECK(ms_remember_file_append_batch(s, "T", 0, NULL, 0) == 0);
    ms_remember_file_stats(s, &st);
    CHECK(st.appends == st0.appends + 5);
    CHECK(strcmp(set_of(s, "T", 0), "y,z") == 0);
    ms_remember_file_free(s);
    s = open_store(dir, MS_REMEMBER_FSYNC_ALWAYS);
    CHECK(strcmp(set_of(s, "T", 0), "y,z") == 0);
    ms_remember_file_free(s);
}

/* ---- a writer killed in the middle of its appends ------------------- */

/* The i-th operation of the writer: starts k<i>, and every 5th
 * operation stops an id started 3 before instead. */
static void op_of(int i, int *op, char *id, size_t cap)
{
    if (i % 5 == 4) {
        *op = MS_REMEMBER_STOP;
        snprintf(id, cap, "k%d", i - 3);
    } else {
        *op = MS_REMEMBER_START;
        snprintf(id, cap, "k%d", i);
    }
}

/* The set after the first n operations, as a bitmap over k<i>. */
static void model(int n, unsigned char *live, int cap)
{
    memset(live, 0, (size_t)cap);
    for (int i = 0; i < n; i++) {
        int op;
        char id[16];
        op_of(i, &op, id, sizeof id);
        int k = atoi(id + 1);
        live[k] = op == MS_REMEMBER_START;
    }
}

struct bitmap {
    unsigned char *live;
    int cap, bad, n;
};

static int mark(void *data, const char *id, size_t len)
{
    struct bitmap *b = data;
    char t[16];
    if (len < 2 || len > 10 || id[0] != 'k') {
        b->bad++;
        return 0;
    }
    memcpy(t, id, len);
    t[len] = 0;
    int k = atoi(t + 1);
    if (k < 0 || k >= b->cap)
        b->bad++;
    else
        b->live[k] = 1;
    b->n++;
    return 0;
}

/* `policy` "always": every reported record survives even a machine
 * crash (not testable here); "on_compaction" promises the same for a
 * killed process only, which is what this checks for both. */
static void test_kill_mid_write(const char *name,
                                enum ms_remember_fsync policy)
{
    const char *dir = subdir(name);
    int fds[2];
    CHECK(pipe(fds) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        struct ms_remember_file *s = NULL;
        if (ms_remember_file_new(dir, policy, 4, &s))
            _exit(2);
        for (int i = 0;; i++) {
            int op;
            char id[16];
            op_of(i, &op, id, sizeof id);
            if (add(s, "K", 1, op, id) != 0)
                _exit(3);
            /* durable: tell the parent */
            if (write(fds[1], &i, sizeof i) != sizeof i)
                _exit(4);
        }
    }
    close(fds[1]);
    CHECK(pid > 0);
    int last = -1, v;
    /* let it run a while, then kill it without warning */
    while (last < 300 && read(fds[0], &v, sizeof v) == sizeof v)
        last = v;
    kill(pid, SIGKILL);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    while (read(fds[0], &v, sizeof v) == sizeof v)
        last = v;
    close(fds[0]);
    CHECK(last >= 300);

    /* every reported operation is in the log; at most the one after the
     * last report is too */
    enum { CAP = 1 << 20 };
    static unsigned char want[CAP], want_next[CAP], got[CAP];
    memset(got, 0, sizeof got);
    struct bitmap b = { got, CAP, 0, 0 };
    struct ms_remember_file *s = open_store(dir, MS_REMEMBER_FSYNC_ALWAYS);
    CHECK(ms_remember_file_list(s, "K", 1, mark, &b) == 0);
    ms_remember_file_free(s);
    CHECK(b.bad == 0);
    int top = last + 2 < CAP ? last + 2 : CAP;
    model(last + 1, want, top);
    model(last + 2, want_next, top);
    CHECK(memcmp(got, want, (size_t)top) == 0 ||
          memcmp(got, want_next, (size_t)top) == 0);
    for (int k = top; k < CAP; k++)
        if (got[k]) {
            CHECK(!"an id the writer never reached");
            break;
        }
}

int main(void)
{
    ms_log_setup("t", MS_LOG_DEBUG);
    ms_log_set_sink(sink, NULL);
    snprintf(root, sizeof root, "%s/ms-remember-XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    test_policies_and_args();
    test_replay_and_reopen();
    test_damage();
    test_compaction();
    test_fsync_counts();
    test_lru();
    test_byte_bound();
    test_record_bound();
    test_write_failure();
    test_batch();
    test_kill_mid_write("kill_always", MS_REMEMBER_FSYNC_ALWAYS);
    test_kill_mid_write("kill_on_compaction",
                        MS_REMEMBER_FSYNC_ON_COMPACTION);
    rm_tree(root);
    CHECK_DONE();
}
