/*
 * http_ui.h -- the status page's files (GET /ui, GET /ui/{file}): the
 * static HTML, CSS and JavaScript of the repository's ui/ folder, found
 * beside lua/ and entities/ (runtime/home.c), served as they are. Not a
 * public API: http.c routes the paths here.
 */
#ifndef MS_IO_HTTP_UI_H
#define MS_IO_HTTP_UI_H

#include <stddef.h>

#include "http_conn.h"

/* Largest file served, in bytes: a bigger one is answered 500 (the page's
 * files are a few KiB; the bound keeps a stray big file off the loop). */
#define MS_HTTP_UI_FILE_MAX (512 * 1024)

/* Longest file name under /ui/ (bytes, decoded: names are plain). */
#define MS_HTTP_UI_NAME_MAX 64

/* 1 when `path` (plen bytes, still percent-encoded) is /ui or under /ui/:
 * the status page's, answered by ms__http_ui. */
int ms__http_ui_path(const char *path, size_t plen);

/*
 * Answers a GET or HEAD of a status page path: /ui and /ui/ are
 * ui/index.html; /ui/{name} is ui/{name} when name is 1 to
 * MS_HTTP_UI_NAME_MAX bytes of [A-Za-z0-9_.-], starts with a letter or a
 * digit, holds no "..", and ends in a known extension (.html, .css, .js,
 * .svg, .png, .ico: the Content-Type follows it). A name with '%', '/',
 * '\\' or ".." is answered 400 (no traversal, encoded or not); any other
 * name outside that set, or a file that is not there, 404. The folder is
 * <home>/ui, home being the gateway's (ms_gateway.home); the file is read
 * whole, synchronously (small local files), at most MS_HTTP_UI_FILE_MAX
 * bytes.
 */
void ms__http_ui(struct conn *c, const char *path, size_t plen);

#endif
