/*
 * log.c -- one line per event, key=value; every value escaped here (see
 * the grammar in log.h). The line goes to the sink and its time comes
 * from the clock that the host installed: no I/O and no clock here.
 */
#include "log.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static char node_field[8 + 4 * 64 + 8] = "node=-";
static char node_raw[65] = "-";  /* the node name, for JSON lines */
static int json_lines;           /* ms_log_set_json */
static int min_level = MS_LOG_INFO;
static const char *names[] = {"DEBUG", "INFO", "WARN", "ERROR"};
static const char hex[] = "0123456789abcdef";
static ms_log_sink_fn sink;
static void *sink_data;
static ms_log_clock_fn clock_fn;
static void *clock_data;

void ms_log_set_sink(ms_log_sink_fn fn, void *data)
{
    sink = fn;
    sink_data = data;
}

void ms_log_set_clock(ms_log_clock_fn fn, void *data)
{
    clock_fn = fn;
    clock_data = data;
}

/* Whether byte c may appear in a bare (unquoted) value. */
static int is_bare(unsigned char c)
{
    return c > 0x20 && c < 0x7f && c != '"' && c != '\\' && c != '=';
}

/* The length of the UTF-8 sequence at s (n bytes available) when it is
 * valid and harmless to print, else 0: invalid or overlong sequences,
 * surrogates, C1 controls, the line and paragraph separators and the bidi
 * controls (which make a terminal show text in another order) get 0. */
static size_t utf8_printable(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len;
    uint32_t cp, min;
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2, cp = c & 0x1f, min = 0x80;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3, cp = c & 0x0f, min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4, cp = c & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    if (cp <= 0x9f || cp == 0x200e || cp == 0x200f ||
        (cp >= 0x2028 && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069))
        return 0;
    return len;
}

/*
 * Writes v[0..len) escaped for the inside of a quoted value into out
 * (capacity cap; no NUL), stopping before a character whose escape would
 * not fit. Returns the bytes written and sets *used to the input bytes
 * consumed.
 */
static size_t escape(char *out, size_t cap, const char *v, size_t len,
                     size_t *used)
{
    const unsigned char *s = (const unsigned char *)v;
    size_t o = 0, i = 0;
    while (i < len) {
        unsigned char c = s[i];
        char e[4];
        size_t elen = 0, take = 1;
        const char *src = (const char *)s + i;
        if (c >= 0x20 && c < 0x7f) {
            if (c == '"' || c == '\\') {
                e[0] = '\\', e[1] = (char)c, elen = 2, src = e;
            } else {
                elen = 1;
            }
        } else if (c == '\n' || c == '\r' || c == '\t') {
            e[0] = '\\', e[1] = c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
            elen = 2, src = e;
        } else if (c >= 0x80 && (take = utf8_printable(s + i, len - i))) {
            elen = take;
        } else {
            take = 1;
            e[0] = '\\', e[1] = 'x', e[2] = hex[c >> 4], e[3] = hex[c & 15];
            elen = 4, src = e;
        }
        if (o + elen > cap)
            break;
        memcpy(out + o, src, elen);
        o += elen;
        i += take;
    }
    *used = i;
    return o;
}

/* Writes `"v..."` (quoted, escaped) into out (capacity cap) and returns
 * its length, or 0 when not even `""` fits. When `cut` is set (the caller
 * cut v short) or v does not fit, whole characters are dropped from the
 * end and "..." marks the cut. */
static size_t quoted(char *out, size_t cap, const char *v, size_t len,
                     int cut)
{
    if (cap < 2)
        return 0;
    size_t used, o = 1;
    out[0] = '"';
    if (!cut) {
        o += escape(out + 1, cap - 2, v, len, &used);
        cut = used < len;
    }
    if (cut) {
        /* again, leaving room for the mark (rare: no need to be clever) */
        o = 1 + escape(out + 1, cap >= 5 ? cap - 5 : 0, v, len, &used);
        if (cap >= 5) {
            memcpy(out + o, "...", 3);
            o += 3;
        }
    }
    out[o++] = '"';
    return o;
}

size_t ms_log_field(char *buf, size_t cap, size_t at, const char *key,
                    const char *value, size_t len)
{
    if (!buf || at >= cap)
        return at;
    if (!value)
        value = "", len = 0;
    size_t klen = key ? strlen(key) : 0;
    /* separator, key, '=', at least `""`, NUL */
    if (at + (at > 0) + klen + 1 + 2 + 1 > cap) {
        buf[at] = 0;
        return at;
    }
    size_t o = at;
    if (at > 0)
        buf[o++] = ' ';
    for (size_t i = 0; i < klen; i++) {
        char c = key[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                 (c >= '0' && c <= '9') || c == '_';
        buf[o++] = ok ? c : '_';
    }
    buf[o++] = '=';
    size_t room = cap - o - 1; /* keep the NUL */
    int bare = len > 0 && len <= MS_LOG_VALUE_MAX && len <= room;
    for (size_t i = 0; bare && i < len; i++)
        bare = is_bare((unsigned char)value[i]);
    if (bare) {
        memcpy(buf + o, value, len);
        o += len;
    } else {
        int cut = len > MS_LOG_VALUE_MAX;
        o += quoted(buf + o, room, value, cut ? MS_LOG_VALUE_MAX : len, cut);
    }
    buf[o] = 0;
    return o;
}

size_t ms_log_field_s(char *buf, size_t cap, size_t at, const char *key,
                      const char *value)
{
    return ms_log_field(buf, cap, at, key, value, value ? strlen(value) : 0);
}

size_t ms_log_field_u(char *buf, size_t cap, size_t at, const char *key,
                      unsigned long long value)
{
    char num[24];
    int n = snprintf(num, sizeof num, "%llu", value);
    return ms_log_field(buf, cap, at, key, num, (size_t)n);
}

void ms_log_setup(const char *node, int level)
{
    const char *name = node && *node ? node : "-";
    ms_log_field_s(node_field, sizeof node_field, 0, "node", name);
    snprintf(node_raw, sizeof node_raw, "%s", name);
    min_level = level;
}

void ms_log_set_json(int on)
{
    json_lines = on != 0;
}

int ms_log_is_json(void)
{
    return json_lines;
}

int ms_log_level(const char *name)
{
    static const char *lower[] = {"debug", "info", "warn", "error"};
    for (int i = 0; i < 4; i++)
        if (strcmp(name, lower[i]) == 0)
            return i;
    return -1;
}

#define FIELDS_OUT_MAX 2048 /* bytes of escaped fields text per line */

/* Whether `f` follows the grammar of fields (log.h): what ms_log_field
 * makes. Text made otherwise is logged as one quoted fields="..." value. */
static int well_formed(const char *f)
{
    const unsigned char *p = (const unsigned char *)f;
    for (;;) {
        const unsigned char *k = p;
        while ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
               (*p >= '0' && *p <= '9') || *p == '_')
            p++;
        if (p == k || *p++ != '=')
            return 0;
        if (*p != '"') {
            const unsigned char *v = p;
            while (is_bare(*p))
                p++;
            if (p == v)
                return 0;
        } else {
            for (p++; *p != '"'; ) {
                size_t u;
                if (*p == '\\') {
                    p++;
                    if (*p == 'x') {
                        static const char hexd[] = "0123456789abcdef";
                        if (!p[1] || !p[2] || !strchr(hexd, p[1]) ||
                            !strchr(hexd, p[2]))
                            return 0;
                        p += 3;
                    } else if (*p && strchr("\\\"nrt", *p)) {
                        p++;
                    } else {
                        return 0;
                    }
                } else if (*p >= 0x20 && *p < 0x7f) {
                    p++;
                } else if (*p >= 0x80 &&
                           (u = utf8_printable(p, strlen((const char *)p)))) {
                    p += u;
                } else {
                    return 0; /* a control byte, bad UTF-8, or the end */
                }
            }
            p++;
        }
        if (*p == 0)
            return 1;
        if (*p++ != ' ')
            return 0;
    }
}

/* --- JSON lines (ms_log_set_json) --- */

/*
 * Writes v[0..len) as the inside of a JSON string into out (capacity cap;
 * no NUL), stopping before a character whose escape would not fit, and
 * returns the bytes written. The same bytes are shown as in a text line:
 * printable ASCII and harmless UTF-8 as is (JSON's own escapes for '"',
 * '\\', LF, CR and tab), other control bytes as \u00NN, and a byte that is
 * not valid or harmless UTF-8 (see utf8_printable) as the four characters
 * \xNN (a JSON text must be UTF-8, and \u00NN would name another
 * character).
 */
static size_t json_escape(char *out, size_t cap, const char *v, size_t len,
                          size_t *used)
{
    const unsigned char *s = (const unsigned char *)v;
    size_t o = 0, i = 0;
    while (i < len) {
        unsigned char c = s[i];
        char e[8];
        size_t elen = 0, take = 1;
        const char *src = e;
        if (c >= 0x20 && c < 0x7f) {
            if (c == '"' || c == '\\')
                e[0] = '\\', e[1] = (char)c, elen = 2;
            else
                src = (const char *)s + i, elen = 1;
        } else if (c == '\n' || c == '\r' || c == '\t') {
            e[0] = '\\', e[1] = c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
            elen = 2;
        } else if (c < 0x20 || c == 0x7f) {
            memcpy(e, "\\u00", 4);
            e[4] = hex[c >> 4], e[5] = hex[c & 15], elen = 6;
        } else if ((take = utf8_printable(s + i, len - i))) {
            src = (const char *)s + i, elen = take;
        } else {
            take = 1;
            memcpy(e, "\\\\x", 3);
            e[3] = hex[c >> 4], e[4] = hex[c & 15], elen = 5;
        }
        if (o + elen > cap)
            break;
        memcpy(out + o, src, elen);
        o += elen;
        i += take;
    }
    *used = i;
    return o;
}

/* Appends `"v"` (v[0..len) JSON-escaped, "..." before the closing quote
 * when `cut`) at out + o, capacity cap; returns the new length. The
 * caller sizes `out` for the worst case (6 bytes per input byte). */
static size_t json_string(char *out, size_t cap, size_t o, const char *v,
                          size_t len, int cut)
{
    size_t used;
    out[o++] = '"';
    o += json_escape(out + o, cap - o - 5, v, len, &used);
    if (cut || used < len) { /* cut for room: marked as in text lines */
        memcpy(out + o, "...", 3);
        o += 3;
    }
    out[o++] = '"';
    return o;
}

/* Reverses a quoted value's escapes (log.h's grammar): q points after the
 * opening quote of a well-formed value. Writes the raw bytes into raw
 * (capacity cap), sets *len, and returns the pointer after the closing
 * quote. */
static const char *unquote(const char *q, char *raw, size_t cap, size_t *len)
{
    size_t o = 0;
    while (*q != '"') {
        char c = *q++;
        if (c == '\\') {
            char k = *q++;
            if (k == 'x') {
                int hi = (int)(strchr(hex, q[0]) - hex);
                int lo = (int)(strchr(hex, q[1]) - hex);
                c = (char)(hi << 4 | lo);
                q += 2;
            } else {
                c = k == 'n' ? '\n' : k == 'r' ? '\r' : k == 't' ? '\t' : k;
            }
        }
        if (o < cap)
            raw[o++] = c;
    }
    *len = o;
    return q + 1;
}

/* Writes the fields text `f` (well-formed, log.h) as JSON members
 * `,"key":"value"` at out + o; returns the new length. A key that is one
 * of the line's own (time, level, node, msg) gets a leading '_', so no
 * member is written twice. */
static size_t json_fields(char *out, size_t cap, size_t o, const char *f)
{
    static const char *const own[] = {"time", "level", "node", "msg"};
    char raw[FIELDS_OUT_MAX];
    while (*f) {
        const char *k = f;
        while (*f != '=')
            f++;
        size_t klen = (size_t)(f - k), vlen;
        const char *v = ++f;
        if (*f == '"') {
            f = unquote(f + 1, raw, sizeof raw, &vlen);
            v = raw;
        } else {
            while (*f && *f != ' ')
                f++;
            vlen = (size_t)(f - v);
        }
        if (*f == ' ')
            f++;
        int clash = 0;
        for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
            clash |= strlen(own[i]) == klen && memcmp(own[i], k, klen) == 0;
        out[o++] = ',';
        out[o++] = '"';
        if (clash)
            out[o++] = '_';
        memcpy(out + o, k, klen); /* keys are [A-Za-z0-9_] */
        o += klen;
        out[o++] = '"';
        out[o++] = ':';
        o = json_string(out, cap, o, v, vlen, 0);
    }
    return o;
}

/* emit() for JSON lines: one object, members time, level, node, the
 * fields in their order, msg; every value a string. */
static void emit_json(int level, const char *time, const char *fields,
                      const char *text, size_t len, int cut)
{
    enum { HEAD = 96 + 6 * 64, FIELDS = 3 * FIELDS_OUT_MAX + 6 * 64,
           MSG = 16 + 6 * MS_LOG_TEXT_MAX };
    char line[HEAD + FIELDS + MSG + 2];
    size_t o = (size_t)snprintf(line, HEAD, "{\"time\":\"%s\",\"level\":"
                                "\"%s\",\"node\":", time, names[level]);
    o = json_string(line, HEAD, o, node_raw, strlen(node_raw), 0);
    if (fields && *fields) {
        size_t flen = strlen(fields);
        if (flen <= FIELDS_OUT_MAX && well_formed(fields)) {
            o = json_fields(line, HEAD + FIELDS, o, fields);
        } else {
            int fcut = flen > MS_LOG_TEXT_MAX;
            memcpy(line + o, ",\"fields\":", 10);
            o = json_string(line, HEAD + FIELDS, o + 10, fields,
                            fcut ? MS_LOG_TEXT_MAX : flen, fcut);
        }
    }
    memcpy(line + o, ",\"msg\":", 7);
    o = json_string(line, sizeof line - 2, o + 7, text, len, cut);
    line[o++] = '}';
    line[o++] = '\n';
    if (sink)
        sink(sink_data, line, o);
}

/* Formats and writes one line; `text` is `len` raw bytes, already cut
 * (`cut` set) when it was longer. */
static void emit(int level, const char *fields, const char *text, size_t len,
                 int cut)
{
    if (level < MS_LOG_DEBUG || level > MS_LOG_ERROR)
        level = MS_LOG_ERROR;
    /* timestamp and level, node, fields, msg and its quotes and mark */
    enum { HEAD = 40, MSG = 6 + 4 * MS_LOG_TEXT_MAX + 5 };
    char line[HEAD + sizeof node_field + 8 + FIELDS_OUT_MAX + MSG + 1];
    int64_t ms = clock_fn ? clock_fn(clock_data) : 0;
    if (ms < 0)
        ms = 0;
    time_t sec = (time_t)(ms / 1000);
    struct tm tm;
    size_t o = 0;
    if (gmtime_r(&sec, &tm))
        o = strftime(line, 32, "%Y-%m-%dT%H:%M:%S", &tm);
    if (o == 0) /* a year strftime cannot write in 31 bytes */
        o = (size_t)snprintf(line, 32, "1970-01-01T00:00:00");
    if (json_lines) {
        snprintf(line + o, 8, ".%03dZ", (int)(ms % 1000));
        emit_json(level, line, fields, text, len, cut);
        return;
    }
    int n = snprintf(line + o, HEAD - o, ".%03dZ %s ", (int)(ms % 1000),
                     names[level]);
    if (n > 0)
        o += (size_t)n < HEAD - o ? (size_t)n : HEAD - o - 1;
    size_t nl = strlen(node_field);
    memcpy(line + o, node_field, nl);
    o += nl;
    if (fields && *fields) {
        size_t flen = strlen(fields);
        line[o++] = ' ';
        if (flen <= FIELDS_OUT_MAX && well_formed(fields)) {
            memcpy(line + o, fields, flen);
            o += flen;
        } else {
            memcpy(line + o, "fields=", 7);
            o += 7;
            o += quoted(line + o, FIELDS_OUT_MAX, fields,
                        flen > MS_LOG_TEXT_MAX ? MS_LOG_TEXT_MAX : flen,
                        flen > MS_LOG_TEXT_MAX);
        }
    }
    memcpy(line + o, " msg=", 5);
    o += 5;
    o += quoted(line + o, MSG - 5, text, len, cut);
    line[o++] = '\n';
    if (sink)
        sink(sink_data, line, o);
}

void ms_log(int level, const char *fields, const char *fmt, ...)
{
    if (level < min_level)
        return;
    char msg[MS_LOG_TEXT_MAX + 1];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    size_t len = (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1;
    emit(level, fields, msg, len, (size_t)n > len);
}

void ms_log_text(int level, const char *fields, const char *text,
                 size_t len)
{
    if (level < min_level)
        return;
    if (!text)
        text = "", len = 0;
    int cut = len > MS_LOG_TEXT_MAX;
    emit(level, fields, text, cut ? MS_LOG_TEXT_MAX : len, cut);
}
