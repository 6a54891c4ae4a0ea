/*
 * sbuf.h -- a growable text buffer filled printf-style (sans-IO), for the
 * JSON texts the core writes (gossip, member lists, strategy views).
 *
 *     struct ms_sbuf b = {0};
 *     ms_sbuf_printf(&b, "{\"n\":%d}", n);
 *     if (!b.oom) use(b.p, b.len);
 *     free(b.p);
 */
#ifndef MS_CORE_SBUF_H
#define MS_CORE_SBUF_H

#include <stddef.h>

struct ms_sbuf {
    char *p;     /* NUL-terminated text, malloc'd; NULL before any text */
    size_t len;  /* bytes of text */
    size_t cap;
    int oom;     /* out of memory: the text is lost, later calls do nothing */
};

/* Appends printf-style text, growing the buffer (doubling from 1 KiB). */
void ms_sbuf_printf(struct ms_sbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
