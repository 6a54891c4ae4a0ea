/*
 * watch.h -- development mode (`moonshard node --watch`): polls the Lua
 * source files a node loaded (its behavior modules and the modules its
 * cluster config script required) and hands the ones that changed to
 * moonshard.reload, which swaps the new code in or keeps the old code and
 * logs why (see lua/moonshard/reload.lua).
 *
 * The watcher only talks to the node through the call it is given (the
 * node's ms_node_call_lua), so it never runs while a handler runs: a
 * reload happens between two messages. It knows nothing else of the node.
 */
#ifndef MS_LUA_WATCH_H
#define MS_LUA_WATCH_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct ms_watch;

/* Calls `fn` of Lua module `module` with one string argument in the
 * node's VM: 0 with its string result in *out (newly allocated, the
 * caller frees), or a negative code with the reason in `err`. */
typedef int (*ms_watch_call_fn)(void *data, const char *module,
                                const char *fn, const char *arg, char **out,
                                char *err, size_t errlen);

/* How often the files are polled by default. */
#define MS_WATCH_INTERVAL_MS 300

/*
 * Asks moonshard.reload, through `call(data, ...)` (data borrowed; it must
 * outlive the watcher), which files to watch for a node started from the
 * config script at
 * `config_path` (borrowed during the call), records their size and
 * modification time, and polls them every `interval_ms` on `loop`. A file
 * counts as changed once its size, mtime (in ns) or inode differ from its
 * last load and stayed the same for one whole interval, so a file caught
 * half-written is not loaded. Returns 0 with `*out` owned by the caller
 * (ms_watch_close), or a negative code with the reason in `err`.
 */
int ms_watch_start(struct ms_watch **out, uv_loop_t *loop,
                   ms_watch_call_fn call, void *data,
                   const char *config_path, uint64_t interval_ms, char *err,
                   size_t errlen);

/* Stops polling. The watcher is freed once the loop has run its timer's
 * close callback; it never calls `call` after this returns, so call it
 * before the node closes. NULL is ignored. */
void ms_watch_close(struct ms_watch *w);

#endif
