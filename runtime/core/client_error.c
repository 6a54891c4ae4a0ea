/*
 * client_error.c -- the message, id and log budget of errors answered to
 * clients (see client_error.h).
 */
#include "client_error.h"

#include <stdio.h>
#include <string.h>

/* ---- the message ----------------------------------------------------- */

static int blank(unsigned char ch)
{
    return ch == ' ' || ch < 0x20 || ch == 0x7f;
}

static int contains(const char *s, size_t n, const char *lit)
{
    size_t k = strlen(lit);
    for (size_t i = 0; i + k <= n; i++)
        if (memcmp(s + i, lit, k) == 0)
            return 1;
    return 0;
}

/*
 * Length of the Lua source position that starts s[0..n), blanks after it
 * included ("/srv/x.lua:12: ", "[string \"...\"]:3: "), or 0. The chunk
 * must look like a source (a '/', '\\' or '.' in it) so that ordinary
 * words followed by numbers ("retry:3:") are left alone.
 */
static size_t position_len(const char *s, size_t n)
{
    size_t i = 0;
    int source = 0;
    if (n >= 9 && memcmp(s, "[string \"", 9) == 0) {
        for (i = 9; i + 2 < n && memcmp(s + i, "\"]:", 3) != 0; i++)
            ;
        if (i + 2 >= n)
            return 0;
        i += 2;
        source = 1;
    } else {
        for (; i < n && !blank((unsigned char)s[i]) && s[i] != ':'; i++)
            if (s[i] == '/' || s[i] == '\\' || s[i] == '.')
                source = 1;
    }
    if (!source || i == 0 || i >= n || s[i] != ':')
        return 0;
    size_t j = i + 1, digits = j;
    while (j < n && s[j] >= '0' && s[j] <= '9')
        j++;
    if (j == digits || j >= n || s[j] != ':')
        return 0;
    for (j++; j < n && blank((unsigned char)s[j]); j++)
        ;
    return j;
}

/* A word that shows the server's files or module search lists. */
static int pathlike(const char *w, size_t n)
{
    return memchr(w, '/', n) != NULL || memchr(w, '\\', n) != NULL ||
           contains(w, n, ".lua") || contains(w, n, "package.");
}

static int hexdigit(int ch)
{
    return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f') ||
           (ch >= 'A' && ch <= 'F');
}

/* The text being built, longer than a message may be so that a cut is
 * seen. */
struct text {
    char b[2 * MS_CLIENT_MSG_MAX];
    size_t n;
    int cut;
};

static void put(struct text *t, const char *s, size_t n)
{
    if (n > sizeof t->b - t->n) {
        n = sizeof t->b - t->n;
        t->cut = 1;
    }
    memcpy(t->b + t->n, s, n);
    t->n += n;
}

/* Appends word w, its 0x numbers replaced. */
static void put_word(struct text *t, const char *w, size_t n)
{
    size_t i = 0;
    while (i < n) {
        if (w[i] == '0' && i + 2 < n && (w[i + 1] == 'x' || w[i + 1] == 'X')
            && hexdigit((unsigned char)w[i + 2])) {
            put(t, "<address>", 9);
            for (i += 2; i < n && hexdigit((unsigned char)w[i]); i++)
                ;
            continue;
        }
        put(t, w + i, 1);
        i++;
    }
}

/* 1 when s[0..n) is only the name of a Lua value, as tostring() gives
 * it for an error value that is no string: "table: <address>". */
static int lua_value_name(const char *s, size_t n)
{
    static const char *const kinds[] = {"table", "function", "userdata",
                                        "thread", "proto", "trace"};
    static const char tail[] = ": <address>";
    size_t tl = sizeof tail - 1;
    if (n <= tl || memcmp(s + n - tl, tail, tl) != 0)
        return 0;
    n -= tl;
    if (n > 7 && memcmp(s, "cdata<", 6) == 0 && s[n - 1] == '>')
        return 1;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (strlen(kinds[i]) == n && memcmp(s, kinds[i], n) == 0)
            return 1;
    return 0;
}

size_t ms_client_error_text(char *out, size_t cap, const char *detail,
                            size_t len)
{
    struct text t;
    size_t i = 0, n = 0, p;
    int last_path = 0;

    t.n = 0;
    t.cut = 0;
    if (cap == 0)
        return 0;
    out[0] = 0;
    if (detail == NULL)
        return 0;
    while (n < len && detail[n] != '\n' && detail[n] != '\r')
        n++;
    for (;;) { /* "a.lua:3: b.lua:9: boom": positions nest */
        while (i < n && blank((unsigned char)detail[i]))
            i++;
        p = position_len(detail + i, n - i);
        if (p == 0)
            break;
        i += p;
    }
    while (i < n && !t.cut) {
        size_t w = i;
        while (i < n && !blank((unsigned char)detail[i]))
            i++;
        if (pathlike(detail + w, i - w)) {
            if (!last_path) {
                if (t.n)
                    put(&t, " ", 1);
                put(&t, "<path>", 6);
            }
            last_path = 1;
        } else {
            if (t.n)
                put(&t, " ", 1);
            put_word(&t, detail + w, i - w);
            last_path = 0;
        }
        while (i < n && blank((unsigned char)detail[i]))
            i++;
    }
    if (i < n)
        t.cut = 1;
    while (t.n && (t.b[t.n - 1] == ' ' || t.b[t.n - 1] == ':'))
        t.n--; /* "module 'x' not found:" */
    if (t.n == 0 || lua_value_name(t.b, t.n))
        return 0;
    if (t.cut || t.n > MS_CLIENT_MSG_MAX) {
        size_t k = t.n < MS_CLIENT_MSG_MAX - 3 ? t.n : MS_CLIENT_MSG_MAX - 3;
        while (k > 0 && k < t.n && ((unsigned char)t.b[k] & 0xC0) == 0x80)
            k--; /* t.b[k] starts a character: cut before it */
        memcpy(t.b + k, "...", 3);
        t.n = k + 3;
    }
    if (t.n > cap - 1) {
        t.n = cap - 1;
        while (t.n > 0 && ((unsigned char)t.b[t.n] & 0xC0) == 0x80)
            t.n--;
    }
    memcpy(out, t.b, t.n);
    out[t.n] = 0;
    return t.n;
}

/* ---- the node's error payload ------------------------------------------ */

static const char *skip_ws(const char *p, const char *e)
{
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

static int hex4(const char *p, unsigned *v)
{
    *v = 0;
    for (int i = 0; i < 4; i++) {
        int ch = (unsigned char)p[i], d;
        if (ch >= '0' && ch <= '9')
            d = ch - '0';
        else if (ch >= 'a' && ch <= 'f')
            d = ch - 'a' + 10;
        else if (ch >= 'A' && ch <= 'F')
            d = ch - 'A' + 10;
        else
            return -1;
        *v = *v * 16 + (unsigned)d;
    }
    return 0;
}

/* Appends code point cp as UTF-8 to out[*n..cap-1) if it fits whole. */
static void put_cp(char *out, size_t cap, size_t *n, unsigned cp)
{
    char u[4];
    size_t k;
    if (cp < 0x80) {
        u[0] = (char)cp;
        k = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xC0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3F));
        k = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F));
        k = 3;
    } else {
        u[0] = (char)(0xF0 | (cp >> 18));
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[3] = (char)(0x80 | (cp & 0x3F));
        k = 4;
    }
    if (out != NULL && *n + k < cap) {
        memcpy(out + *n, u, k);
        *n += k;
    }
}

/* Reads the JSON string at p into out[0..cap) (NULL: skipped), unescaped
 * and NUL-terminated. Returns the byte after its closing quote, or NULL
 * when it is not a string. */
static const char *read_string(const char *p, const char *e, char *out,
                               size_t cap)
{
    size_t n = 0;
    if (p >= e || *p != '"')
        return NULL;
    for (p++; p < e && *p != '"';) {
        unsigned cp, lo;
        if ((unsigned char)*p < 0x20)
            return NULL;
        if (*p != '\\') {
            if (out != NULL && n + 1 < cap)
                out[n++] = *p;
            p++;
            continue;
        }
        if (++p >= e)
            return NULL;
        switch (*p++) {
        case '"': cp = '"'; break;
        case '\\': cp = '\\'; break;
        case '/': cp = '/'; break;
        case 'b': cp = '\b'; break;
        case 'f': cp = '\f'; break;
        case 'n': cp = '\n'; break;
        case 'r': cp = '\r'; break;
        case 't': cp = '\t'; break;
        case 'u':
            if (e - p < 4 || hex4(p, &cp) != 0)
                return NULL;
            p += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && e - p >= 6 && p[0] == '\\' &&
                p[1] == 'u' && hex4(p + 2, &lo) == 0 && lo >= 0xDC00 &&
                lo < 0xE000) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                p += 6;
            }
            if ((cp >= 0xD800 && cp < 0xE000) || cp == 0)
                cp = 0xFFFD;
            break;
        default:
            return NULL;
        }
        put_cp(out, cap, &n, cp);
    }
    if (p >= e)
        return NULL;
    if (out != NULL && cap > 0)
        out[n] = 0;
    return p + 1;
}

int ms_client_error_parse(const char *json, size_t len, char *code,
                          size_t codecap, char *message, size_t msgcap)
{
    const char *p = json, *e = json + len;
    int have_code = 0;
    if (codecap)
        code[0] = 0;
    if (msgcap)
        message[0] = 0;
    if (json == NULL)
        return -1;
    p = skip_ws(p, e);
    if (p >= e || *p != '{')
        goto bad;
    p = skip_ws(p + 1, e);
    for (;;) {
        char key[16];
        char *dst = NULL;
        size_t cap = 0;
        p = read_string(p, e, key, sizeof key);
        if (p == NULL)
            goto bad;
        p = skip_ws(p, e);
        if (p >= e || *p != ':')
            goto bad;
        p = skip_ws(p + 1, e);
        if (strcmp(key, "code") == 0) {
            dst = code;
            cap = codecap;
            have_code = 1;
        } else if (strcmp(key, "message") == 0) {
            dst = message;
            cap = msgcap;
        }
        p = read_string(p, e, dst, cap);
        if (p == NULL)
            goto bad;
        p = skip_ws(p, e);
        if (p < e && *p == ',') {
            p = skip_ws(p + 1, e);
            continue;
        }
        if (p < e && *p == '}')
            break;
        goto bad;
    }
    if (skip_ws(p + 1, e) != e || !have_code)
        goto bad;
    return 0;
bad:
    if (codecap)
        code[0] = 0;
    if (msgcap)
        message[0] = 0;
    return -1;
}

/* ---- ids and the log budget -------------------------------------------- */

#define M48 ((UINT64_C(1) << 48) - 1)

void ms_client_error_id(uint64_t seed, uint64_t n,
                        char out[MS_CLIENT_ID_LEN + 1])
{
    /* a bijection of 48-bit numbers (xor-shifts and odd multipliers), so
     * consecutive errors get unrelated-looking, distinct ids */
    uint64_t z = (seed + n) & M48;
    z ^= z >> 23;
    z = (z * UINT64_C(0xBF58476D1CE5)) & M48;
    z ^= z >> 21;
    z = (z * UINT64_C(0x94D049BB1331)) & M48;
    z ^= z >> 24;
    snprintf(out, MS_CLIENT_ID_LEN + 1, "e-%012llx", (unsigned long long)z);
}

int ms_log_budget_take(struct ms_log_budget *b, uint64_t now_ms,
                       uint64_t *skipped)
{
    if (!b->started) {
        b->started = 1;
        b->tokens = b->burst;
        b->last_ms = now_ms;
    }
    if (now_ms > b->last_ms) {
        b->tokens += (double)(now_ms - b->last_ms) * b->per_s / 1000.0;
        if (b->tokens > b->burst)
            b->tokens = b->burst;
        b->last_ms = now_ms;
    }
    if (b->tokens < 1.0) {
        b->skipped++;
        return 0;
    }
    b->tokens -= 1.0;
    if (skipped != NULL)
        *skipped = b->skipped;
    b->skipped = 0;
    return 1;
}
