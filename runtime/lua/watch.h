/*
 * watch.h -- development mode (`moonshard node --watch`): polls the Lua
 * source files a node loaded (its behavior modules and the modules its
 * cluster config script required) and hands the ones that changed to
 * moonshard.reload, which swaps the new code in or keeps the old code and
 * logs why (see lua/moonshard/reload.lua).
 *
 * The watcher only talks to the node through ms_node_call_lua, so it never
 * runs while a handler runs: a reload happens between two messages.
 */
#ifndef MS_LUA_WATCH_H
#define MS_LUA_WATCH_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct ms_node;
struct ms_watch;

/* How often the files are polled by default. */
#define MS_WATCH_INTERVAL_MS 300

/*
 * Asks moonshard.reload which files to watch for the node `n` (borrowed;
 * it must outlive the watcher), started from the config script at
 * `config_path` (borrowed during the call), records their size and
 * modification time, and polls them every `interval_ms` on `loop`. A file
 * counts as changed once its size, mtime (in ns) or inode differ from its
 * last load and stayed the same for one whole interval, so a file caught
 * half-written is not loaded. Returns 0 with `*out` owned by the caller
 * (ms_watch_close), or a negative code with the reason in `err`.
 */
int ms_watch_start(struct ms_watch **out, uv_loop_t *loop, struct ms_node *n,
                   const char *config_path, uint64_t interval_ms, char *err,
                   size_t errlen);

/* Stops polling. The watcher is freed once the loop has run its timer's
 * close callback; it never calls into the node after this returns, so
 * call it before ms_node_close. NULL is ignored. */
void ms_watch_close(struct ms_watch *w);

#endif
