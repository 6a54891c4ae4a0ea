/*
 * flatjson.h -- a pull reader of flat JSON objects (sans-IO), for the small
 * fixed messages the core reads from outside: the transport handshake
 * (auth.c) and the body of POST /v1/down (downreq.c).
 *
 * It reads one object whose members are plain strings, small unsigned
 * integers or booleans, or one plain string, and nothing else: no nesting,
 * no escapes, no null, no signs, fractions or exponents. A plain string is
 * the bytes between two quotes, none of them a backslash or a control
 * byte (< 0x20); with MS_FJ_ASCII, none of them above 0x7E either. The
 * bytes are handed out as they are, never copied or decoded. An integer
 * is 1 to 9 decimal digits (leading zeros allowed: the handshake always
 * took them), so it fits a uint32_t. Whitespace is space, tab, CR and LF.
 * Whatever it refuses, the caller refuses: hostile input meets no
 * recursion and no allocation, and the limits are the caller's
 * (max_string; how many members, which keys, duplicates).
 *
 * Members come one at a time (ms_fj_next), in the order of the text, so a
 * caller can refuse a member, or name what was wrong with it, before the
 * rest is read. Use:
 *
 *     struct ms_fj r;
 *     struct ms_fj_member m;
 *     ms_fj_init(&r, text, len, 255, MS_FJ_ASCII);
 *     if (ms_fj_object(&r) != 0) ...refuse...
 *     while ((rc = ms_fj_next(&r, &m)) == 1) ...use m...
 *     if (rc < 0 || ms_fj_end(&r) != 0) ...refuse...
 */
#ifndef MS_CORE_FLATJSON_H
#define MS_CORE_FLATJSON_H

#include <stddef.h>
#include <stdint.h>

/* Flags of ms_fj_init. */
#define MS_FJ_ASCII 1u /* strings hold printable ASCII only (0x20..0x7E) */

/* Longest integer, in digits. */
#define MS_FJ_MAX_DIGITS 9

/* Errors (negative). */
#define MS_FJ_ESYNTAX (-1)  /* not the shape above */
#define MS_FJ_ESTRING (-2)  /* a string with a byte it may not hold, or
                               without its closing quote */
#define MS_FJ_ETOOLONG (-3) /* a string longer than max_string bytes */

/* Kinds of a member's value. */
enum ms_fj_kind { MS_FJ_STRING = 1, MS_FJ_INT, MS_FJ_TRUE, MS_FJ_FALSE };

struct ms_fj {
    const char *p, *end;
    size_t max_string;
    unsigned flags;
    int state;            /* internal: where the reader is in the object */
};

/* One member. key and str point into the text given to ms_fj_init. */
struct ms_fj_member {
    const char *key;      /* klen bytes */
    size_t klen;
    enum ms_fj_kind kind;
    const char *str;      /* MS_FJ_STRING: slen bytes */
    size_t slen;
    uint32_t num;         /* MS_FJ_INT */
    int in_value;         /* on an error: 1 when it is in the value of the
                             member `key` (its key and ':' were read) */
};

/* Starts reading text[0..len), which it borrows until the last call
 * (NULL is fine when len is 0). Strings longer than max_string bytes are refused (MS_FJ_ETOOLONG). */
void ms_fj_init(struct ms_fj *r, const char *text, size_t len,
                size_t max_string, unsigned flags);

/* Skips whitespace; returns the next byte (0..255), or -1 at the end. */
int ms_fj_peek(struct ms_fj *r);

/* Reads one plain string value (after whitespace) into *s, *n: 0, or a
 * negative MS_FJ_E* code. */
int ms_fj_string(struct ms_fj *r, const char **s, size_t *n);

/* Reads the '{' that opens an object (after whitespace): 0 or
 * MS_FJ_ESYNTAX. */
int ms_fj_object(struct ms_fj *r);

/* Reads the next member of the object opened by ms_fj_object into *m.
 * Returns 1 with a member, 0 once the object is closed (and from then on),
 * or a negative MS_FJ_E* code, with m->in_value (and m->key) saying
 * whether the error is in a member's value. After an error the reader
 * stays failed. */
int ms_fj_next(struct ms_fj *r, struct ms_fj_member *m);

/* 0 when nothing but whitespace is left, else MS_FJ_ESYNTAX. */
int ms_fj_end(struct ms_fj *r);

#endif
