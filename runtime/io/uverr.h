/*
 * uverr.h -- libuv's error codes at the border of the core.
 *
 * The core has its own codes (runtime/core/errors.h) and knows nothing of
 * libuv's. Where the I/O layer hands a libuv result to code that expects
 * an MS_E* code, it maps it with ms_uv_error(); where it writes the text
 * of a code that may be either, it uses ms_io_strerror().
 */
#ifndef MS_IO_UVERR_H
#define MS_IO_UVERR_H

/* The MS_E* code of a libuv result: 0 stays 0; UV_ETIMEDOUT,
 * UV_ECANCELED, UV_EINVAL, UV_E2BIG, UV_ENOMEM and UV_EBUSY become their
 * MS_E* twins; any other code is returned unchanged (a libuv code that
 * ms_errname calls "error"; ms_io_strerror still has its text). */
int ms_uv_error(int uv_rc);

/* The text of an MS_E* code, else libuv's text of the code (static). */
const char *ms_io_strerror(int rc);

#endif
