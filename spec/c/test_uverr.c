/* The core's error codes (runtime/core/errors.h) and libuv's, at the I/O
 * border (runtime/io/uverr.h): the table gives each code its name and
 * text, no core code is also a libuv code, and the mapping turns the
 * libuv codes that have a twin into it and leaves the others alone. */
#include <string.h>

#include <uv.h>

#include "../../runtime/core/errors.h"
#include "../../runtime/io/uverr.h"
#include "check.h"

struct row {
    int code;
    const char *name, *text;
};

static const struct row rows[] = {
#define ROW(c, v, name, text) {c, name, text},
    MS_ERRORS(ROW)
#undef ROW
};

static void table(void)
{
    size_t n = sizeof rows / sizeof rows[0];
    CHECK(n >= 18);
    for (size_t i = 0; i < n; i++) {
        CHECK(strcmp(ms_errname(rows[i].code), rows[i].name) == 0);
        CHECK(strcmp(ms_strerror(rows[i].code), rows[i].text) == 0);
        /* below every libuv code: a libuv result is never taken for ours */
        CHECK(rows[i].code < UV_ERRNO_MAX);
        CHECK(strcmp(ms_io_strerror(rows[i].code), rows[i].text) == 0);
        for (size_t j = 0; j < i; j++)
            CHECK(rows[j].code != rows[i].code &&
                  strcmp(rows[j].name, rows[i].name) != 0);
    }
    CHECK(strcmp(ms_errname(0), "error") == 0);
    CHECK(strcmp(ms_errname(UV_ETIMEDOUT), "error") == 0);
    CHECK(strcmp(ms_strerror(-1), "unknown error") == 0);
}

static void mapping(void)
{
    CHECK(ms_uv_error(0) == 0);
    CHECK(ms_uv_error(UV_ETIMEDOUT) == MS_ETIMEDOUT);
    CHECK(ms_uv_error(UV_ECANCELED) == MS_ECANCELED);
    CHECK(ms_uv_error(UV_EINVAL) == MS_EINVAL);
    CHECK(ms_uv_error(UV_E2BIG) == MS_E2BIG);
    CHECK(ms_uv_error(UV_ENOMEM) == MS_ENOMEM);
    CHECK(ms_uv_error(UV_EBUSY) == MS_EBUSY);
    CHECK(ms_uv_error(UV_ECONNREFUSED) == UV_ECONNREFUSED);
    CHECK(strcmp(ms_io_strerror(UV_ECONNREFUSED),
                 uv_strerror(UV_ECONNREFUSED)) == 0);
    CHECK(strcmp(ms_io_strerror(ms_uv_error(UV_ENOMEM)), "out of memory") ==
          0);
}

int main(void)
{
    table();
    mapping();
    CHECK_DONE();
}
