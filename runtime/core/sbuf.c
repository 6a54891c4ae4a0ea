/* sbuf.c -- see sbuf.h. */
#include "sbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void ms_sbuf_printf(struct ms_sbuf *b, const char *fmt, ...)
{
    for (int pass = 0; pass < 2 && !b->oom; pass++) {
        size_t room = b->cap - b->len;
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p ? b->p + b->len : NULL, room, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = 1;
            return;
        }
        if ((size_t)n < room) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->len + (size_t)n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
}
