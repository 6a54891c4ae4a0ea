/*
 * errors.c -- names and texts of the MS_E* codes, from the table in
 * errors.h.
 */
#include "errors.h"

#include <stddef.h>

struct row {
    int code;
    const char *name;
    const char *text;
};

static const struct row rows[] = {
#define MS_ERROR_ROW(c, v, name, text) {c, name, text},
    MS_ERRORS(MS_ERROR_ROW)
#undef MS_ERROR_ROW
};

static const struct row *find(int err)
{
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (rows[i].code == err)
            return &rows[i];
    return NULL;
}

const char *ms_strerror(int err)
{
    const struct row *r = find(err);
    return r ? r->text : "unknown error";
}

const char *ms_errname(int err)
{
    const struct row *r = find(err);
    return r ? r->name : "error";
}
