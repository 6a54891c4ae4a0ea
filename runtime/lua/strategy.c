/*
 * strategy.c -- the Lua functions the core and the router consult: the
 * types' partitioners (ms_bridge_partition, for the dispatcher) and the
 * allocation strategies (allocate, eligible, rebalance, for the
 * coordinator), each run through the protected call.
 */
#include "bridge_int.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

int ms__bridge_part_alloc(struct ms_bridge *b, int n)
{
    for (int i = 0; i < b->npart; i++)
        luaL_unref(b->L, LUA_REGISTRYINDEX, b->part_ref[i]);
    free(b->part_ref);
    free(b->part_fails);
    b->npart = 0;
    b->pc_type = -1;
    b->part_ref = malloc(((size_t)n + 1) * sizeof *b->part_ref);
    b->part_fails = calloc((size_t)n + 1, sizeof *b->part_fails);
    if (!b->part_ref || !b->part_fails)
        return MS_ENOMEM;
    for (int i = 0; i < n; i++)
        b->part_ref[i] = LUA_NOREF;
    b->npart = n;
    return 0;
}

/* Logs a partitioner failure: the first ones, then every power of two. */
static int part_fail(struct ms_bridge *b, int type, const char *id,
                     size_t idlen, const char *fmt, const char *what)
{
    uint64_t n = ++b->part_fails[type];
    if (ms_log_due(n)) {
        char why[400]; /* fmt's words and `what` (< 300 bytes) */
        snprintf(why, sizeof why, fmt, what);
        ms_log(MS_LOG_ERROR, NULL, "the partitioner of %s failed for id "
               "'%.*s' (%llu time%s so far): %s; the message is refused",
               b->cfg && b->cfg->types ? b->cfg->types[type].name : "?",
               (int)(idlen > 64 ? 64 : idlen), id, (unsigned long long)n,
               n == 1 ? "" : "s", why);
    }
    return MS_EPARTITION;
}

int ms_bridge_partition(void *data, int type, const char *id, size_t idlen,
                        uint32_t shard_count, uint32_t *shard)
{
    struct ms_bridge *b = data;
    if (type < 0 || type >= b->npart || b->part_ref[type] == LUA_NOREF)
        return MS_EPARTITION;
    if (b->in_partition)
        return part_fail(b, type, id, idlen, "%s",
                         "a partitioner cannot send, ask or look up "
                         "owners");
    if (b->pc_type == type && b->pc_len == idlen &&
        memcmp(b->pc_id, id, idlen) == 0) {
        *shard = b->pc_shard;
        return 0;
    }
    /* C enters Lua only from the loop's own callbacks (HTTP, frames),
     * through the protected call; a send from Lua gave its shard */
    if (b->in_leaf || b->in_next)
        return part_fail(b, type, id, idlen, "%s",
                         "no shard was given by the Lua sender");
    lua_State *L = b->L;
    int top = lua_gettop(L);
    char err[300];
    lua_rawgeti(L, LUA_REGISTRYINDEX, b->part_ref[type]);
    lua_pushlstring(L, id, idlen);
    lua_pushinteger(L, (lua_Integer)shard_count);
    b->in_partition = 1;
    int marked = ms__bridge_mark(b, MS_RUN_PARTITIONER, type, id, idlen);
    int called = ms__bridge_pcall(b, 2, 1, err, sizeof err);
    ms__bridge_unmark(b, marked);
    b->in_partition = 0;
    if (called < 0) {
        err[strcspn(err, "\n")] = 0; /* the message, not the traceback */
        lua_settop(L, top);
        return part_fail(b, type, id, idlen, "it raised: %s", err);
    }
    lua_Number v = lua_tonumber(L, -1);
    int ok = lua_type(L, -1) == LUA_TNUMBER && v >= 0 &&
             v < (lua_Number)shard_count && v == (lua_Number)(uint32_t)v;
    if (!ok) {
        char got[64];
        snprintf(got, sizeof got, "%s", lua_type(L, -1) == LUA_TNUMBER
                                            ? lua_tostring(L, -1)
                                            : luaL_typename(L, -1));
        char fmt[128];
        snprintf(fmt, sizeof fmt, "it returned %%s, not an integer in "
                 "0..%u", shard_count - 1);
        lua_settop(L, top);
        return part_fail(b, type, id, idlen, fmt, got);
    }
    lua_settop(L, top);
    *shard = (uint32_t)v;
    if (idlen <= sizeof b->pc_id) {
        b->pc_type = type;
        b->pc_len = idlen;
        memcpy(b->pc_id, id, idlen);
        b->pc_shard = *shard;
    }
    return 0;
}

int ms_bridge_allocate(struct ms_bridge *b, const char *type_name,
                       uint32_t shard, const char *view_json, char *name,
                       size_t namelen, char *err, size_t errlen)
{
    lua_State *L = b->L;
    int top = lua_gettop(L);
    lua_pushstring(L, type_name);
    lua_pushinteger(L, shard);
    lua_pushstring(L, view_json);
    int rc = ms__bridge_call_labelled(b, "moonshard.alloc", "allocate",
                                      type_name, 3, 2, err, errlen);
    if (rc < 0)
        return rc;
    if (lua_isstring(L, -2)) {
        snprintf(name, namelen, "%s", lua_tostring(L, -2));
    } else {
        snprintf(err, errlen, "%s", lua_tostring(L, -1) ? lua_tostring(L, -1)
                                                        : "no member");
        rc = MS_EINVAL;
    }
    lua_settop(L, top);
    return rc;
}

int ms_bridge_allocate_many(struct ms_bridge *b, const char *type_name,
                            const uint32_t *shards, size_t n,
                            const char *view_json, char *names,
                            size_t namelen, char *err, size_t errlen)
{
    lua_State *L = b->L;
    int top = lua_gettop(L);
    if (n > INT_MAX || !lua_checkstack(L, 4))
        return MS_E2BIG;
    lua_pushstring(L, type_name);
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        lua_pushinteger(L, shards[i]);
        lua_rawseti(L, -2, (int)i + 1);
    }
    lua_pushstring(L, view_json);
    int rc = ms__bridge_call_labelled(b, "moonshard.alloc", "allocate_many",
                                      type_name, 3, 2, err, errlen);
    if (rc < 0)
        return rc;
    if (!lua_istable(L, -2)) {
        snprintf(err, errlen, "%s", lua_tostring(L, -1) ? lua_tostring(L, -1)
                                                        : "no members");
        lua_settop(L, top);
        return MS_EINVAL;
    }
    int whys = lua_istable(L, -1); /* each shard's reason, or nil */
    for (size_t i = 0; i < n; i++) {
        lua_rawgeti(L, -2, (int)i + 1);
        size_t len = 0;
        const char *s = lua_type(L, -1) == LUA_TSTRING
                            ? lua_tolstring(L, -1, &len) : NULL;
        char *out = names + i * namelen;
        if (s && len < namelen)
            memcpy(out, s, len + 1);
        else
            out[0] = 0;
        lua_pop(L, 1);
        if (!whys || out[0])
            continue;
        lua_rawgeti(L, -1, (int)i + 1);
        if (lua_type(L, -1) == LUA_TSTRING)
            snprintf(err + i * errlen, errlen, "%s", lua_tostring(L, -1));
        lua_pop(L, 1);
    }
    lua_settop(L, top);
    return 0;
}

int ms_bridge_eligible(struct ms_bridge *b, const char *type_name,
                       const char *member_json)
{
    lua_State *L = b->L;
    int top = lua_gettop(L);
    char err[256];
    lua_pushstring(L, type_name);
    lua_pushstring(L, member_json);
    int yes = 1; /* a strategy that cannot say keeps the owner */
    if (ms__bridge_call_labelled(b, "moonshard.alloc", "eligible",
                                 type_name, 2, 1, err, sizeof err) == 0)
        yes = lua_toboolean(L, -1);
    else
        ms_log(MS_LOG_WARN, NULL, "eligible of %s failed: %s", type_name,
               err);
    lua_settop(L, top);
    return yes;
}

int ms_bridge_rebalance(struct ms_bridge *b, const char *type_name,
                        const char *view_json, uint32_t *out, size_t max,
                        char *err, size_t errlen)
{
    lua_State *L = b->L;
    int top = lua_gettop(L);
    lua_pushstring(L, type_name);
    lua_pushstring(L, view_json);
    int rc = ms__bridge_call_labelled(b, "moonshard.alloc", "rebalance",
                                      type_name, 2, 2, err, errlen);
    if (rc < 0)
        return rc;
    if (lua_istable(L, -2)) {
        size_t n = lua_objlen(L, -2);
        rc = 0;
        for (size_t i = 1; i <= n && (size_t)rc < max; i++) {
            lua_rawgeti(L, -2, (int)i);
            out[rc++] = (uint32_t)lua_tointeger(L, -1);
            lua_pop(L, 1);
        }
    } else {
        snprintf(err, errlen, "%s", lua_tostring(L, -1) ? lua_tostring(L, -1)
                                                        : "no answer");
        rc = MS_EINVAL;
    }
    lua_settop(L, top);
    return rc;
}
