/*
 * persist_leaf.c -- the leaf functions of persistent entities (issue 11),
 * in moonshard.core. Each opens a wait for the entity whose handler runs
 * now, like an ask (ms_dispatch_ask_open: its handler coroutine yields
 * and is resumed when the wait ends), and hands the request to the node
 * through the hooks of ms_bridge_set_persist. They never call back into
 * Lua.
 *
 *   core.p_load(h)                          -> corr | nil, code, message
 *   core.p_append(h, first_seq, events, snapshot|nil, delete[, op, reply])
 *                                           -> corr | nil, code, message
 *   core.p_save(h, expected, state|nil[, op, reply])
 *                                           -> corr | nil, code, message
 *   core.p_record(h, op, reply|nil)         -> corr | nil, code, message
 *   core.p_find(h, op)                      -> corr | nil, code, message
 *     (the wait ends with "0": not committed, "1": a tell committed,
 *      "2" .. reply: an ask committed with that reply)
 *   core.p_fail(h, code, message)           ends the current ask with
 *                                           that error (a failed commit)
 *
 * An id, event, snapshot or state that PostgreSQL `text` cannot hold
 * (not UTF-8, or a NUL) is refused here, before any query: nil,
 * "invalid" and a message naming it (bad_text_at).
 *
 * The reply of a load (framing read by moonshard.host):
 *   "<last_seq> <revision> <has_snapshot> <nevents>\n", then the
 *   snapshot when has_snapshot, the state when revision > 0, and each
 *   event, each as "<length>\n<bytes>".
 */
#include "bridge_int.h"

#include <stdio.h>
#include <string.h>

#include <lauxlib.h>

/* The longest a load or write may take before the entity stops waiting
 * (the pool's own deadline is shorter: it answers first). */
#define PERSIST_WAIT_MS 30000

static struct ms_bridge *bridge_of(lua_State *L)
{
    return lua_touserdata(L, lua_upvalueindex(1));
}

static int push_err(lua_State *L, int err)
{
    lua_pushnil(L);
    lua_pushstring(L, ms_errname(err));
    lua_pushstring(L, ms_strerror(err));
    return 3;
}

/* The offset of the first byte of s[0..len) that PostgreSQL `text` (a
 * UTF-8 database) refuses: a NUL, or one that does not begin a complete,
 * shortest-form UTF-8 character of U+0001..U+10FFFF other than a
 * surrogate. -1 when there is none. */
static long bad_text_at(const char *s, size_t len)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        unsigned c = u[i];
        size_t n;
        unsigned lo = 0x80, hi = 0xBF; /* the second byte's range */
        if (c >= 0x01 && c <= 0x7F) {
            i++;
            continue;
        } else if (c >= 0xC2 && c <= 0xDF) {
            n = 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            n = 3;
            if (c == 0xE0)
                lo = 0xA0; /* overlong */
            else if (c == 0xED)
                hi = 0x9F; /* surrogates */
        } else if (c >= 0xF0 && c <= 0xF4) {
            n = 4;
            if (c == 0xF0)
                lo = 0x90; /* overlong */
            else if (c == 0xF4)
                hi = 0x8F; /* above U+10FFFF */
        } else {
            return (long)i; /* NUL, a continuation byte, C0, C1, F5.. */
        }
        if (len - i < n || u[i + 1] < lo || u[i + 1] > hi)
            return (long)i;
        for (size_t k = 2; k < n; k++)
            if (u[i + k] < 0x80 || u[i + k] > 0xBF)
                return (long)i;
        i += n;
    }
    return -1;
}

/* When s[0..len) (`what`: "the id", "event 3", ...) cannot be stored as
 * text: pushes nil, "invalid" and why (the leaf's failure, as a refused
 * request) and returns 3; else 0. */
static int refuse_text(lua_State *L, const char *what, const char *s,
                       size_t len)
{
    long at = bad_text_at(s, len);
    if (at < 0)
        return 0;
    char buf[200];
    snprintf(buf, sizeof buf, "%s is not valid UTF-8 (byte %ld is 0x%02x):"
             " PostgreSQL text holds UTF-8 without NUL only; nothing was"
             " written", what, at, ((const unsigned char *)s)[at]);
    lua_pushnil(L);
    lua_pushstring(L, ms_errname(MS_EINVAL));
    lua_pushstring(L, buf);
    return 3;
}

/* The entity whose handler runs now: argument 1 must be its handle. */
static uint32_t current(struct ms_bridge *b, lua_State *L, int *type,
                        const char **id, size_t *idlen, uint32_t *shard)
{
    uint32_t h = (uint32_t)luaL_checkinteger(L, 1);
    if (h == 0 || h != b->cur_h ||
        !ms_dispatch_entity(b->d, h, type, id, idlen, shard))
        luaL_error(L, "persistence is only possible inside the entity's "
                      "own handler");
    return h;
}

/* Opens the wait of entity h; 0 and *corr or a negative code. */
static int open_wait(struct ms_bridge *b, uint32_t h, int64_t *corr)
{
    if (!b->persist.data)
        return MS_EDBCONN;
    struct ms_waiter w = {NULL, NULL, h};
    int64_t c = ms_dispatch_ask_open(b->d, PERSIST_WAIT_MS,
                                     ms__bridge_now_ms(b), &w);
    if (c < 0)
        return (int)c;
    *corr = c;
    return 0;
}

/* The hook's verdict: a started request makes the handler wait for
 * `corr`; a refused one ends the wait at once and reports the code. */
static int started(struct ms_bridge *b, lua_State *L, int rc, int64_t corr)
{
    if (rc < 0) {
        char buf[256];
        size_t n = ms_error_json(buf, sizeof buf, rc, ms_strerror(rc));
        ms_dispatch_ask_complete(b->d, corr, rc, buf, n);
        return push_err(L, rc);
    }
    b->ask_corr = (uint64_t)corr;
    lua_pushnumber(L, (lua_Number)corr);
    return 1;
}

static int l_load(lua_State *L)
{
    struct ms_bridge *b = bridge_of(L);
    int type;
    const char *id;
    size_t idlen;
    uint32_t shard;
    uint32_t h = current(b, L, &type, &id, &idlen, &shard);
    if (refuse_text(L, "the id", id, idlen))
        return 3;
    int64_t corr = 0;
    int rc = open_wait(b, h, &corr);
    if (rc < 0)
        return push_err(L, rc);
    rc = b->persist.load(b->persist.data, type, shard, id, idlen, corr);
    return started(b, L, rc, corr);
}

/* The operation (op id at `arg`, its reply at arg + 1) into *op: 1, or
 * 0 when there is none. */
static int op_arg(lua_State *L, int arg, struct ms_bridge_op *op)
{
    if (lua_isnoneornil(L, arg))
        return 0;
    size_t n;
    op->id = luaL_checklstring(L, arg, &n);
    if (n == 0 || n > 128 || strlen(op->id) != n)
        luaL_error(L, "an operation id is 1 to 128 bytes, without NUL");
    op->reply = luaL_optlstring(L, arg + 1, NULL, &op->reply_len);
    return 1;
}

/* One persistence request of the running handler's entity. */
struct req {
    struct ms_bridge *b;
    uint32_t h;
    int type;
    const char *id;
    size_t idlen;
    uint32_t shard;
    struct ms_bridge_op op;
    int has_op;
    int64_t corr;
};

/* The entity of a write (its id refused when PostgreSQL text cannot hold
 * it) and the operation at `oparg` (0: none; its reply refused alike).
 * Returns 0, or the 3 values already pushed. */
static int write_req(lua_State *L, struct req *r, int oparg)
{
    r->b = bridge_of(L);
    r->h = current(r->b, L, &r->type, &r->id, &r->idlen, &r->shard);
    r->has_op = oparg ? op_arg(L, oparg, &r->op) : 0;
    if (refuse_text(L, "the id", r->id, r->idlen) ||
        (r->has_op && r->op.reply &&
         refuse_text(L, "the reply", r->op.reply, r->op.reply_len)))
        return 3;
    return 0;
}

/* Opens the entity's wait: 0, or the 3 values already pushed. */
static int req_wait(lua_State *L, struct req *r)
{
    int rc = open_wait(r->b, r->h, &r->corr);
    return rc < 0 ? push_err(L, rc) : 0;
}

#define MAX_APPEND 1000 /* events of one command (MS_JOURNAL_MAX_EVENTS) */

static int l_append(lua_State *L)
{
    lua_Number first = luaL_checknumber(L, 2);
    luaL_checktype(L, 3, LUA_TTABLE);
    size_t snaplen = 0;
    const char *snap = luaL_optlstring(L, 4, NULL, &snaplen);
    int del = lua_toboolean(L, 5);
    int n = (int)lua_objlen(L, 3);
    if (n < 1 || n > MAX_APPEND)
        return luaL_error(L, "a command may write 1 to %d events, not %d",
                          MAX_APPEND, n);
    if (!(first >= 1 && first < 9e15))
        return luaL_error(L, "bad event sequence");
    struct req r;
    if (write_req(L, &r, 6))
        return 3;
    const char *ev[MAX_APPEND];
    size_t lens[MAX_APPEND];
    for (int i = 0; i < n; i++) {
        lua_rawgeti(L, 3, i + 1);
        ev[i] = lua_tolstring(L, -1, &lens[i]);
        if (!ev[i])
            return luaL_error(L, "event %d is not encoded", i + 1);
        lua_pop(L, 1); /* still referenced by the table */
        char what[32];
        snprintf(what, sizeof what, "event %d", i + 1);
        if (refuse_text(L, what, ev[i], lens[i]))
            return 3;
    }
    if (snap && refuse_text(L, "the snapshot", snap, snaplen))
        return 3;
    if (req_wait(L, &r))
        return 3;
    int rc = r.b->persist.append(r.b->persist.data, r.type, r.shard, r.id,
                                 r.idlen, (int64_t)first, n, ev, lens, snap,
                                 snaplen, del, r.has_op ? &r.op : NULL,
                                 r.corr);
    return started(r.b, L, rc, r.corr);
}

static int l_save(lua_State *L)
{
    lua_Number expected = luaL_checknumber(L, 2);
    size_t len = 0;
    const char *state = luaL_optlstring(L, 3, NULL, &len);
    if (!(expected >= 0 && expected < 9e15))
        return luaL_error(L, "bad revision");
    struct req r;
    if (write_req(L, &r, 4) ||
        (state && refuse_text(L, "the state", state, len)) ||
        req_wait(L, &r))
        return 3;
    int rc = r.b->persist.save(r.b->persist.data, r.type, r.shard, r.id,
                               r.idlen, (int64_t)expected, state, len,
                               r.has_op ? &r.op : NULL, r.corr);
    return started(r.b, L, rc, r.corr);
}

/* core.p_record (find 0) and core.p_find (find 1): argument 2 is the
 * operation id (and, for p_record, 3 its reply). */
static int op_request(lua_State *L, int find)
{
    luaL_checkstring(L, 2);
    struct req r;
    if (write_req(L, &r, 2) || req_wait(L, &r))
        return 3;
    int rc = find ? r.b->persist.find(r.b->persist.data, r.type, r.shard,
                                      r.id, r.idlen, r.op.id, r.corr)
                  : r.b->persist.record(r.b->persist.data, r.type, r.shard,
                                        r.id, r.idlen, &r.op, r.corr);
    return started(r.b, L, rc, r.corr);
}

static int l_record(lua_State *L)
{
    return op_request(L, 0);
}

static int l_find(lua_State *L)
{
    return op_request(L, 1);
}

/* The code of an error name (MS_EHANDLER for one not in the table). */
static int code_of(const char *name)
{
#define X(code, value, ename, text)                                       \
    if (strcmp(name, ename) == 0)                                         \
        return code;
    MS_ERRORS(X)
#undef X
    return MS_EHANDLER;
}

static int l_fail(lua_State *L)
{
    struct ms_bridge *b = bridge_of(L);
    uint32_t h = (uint32_t)luaL_checkinteger(L, 1);
    const char *code = luaL_checkstring(L, 2);
    const char *msg = luaL_checkstring(L, 3);
    if (h != b->cur_h || h == 0)
        return luaL_error(L, "this ctx belongs to another entity's handler");
    ms_dispatch_reply_error(b->d, h, code_of(code), msg);
    return 0;
}

void ms__bridge_open_persist(lua_State *L, void *b)
{
    static const luaL_Reg fns[] = {
        {"p_load", l_load}, {"p_append", l_append},
        {"p_save", l_save}, {"p_fail", l_fail},
        {"p_record", l_record}, {"p_find", l_find},
        {NULL, NULL},
    };
    for (const luaL_Reg *f = fns; f->name; f++) {
        lua_pushlightuserdata(L, b);
        lua_pushcclosure(L, f->func, 1);
        lua_setfield(L, -2, f->name);
    }
    /* what one statement may carry: moonshard.host checks writes with it */
    lua_pushinteger(L, MS_PERSIST_TEXT_MAX);
    lua_setfield(L, -2, "PERSIST_TEXT_MAX");
}

void ms_bridge_set_persist(struct ms_bridge *b,
                           const struct ms_bridge_persist *p)
{
    if (p)
        b->persist = *p;
    else
        memset(&b->persist, 0, sizeof b->persist);
}
