/*
 * http_ui.c -- serves the status page (GET /ui): the files of the ui/
 * folder of the node's home (runtime/home.c: the checkout for a build,
 * <prefix>/share/moonshard for an install), read whole on each request.
 *
 * The model: the folder is flat and public; a request names one file by a
 * plain name (letters, digits, '_', '-', '.'), which is checked before any
 * path is built, so no request can reach outside the folder: names with
 * '/', '\\', '%' (an encoded anything) or ".." are refused with 400,
 * names outside the plain set or with an unknown extension are 404, and
 * so is a file that is not there or not a regular file. The page itself
 * is static; its script reads the JSON endpoints (/v1/members, /v1/stats,
 * /v1/allocations/{type}) like the CLI does.
 *
 * Reads are synchronous, on the loop thread: the files are a few KiB of
 * local disk, bounded by MS_HTTP_UI_FILE_MAX.
 */
#include "http_ui.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Headers of every file: always revalidated (a node upgraded in place
 * serves its new page), never sniffed, and only same-origin content. */
#define UI_HEADERS                                                         \
    "Cache-Control: no-cache\r\n"                                          \
    "X-Content-Type-Options: nosniff\r\n"                                  \
    "Content-Security-Policy: default-src 'self'\r\n"

static const struct {
    const char *ext;
    const char *ctype;
} types[] = {
    {".html", "text/html; charset=utf-8"},
    {".css", "text/css; charset=utf-8"},
    {".js", "text/javascript; charset=utf-8"},
    {".svg", "image/svg+xml"},
    {".png", "image/png"},
    {".ico", "image/x-icon"},
};

int ms__http_ui_path(const char *path, size_t plen)
{
    return (plen == 3 && memcmp(path, "/ui", 3) == 0) ||
           (plen >= 4 && memcmp(path, "/ui/", 4) == 0);
}

static int plain(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
           (ch >= '0' && ch <= '9') || ch == '_' || ch == '-' || ch == '.';
}

/* The Content-Type of a name's extension, or NULL. */
static const char *ctype_of(const char *name, size_t n)
{
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        size_t e = strlen(types[i].ext);
        if (n > e && memcmp(name + n - e, types[i].ext, e) == 0)
            return types[i].ctype;
    }
    return NULL;
}

/*
 * Reads the regular file `path` whole into a new buffer (caller frees).
 * Returns 0, -ENOENT when it is missing or not a regular file, -EFBIG
 * when it is larger than MS_HTTP_UI_FILE_MAX, or another -errno.
 */
static int read_whole(const char *path, char **out, size_t *len)
{
    /* O_NONBLOCK: a FIFO (or a device) put in ui/ is opened without
     * waiting for a writer, then refused as not a regular file; reads of
     * a regular file ignore the flag */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return errno == ENOTDIR ? -ENOENT : -errno;
    struct stat st;
    int rc = 0;
    char *buf = NULL;
    size_t got = 0;
    if (fstat(fd, &st) < 0) {
        rc = -errno;
    } else if (!S_ISREG(st.st_mode)) {
        rc = -ENOENT;
    } else if (st.st_size > MS_HTTP_UI_FILE_MAX) {
        rc = -EFBIG;
    } else if ((buf = malloc((size_t)st.st_size + 1)) == NULL) {
        rc = -ENOMEM;
    } else {
        /* a file that grew since the fstat is cut at that size: never
         * read past the bound */
        size_t want = (size_t)st.st_size;
        while (got < want) {
            ssize_t r = read(fd, buf + got, want - got);
            if (r < 0 && errno == EINTR)
                continue;
            if (r < 0) {
                rc = -errno;
                break;
            }
            if (r == 0)
                break;
            got += (size_t)r;
        }
    }
    close(fd);
    if (rc < 0) {
        free(buf);
        return rc;
    }
    *out = buf;
    *len = got;
    return 0;
}

void ms__http_ui(struct conn *c, const char *path, size_t plen)
{
    const char *name = "index.html";
    size_t n = strlen(name);

    if (plen > 4) { /* /ui/{name} */
        name = path + 4;
        n = plen - 4;
        for (size_t i = 0; i < n; i++) {
            if (name[i] == '%' || name[i] == '/' || name[i] == '\\' ||
                (name[i] == '.' && i + 1 < n && name[i + 1] == '.')) {
                respond_error(c, 400, "bad_request", "a status page file "
                              "is a plain name (no '/', '%%' or '..')");
                return;
            }
        }
        size_t ok = 0;
        while (ok < n && plain(name[ok]))
            ok++;
        if (n > MS_HTTP_UI_NAME_MAX || ok != n || name[0] == '.' ||
            name[0] == '_' || name[0] == '-') {
            respond_error(c, 404, "not_found", "no such status page file");
            return;
        }
    }
    const char *ctype = ctype_of(name, n);
    const char *home = c->h->gw.home;
    if (ctype == NULL) {
        respond_error(c, 404, "not_found", "no such status page file");
        return;
    }
    if (home == NULL || home[0] == '\0') {
        respond_error(c, 404, "not_found", "this node serves no status "
                      "page (it has no home folder)");
        return;
    }
    char file[PATH_MAX];
    int w = snprintf(file, sizeof file, "%s/ui/%.*s", home, (int)n, name);
    if (w < 0 || (size_t)w >= sizeof file) {
        respond_error(c, 404, "not_found", "no such status page file");
        return;
    }
    char *body = NULL;
    size_t len = 0;
    int rc = read_whole(file, &body, &len);
    if (rc == -ENOENT) {
        respond_error(c, 404, "not_found", "no such status page file%s",
                      plen > 4 ? "" : " (ui/index.html is not installed)");
        return;
    }
    if (rc < 0) {
        respond_error(c, 500, "internal", "cannot read status page file "
                      "%.*s: %s", (int)n, name,
                      rc == -EFBIG ? "larger than the bound"
                                   : strerror(-rc));
        return;
    }
    struct part p = {body, len};
    respond_v(c, 200, ctype, UI_HEADERS, &p, 1);
    free(body);
}
