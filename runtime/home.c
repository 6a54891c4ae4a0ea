/*
 * home.c -- finds the folder that holds the Lua library (lua/) and the
 * shipped behaviors (entities/), for the node, the benches and the CLI.
 *
 * Order (the README's "Install" section states it too):
 *   1. $MOONSHARD_HOME, when set and not empty, as is;
 *   2. for a binary still in its build folder (MS_BINARY_DIR), the source
 *      tree it was built from (MS_SOURCE_DIR), when that holds the library:
 *      build/moonshard of a checkout uses the checkout's files, even when
 *      an older install sits at build/../share/moonshard;
 *   3. <folder of the binary>/../share/moonshard (MS_SHARE_FROM_BIN),
 *      when it holds the library: an installed binary (cmake --install,
 *      the .deb) finds its files from its own location, from any working
 *      folder, and never reads the source tree it was built from;
 *   4. the source tree, when it holds the library (a binary copied out of
 *      its build folder);
 *   5. <folder of the binary>/.., the last guess.
 * "Holds the library" means <dir>/lua/moonshard/host.lua is readable.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <uv.h>

#include "moonshard.h"

/* The data folder relative to the binary's folder (CMakeLists.txt derives
 * it from the install's bindir and datadir). */
#ifndef MS_SHARE_FROM_BIN
#define MS_SHARE_FROM_BIN "../share/moonshard"
#endif

/* Whether dir/lua/moonshard/host.lua can be read. */
static int holds_library(const char *dir)
{
    char probe[PATH_MAX];
    int n = snprintf(probe, sizeof probe, "%s/lua/moonshard/host.lua", dir);
    if (n < 0 || (size_t)n >= sizeof probe)
        return 0;
    return access(probe, R_OK) == 0;
}

/* Whether the folder exe_dir is the build folder (both canonical). */
static int in_build_dir(const char *exe_dir)
{
#ifdef MS_BINARY_DIR
    char a[PATH_MAX], b[PATH_MAX];
    return realpath(exe_dir, a) && realpath(MS_BINARY_DIR, b)
        && strcmp(a, b) == 0;
#else
    (void)exe_dir;
    return 0;
#endif
}

/* Copies dir into buf (canonical when realpath can resolve it); 0 when it
 * does not fit. */
static int take(char *buf, size_t len, const char *dir)
{
    char real[PATH_MAX];
    const char *use = realpath(dir, real) ? real : dir;
    int n = snprintf(buf, len, "%s", use);
    return n >= 0 && (size_t)n < len;
}

void ms_home(char *buf, size_t len)
{
    const char *env = getenv("MOONSHARD_HOME");
    if (env && *env) {
        snprintf(buf, len, "%s", env);
        return;
    }
    char exe[PATH_MAX], dir[PATH_MAX];
    size_t n = sizeof exe;
    int have_exe = uv_exepath(exe, &n) == 0;
    if (have_exe) {
        char *slash = strrchr(exe, '/');
        if (slash)
            *slash = 0;
#ifdef MS_SOURCE_DIR
        if (in_build_dir(exe) && holds_library(MS_SOURCE_DIR)
            && take(buf, len, MS_SOURCE_DIR))
            return;
#endif
        int w = snprintf(dir, sizeof dir, "%s/%s", exe, MS_SHARE_FROM_BIN);
        if (w >= 0 && (size_t)w < sizeof dir && holds_library(dir)
            && take(buf, len, dir))
            return;
    }
#ifdef MS_SOURCE_DIR
    if (holds_library(MS_SOURCE_DIR) && take(buf, len, MS_SOURCE_DIR))
        return;
#endif
    if (have_exe) {
        int w = snprintf(dir, sizeof dir, "%s/..", exe);
        if (w >= 0 && (size_t)w < sizeof dir && take(buf, len, dir))
            return;
    }
    snprintf(buf, len, ".");
}
