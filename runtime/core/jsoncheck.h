/*
 * jsoncheck.h -- a fast check that bytes are one strict JSON object
 * (RFC 8259), nested at most `max_depth` deep (sans-IO).
 *
 * It is the one judge of every JSON byte that comes from outside: HTTP
 * bodies at the gateway, and the payloads of TELL, ASK and REPLY frames
 * from other nodes. Decoding in Lua only to throw the table away cost
 * about a microsecond per message; this scanner allocates nothing and
 * builds nothing. It is strict, never lenient: whatever it accepts,
 * lua-cjson decodes too (standard numbers, escapes with paired UTF-16
 * surrogates, no raw control characters, depth within the limit that the
 * node's decoder uses), and what it refuses is refused, although
 * lua-cjson would take some of it (`1.`, `-.5`, `1.e2`, raw control
 * characters, bytes after a NUL). Bytes >= 0x20 inside strings are not
 * checked for UTF-8, as lua-cjson does not check them either; the node's
 * encoder (runtime/lua/json_encode.c) passes such bytes through, and this
 * check accepts what the encoder writes.
 */
#ifndef MS_CORE_JSONCHECK_H
#define MS_CORE_JSONCHECK_H

#include <stddef.h>

/* Longest number text accepted, in bytes (sign, digits, point and
 * exponent): far beyond the 17 significant digits a double keeps, and
 * short enough to be converted on the stack. A longer one is refused as
 * such ("a number is longer than 399 characters"). */
#define MS_JSON_MAX_NUMBER 399

#define MS_JSON_OBJECT 0 /* one JSON object */
#define MS_JSON_VALUE 1  /* one JSON value that is not an object */
#define MS_JSON_BAD (-1) /* not one strict JSON value */

/* Classifies json[0..len) (whitespace around the value allowed), with
 * objects and arrays nested at most max_depth deep, the outermost counting
 * 1: MS_JSON_OBJECT, MS_JSON_VALUE or MS_JSON_BAD. On MS_JSON_BAD, *why
 * (when why is not NULL) is set to a static text saying what is wrong and
 * *at (when not NULL) to the byte offset where the scan stopped. */
int ms_json_check(const char *json, size_t len, int max_depth,
                  const char **why, size_t *at);

/* 1 when json[0..len) is a strict JSON object (whitespace around it
 * allowed) with objects and arrays nested at most max_depth deep, the
 * top object counting 1; else 0. */
int ms_json_is_object(const char *json, size_t len, int max_depth);

/* Appends s[0..len) to out[*n..cap) as the inside of a JSON string. Bytes
 * that are not valid UTF-8 become U+FFFD, so the result is always valid
 * JSON; each byte takes at most 6 bytes. Stops early, at a character
 * boundary, rather than overflow. */
void ms_json_put_escaped(char *out, size_t cap, size_t *n, const char *s,
                         size_t len);

#endif
