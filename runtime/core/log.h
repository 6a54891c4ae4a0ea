/*
 * log.h -- structured log lines, one event per line:
 *
 *   2026-11-29T16:50:50.123Z INFO node=n1 type=Counter shard=3 id=a msg="..."
 *
 * The grammar (what a reader may rely on):
 *
 *   line   = timestamp SP level SP field *(SP field) LF
 *   level  = "DEBUG" / "INFO" / "WARN" / "ERROR"
 *   field  = key "=" value             ; node= first, msg= last
 *   key    = 1*( ALPHA / DIGIT / "_" )
 *   value  = bare / quoted
 *   bare   = 1*( %x21-7E except DQUOTE, "\" and "=" )
 *   quoted = DQUOTE *( char / escape ) DQUOTE
 *   escape = "\\" / "\" DQUOTE / "\n" / "\r" / "\t" / "\x" 2HEXDIG
 *
 * A quoted value holds printable ASCII and valid UTF-8 as is; control
 * characters, bytes that are not valid UTF-8, and the code points that
 * move text around on a terminal (C1 controls, U+2028/U+2029, bidi
 * controls) are written as escapes, one \xNN per byte. So no value, however
 * it was made, can end a line, open a field or close a quote: a line is
 * forged only by whoever writes the format.
 *
 * Field values are escaped by the builder below (ms_log_field): callers pass
 * keys and raw values, never preformatted "k=v" text. msg= is escaped by
 * ms_log itself. Values longer than MS_LOG_VALUE_MAX bytes, and messages
 * longer than MS_LOG_TEXT_MAX bytes, are cut; the quoted text then ends
 * with "..." before the closing quote.
 *
 * Where lines go and what time they carry is the host's business: the
 * core does no I/O and reads no clock. The host installs a sink (the I/O
 * layer's writes each line to stderr with one write(2):
 * runtime/io/logsink.h) and a clock; until it does, lines are formatted
 * and dropped, and their time is the epoch. C tests install their own.
 *
 * Thread safety: ms_log, ms_log_text and the builders may be called from
 * any thread once ms_log_setup, ms_log_set_sink and ms_log_set_clock have
 * run; the sink and the clock are then called from those threads too, one
 * whole line per sink call.
 */
#ifndef MS_CORE_LOG_H
#define MS_CORE_LOG_H

#include <stddef.h>
#include <stdint.h>

enum { MS_LOG_DEBUG, MS_LOG_INFO, MS_LOG_WARN, MS_LOG_ERROR };

#define MS_LOG_VALUE_MAX 128  /* bytes of one field value that are logged */
#define MS_LOG_TEXT_MAX 4096  /* bytes of one message that are logged */

/* Sets the node name printed on every line (copied, escaped like a field
 * value) and the lowest level printed. Call before any other thread
 * logs. */
void ms_log_setup(const char *node, int min_level);

/* Receives one whole line (`len` bytes at `line`, ending in '\n', not
 * NUL-terminated; borrowed for the call). Called from any thread that
 * logs: it must be safe for that, and should write the line at once so
 * that lines of two threads do not mix. */
typedef void (*ms_log_sink_fn)(void *data, const char *line, size_t len);

/* Returns the wall clock in milliseconds since the Unix epoch (UTC). */
typedef int64_t (*ms_log_clock_fn)(void *data);

/* Installs the sink of every line (NULL: lines are dropped); `data` is
 * passed back to it. Call before any other thread logs. */
void ms_log_set_sink(ms_log_sink_fn fn, void *data);

/* Installs the clock of the timestamps (NULL: the epoch); `data` is passed
 * back to it. Call before any other thread logs. */
void ms_log_set_clock(ms_log_clock_fn fn, void *data);

/*
 * 1: every line from now on is one JSON object instead (log_format =
 * "json", for log shippers):
 *
 *   {"time":"2026-11-29T16:50:50.123Z","level":"WARN","node":"n1",
 *    "type":"Counter","shard":"3","id":"a","msg":"..."}
 *
 * on one line: time, level, node, then the fields in their order, then
 * msg; every value is a JSON string (a field's type never depends on its
 * value). Values hold the same bytes as in a text line: JSON escapes for
 * '"', '\\' and control bytes, and the four characters \xNN for a byte
 * that is not valid or harmless UTF-8 (see the grammar above). A field
 * named time, level, node or msg is written as _time, ... ; fields text
 * that does not follow the grammar is one "fields" string. The same cuts
 * as in text lines apply. 0: text lines (the default). Call before any
 * other thread logs.
 */
void ms_log_set_json(int on);

/* 1 when lines are JSON objects (ms_log_set_json), else 0: a host that
 * writes its own lines on stderr writes them through ms_log then. */
int ms_log_is_json(void);

/* Parses "debug"|"info"|"warn"|"error"; returns -1 when unknown. */
int ms_log_level(const char *name);

/*
 * Appends the field `key=value` to the fields text in `buf` (capacity
 * `cap`, current length `at`, NUL-terminated), preceded by a space unless
 * at == 0, and returns the new length (the text stays NUL-terminated).
 * `value` holds `len` raw bytes (any bytes, NUL included; NULL means "").
 * A value made only of bare characters (see the grammar) is written as
 * is; any other is quoted and escaped. `key` should match the grammar;
 * other characters in it are written as '_'. When the field does not fit
 * whole, the value is cut (on a character boundary, marked "..."); when
 * not even `key=""` fits, nothing is written and `at` is returned.
 */
size_t ms_log_field(char *buf, size_t cap, size_t at, const char *key,
                    const char *value, size_t len);

/* ms_log_field for a NUL-terminated string (NULL means ""). */
size_t ms_log_field_s(char *buf, size_t cap, size_t at, const char *key,
                      const char *value);

/* ms_log_field for an unsigned integer, written in decimal. */
size_t ms_log_field_u(char *buf, size_t cap, size_t at, const char *key,
                      unsigned long long value);

/* 1 when a count of repeated events has reached 1, 2, 4, 8, ...: an event
 * that a peer or a client can repeat at will is logged only then (with
 * the count), so it can make the node count but not write a line each. */
static inline int ms_log_due(unsigned long long n)
{
    return n && !(n & (n - 1));
}

/*
 * Logs one line. `fields` is NULL or text built with ms_log_field*; text
 * made otherwise that does not follow the grammar is written whole as one
 * quoted value, fields="...". The formatted message is escaped and
 * written as msg="...".
 */
void ms_log(int level, const char *fields, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Logs one line whose message is `len` raw bytes (any bytes; cut at
 * MS_LOG_TEXT_MAX). `fields` as for ms_log. */
void ms_log_text(int level, const char *fields, const char *text,
                 size_t len);

#endif
