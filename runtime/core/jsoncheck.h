/*
 * jsoncheck.h -- a fast check that bytes are one strict JSON object
 * (RFC 8259), nested at most `max_depth` deep (sans-IO).
 *
 * The HTTP gateway validates every body before it accepts it. Decoding it
 * in Lua only to throw the table away cost about a microsecond per
 * message, as much as the handler's own decode; this scanner allocates
 * nothing and builds nothing. It is strict, never lenient: whatever it
 * accepts, lua-cjson decodes too (standard numbers, escapes with paired
 * UTF-16 surrogates, no raw control characters, depth within the limit
 * that the node's decoder uses). What it refuses goes to the Lua check,
 * whose verdict and message stay the gateway's answer.
 */
#ifndef MS_CORE_JSONCHECK_H
#define MS_CORE_JSONCHECK_H

#include <stddef.h>

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
