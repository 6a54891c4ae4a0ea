/*
 * client_error.h -- what an error tells a client, and what only the log
 * may know (sans-IO).
 *
 * An error answered to an HTTP client carries a code, a short message and
 * an id; the node logs the same id with the whole detail. The message is
 * made from the detail here: the first line only, without Lua source
 * positions, file paths, search lists or heap addresses, and at most
 * MS_CLIENT_MSG_MAX bytes. Handlers' own words ("unknown message type:
 * x") stay readable; where the server's layout would show, a placeholder
 * ("<path>", "<address>") stands instead.
 */
#ifndef MS_CORE_CLIENT_ERROR_H
#define MS_CORE_CLIENT_ERROR_H

#include <stddef.h>
#include <stdint.h>

/* Bytes of a client message at most (not counting the NUL). */
#define MS_CLIENT_MSG_MAX 200
/* Characters of an error id: "e-" and 12 hex digits. */
#define MS_CLIENT_ID_LEN 14

/*
 * Writes into out[0..cap) (cap >= 8; always NUL-terminated) the message a
 * client may see for `detail` (len bytes, any bytes): its first line, with
 * leading source positions ("file.lua:12: ") removed, path-like words
 * (with '/' or '\\', naming a .lua file, or package.*) replaced by
 * "<path>", hexadecimal numbers (0x...) by "<address>", blanks and
 * control characters folded into single spaces, cut at a UTF-8 character
 * boundary to at most MS_CLIENT_MSG_MAX bytes ("..." marks a cut).
 * Returns its length; 0 when nothing meaningful is left (the detail was
 * empty, or only a Lua value's name such as "table: 0x..."): the caller
 * then sends a generic message of the error's code.
 */
size_t ms_client_error_text(char *out, size_t cap, const char *detail,
                            size_t len);

/*
 * Reads an error payload of the node, a JSON object such as
 * {"code":"handler_error","message":"..."} whose values are strings, into
 * code[0..codecap) and message[0..msgcap) (both unescaped UTF-8,
 * NUL-terminated, cut to fit). A missing "message" gives "". Returns 0,
 * or -1 when json[0..len) is not such an object or has no "code" (the
 * buffers then hold empty strings).
 */
int ms_client_error_parse(const char *json, size_t len, char *code,
                          size_t codecap, char *message, size_t msgcap);

/*
 * Writes the id of error number `n` of a gateway whose ids start from
 * `seed` ("e-" and 12 lower-case hex digits, NUL-terminated) into out.
 * Ids of one seed differ for n below 2^48; different seeds (one per node
 * start) make ids of different nodes unlikely to meet in a shared log.
 */
void ms_client_error_id(uint64_t seed, uint64_t n,
                        char out[MS_CLIENT_ID_LEN + 1]);

/*
 * A budget of log lines: `burst` lines at once, refilled at `per_s` a
 * second. Zero-initialise, then set burst and per_s.
 */
struct ms_log_budget {
    uint32_t burst, per_s;
    double tokens;
    uint64_t last_ms;
    int started;
    uint64_t skipped;           /* lines refused since the last taken */
};

/*
 * Takes one line from the budget at time now_ms (any monotonic clock).
 * Returns 1 when the line may be written; then *skipped (if not NULL) is
 * the number of lines refused since the last one taken, and the count
 * starts again. Returns 0 when the budget is spent (the line is counted
 * as skipped).
 */
int ms_log_budget_take(struct ms_log_budget *b, uint64_t now_ms,
                       uint64_t *skipped);

#endif
