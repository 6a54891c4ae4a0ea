/*
 * watch.c -- the file poller behind `--watch` (see watch.h).
 *
 * The Lua side (moonshard.reload) decides what to watch and what a change
 * means; this file only stats paths on a timer. Both of its calls into Lua,
 * reload.start(config) and reload.poll(changed), answer with lines:
 *
 *     file<TAB>PATH           a file to watch (the whole list, every time)
 *     LEVEL<TAB>TEXT          a line for the node's log (info, warn, ...)
 *
 * Polling with stat, rather than inotify, is deliberate: editors save by
 * writing in place, by rename, or by delete and create, and a poll of a
 * few dozen files every 300 ms sees all of them the same way.
 */
#include "watch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/errors.h"
#include "../core/log.h"

/* What a poll knows about a file; `exists` 0 compares equal to any other
 * missing file. */
struct file_stat {
    int exists;
    uint64_t dev, ino, size;
    uint64_t mtime_s, mtime_ns;
};

struct watched {
    char *path;
    struct file_stat loaded; /* when it was last (re)loaded */
    struct file_stat polled; /* at the previous poll */
};

struct ms_watch {
    uv_timer_t timer;
    uv_loop_t *loop;
    ms_watch_call_fn call;    /* into the node's VM */
    void *data;
    struct watched *files;
    int nfiles;
};

static void stat_file(uv_loop_t *loop, const char *path, struct file_stat *st)
{
    uv_fs_t req;
    memset(st, 0, sizeof *st);
    if (uv_fs_stat(loop, &req, path, NULL) == 0) {
        const uv_stat_t *s = &req.statbuf;
        st->exists = 1;
        st->dev = s->st_dev;
        st->ino = s->st_ino;
        st->size = s->st_size;
        st->mtime_s = (uint64_t)s->st_mtim.tv_sec;
        st->mtime_ns = (uint64_t)s->st_mtim.tv_nsec;
    }
    uv_fs_req_cleanup(&req);
}

static int same(const struct file_stat *a, const struct file_stat *b)
{
    if (!a->exists || !b->exists)
        return a->exists == b->exists;
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtime_s == b->mtime_s && a->mtime_ns == b->mtime_ns;
}

static void free_files(struct watched *files, int n)
{
    for (int i = 0; i < n; i++)
        free(files[i].path);
    free(files);
}

/* Logs the LEVEL lines of a reload answer and replaces the list of
 * watched files by its `file` lines, keeping what is known about the
 * files already watched (a file new to the list is taken as loaded now).
 * `text` is modified. */
static void apply(struct ms_watch *w, char *text)
{
    int cap = 0, n = 0;
    for (const char *p = text; *p; p++)
        cap += *p == '\n';
    struct watched *files = calloc((size_t)cap + 1, sizeof *files);
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        char *tab = strchr(line, '\t');
        if (!tab)
            continue;
        *tab = 0;
        const char *value = tab + 1;
        if (strcmp(line, "file") != 0) {
            int level = ms_log_level(line);
            ms_log(level < 0 ? MS_LOG_INFO : level, NULL, "%s", value);
            continue;
        }
        if (!files || n >= cap + 1)
            continue;
        struct watched *f = &files[n];
        f->path = strdup(value);
        if (!f->path)
            continue;
        int known = 0;
        for (int i = 0; i < w->nfiles && !known; i++) {
            if (strcmp(w->files[i].path, value) == 0) {
                f->loaded = w->files[i].loaded;
                f->polled = w->files[i].polled;
                known = 1;
            }
        }
        if (!known) {
            stat_file(w->loop, value, &f->loaded);
            f->polled = f->loaded;
        }
        n++;
    }
    if (!files) {
        ms_log(MS_LOG_ERROR, NULL, "reload: out of memory; the watched "
               "files stay as they were");
        return;
    }
    free_files(w->files, w->nfiles);
    w->files = files;
    w->nfiles = n;
}

/* Calls moonshard.reload.fn(arg) and applies its answer. */
static int call_reload(struct ms_watch *w, const char *fn, const char *arg,
                       char *err, size_t errlen)
{
    char *out = NULL;
    int rc = w->call(w->data, "moonshard.reload", fn, arg, &out, err,
                     errlen);
    if (rc < 0)
        return rc;
    apply(w, out);
    free(out);
    return 0;
}

static void on_poll(uv_timer_t *t)
{
    struct ms_watch *w = t->data;
    size_t len = 0, cap = 0;
    char *changed = NULL;
    for (int i = 0; i < w->nfiles; i++) {
        struct watched *f = &w->files[i];
        struct file_stat now;
        stat_file(w->loop, f->path, &now);
        int stable = same(&now, &f->polled);
        f->polled = now;
        /* changed since the last load, and not still being written */
        if (same(&now, &f->loaded) || !stable)
            continue;
        f->loaded = now;
        size_t pl = strlen(f->path);
        if (len + pl + 2 > cap) {
            size_t ncap = (len + pl + 2) * 2;
            char *p = realloc(changed, ncap);
            if (!p)
                break;
            changed = p;
            cap = ncap;
        }
        memcpy(changed + len, f->path, pl);
        len += pl;
        changed[len++] = '\n';
        changed[len] = 0;
    }
    if (!changed)
        return;
    char err[1024];
    if (call_reload(w, "poll", changed, err, sizeof err) < 0)
        ms_log(MS_LOG_WARN, NULL, "reload: internal error: %s", err);
    free(changed);
}

int ms_watch_start(struct ms_watch **out, uv_loop_t *loop,
                   ms_watch_call_fn call, void *data,
                   const char *config_path, uint64_t interval_ms, char *err,
                   size_t errlen)
{
    struct ms_watch *w = calloc(1, sizeof *w);
    if (!w) {
        snprintf(err, errlen, "out of memory");
        return MS_ENOMEM;
    }
    w->loop = loop;
    w->call = call;
    w->data = data;
    int rc = call_reload(w, "start", config_path, err, errlen);
    if (rc < 0) {
        free_files(w->files, w->nfiles);
        free(w);
        return rc;
    }
    uv_timer_init(loop, &w->timer);
    w->timer.data = w;
    uv_timer_start(&w->timer, on_poll, interval_ms, interval_ms);
    *out = w;
    return 0;
}

static void on_closed(uv_handle_t *h)
{
    struct ms_watch *w = h->data;
    free_files(w->files, w->nfiles);
    free(w);
}

void ms_watch_close(struct ms_watch *w)
{
    if (!w)
        return;
    uv_timer_stop(&w->timer);
    uv_close((uv_handle_t *)&w->timer, on_closed);
}
