/*
 * fuzz_config.c -- libFuzzer target of the config loader
 * (runtime/lua/config_load.c through lua/moonshard/config.lua) on hostile
 * scripts.
 *
 * Each input is written to a file (cluster.lua in a private temporary
 * folder) and loaded with ms_bridge_load_config, then
 * ms_bridge_node_names, in a fresh bridge VM, as the node loads its
 * config. A config script is Lua code run with the operator's rights, so
 * what a script may do by design (crash the process through ffi, exit,
 * run commands, write files, turn the JIT back on, remove the hook) is
 * taken away from it first (`require "ffi"` is refused); what is left is what the loader must survive:
 * any syntax, any error, any value returned, any amount of it. The
 * script's instructions are counted by a hook (the JIT is off, so every
 * instruction runs in the interpreter, where hooks fire), which stops it
 * with an error after MAX_INSTRUCTIONS or once the VM's heap passes
 * MAX_HEAP_KB; string.rep, which builds a huge value in one instruction,
 * is bounded. Loading bytecode (load, loadstring, loadfile, dofile,
 * string.dump) is taken away from the script too: LuaJIT does not verify
 * bytecode, so a bad chunk crashes it by design. The loader's own
 * loadfile of the config file is left as it is.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lauxlib.h>
#include <luajit.h>
#include <lualib.h>

#include "../runtime/core/log.h"
#include "../runtime/lua/bridge_int.h"

#define MAX_INSTRUCTIONS 1000000
#define HOOK_EVERY 10     /* instructions between two checks */
#define MAX_REP (1 << 20) /* bytes string.rep may build */
#define MAX_HEAP_KB (64 * 1024) /* the VM's heap, checked by the hook */

static char path[256], folder[64];
static long count;

static void hook(lua_State *L, lua_Debug *ar)
{
    (void)ar;
    count += HOOK_EVERY;
    if (count > MAX_INSTRUCTIONS)
        luaL_error(L, "fuzz: instruction limit");
    /* a string doubled in a loop outgrows any limit in a few dozen
     * instructions: checked every HOOK_EVERY, it stops within a few
     * doublings of the limit */
    if (lua_gc(L, LUA_GCCOUNT, 0) > MAX_HEAP_KB)
        luaL_error(L, "fuzz: heap limit");
}

static int bounded_rep(lua_State *L)
{
    size_t len;
    luaL_checklstring(L, 1, &len);
    lua_Number n = luaL_checknumber(L, 2);
    size_t sep = 0;
    if (!lua_isnoneornil(L, 3))
        luaL_checklstring(L, 3, &sep);
    if (n > 0 && (double)n * (double)(len + sep) > MAX_REP)
        return luaL_error(L, "fuzz: string.rep above %d bytes", MAX_REP);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, 1);
    return 1;
}

static void cleanup(void)
{
    unlink(path);
    rmdir(folder);
}

/* Runs `code` in L, for the setup below; aborts when it fails. */
static void run(lua_State *L, const char *code)
{
    if (luaL_dostring(L, code) != 0) {
        fprintf(stderr, "fuzz_config setup: %s\n", lua_tostring(L, -1));
        abort();
    }
}

static void confine(lua_State *L)
{
    luaJIT_setmode(L, 0, LUAJIT_MODE_ENGINE | LUAJIT_MODE_OFF);
    /* the loader's modules first: they keep what they took from _G */
    run(L, "require 'moonshard.config'");
    lua_getglobal(L, "string");
    lua_getfield(L, -1, "rep");
    lua_pushcclosure(L, bounded_rep, 1);
    lua_setfield(L, -2, "rep");
    lua_pop(L, 1);
    run(L, "os.execute, os.exit, os.remove, os.rename, os.tmpname = nil\n"
           "io.popen, io.open, io.output, io.input, io.lines = nil\n"
           "io.write, io.read, io.close = nil\n"
           "package.loadlib, package.cpath = nil, ''\n"
           /* ffi stays in package.loaded (taking it out, even after
            * a copy was kept, crashes lua_close in LuaJIT), but
            * require refuses it */
           "local req = require\n"
           "require = function(name, ...)\n"
           "  if name == 'ffi' then error('fuzz: no ffi here', 2) end\n"
           "  return req(name, ...)\n"
           "end\n"
           "package.loaded.jit, package.loaded.debug = nil\n"
           "package.loaded.io = nil\n"
           "jit, debug, ffi, collectgarbage, newproxy = nil\n"
           "load, loadstring, loadfile, dofile, string.dump = nil\n"
           "print = function() end\n");
    count = 0;
    lua_sethook(L, hook, LUA_MASKCOUNT, HOOK_EVERY);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!path[0]) {
        ms_log_setup("fuzz", MS_LOG_ERROR + 1);
        char dir[] = "/tmp/ms-fuzz-config-XXXXXX";
        if (!mkdtemp(dir))
            abort();
        snprintf(path, sizeof path, "%s/cluster.lua", dir);
        snprintf(folder, sizeof folder, "%s", dir);
        atexit(cleanup);
    }
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0)
        abort();
    struct ms_bridge *b;
    if (ms_bridge_new(&b, NULL, MS_FUZZ_HOME) != 0)
        abort();
    confine(b->L);
    struct ms_config cfg;
    char err[512];
    if (ms_bridge_load_config(b, path, NULL, &cfg, err, sizeof err) == 0)
        ms_config_free(&cfg);
    count = 0;
    char names[8][64];
    (void)ms_bridge_node_names(b, path, names, 8, err, sizeof err);
    lua_sethook(b->L, NULL, 0, 0); /* closing runs no script code */
    ms_bridge_free(b);
    return 0;
}
