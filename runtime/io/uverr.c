/*
 * uverr.c -- libuv's error codes mapped to the core's.
 */
#include "uverr.h"

#include <uv.h>

#include "../core/errors.h"

int ms_uv_error(int uv_rc)
{
    switch (uv_rc) {
    case UV_ETIMEDOUT:
        return MS_ETIMEDOUT;
    case UV_ECANCELED:
        return MS_ECANCELED;
    case UV_EINVAL:
        return MS_EINVAL;
    case UV_E2BIG:
        return MS_E2BIG;
    case UV_ENOMEM:
        return MS_ENOMEM;
    case UV_EBUSY:
        return MS_EBUSY;
    default:
        return uv_rc;
    }
}

const char *ms_io_strerror(int rc)
{
    /* the core's codes lie below libuv's (spec/c/test_uverr.c checks it) */
    return rc < UV_ERRNO_MAX ? ms_strerror(rc) : uv_strerror(rc);
}
