/*
 * errors.h -- the node's error codes: one table, read by C and checked
 * against lua/moonshard/error.lua by spec/01-unit/error_spec.lua.
 *
 * Every code is a negative int with a fixed value (values are sent between
 * nodes, in the flags of an error reply frame: they never change), a
 * stable snake_case name (the `code` field of error tables and HTTP error
 * bodies) and a human-readable text. The values do not overlap libuv's
 * (-1..-4095 on the platforms we build on): the I/O layer maps the libuv
 * codes it passes on with ms_uv_error() (runtime/io/uverr.h).
 *
 * To add a code: add one row here, with the next free value, and the same
 * name to M.codes in lua/moonshard/error.lua (the spec fails until both
 * agree).
 */
#ifndef MS_CORE_ERRORS_H
#define MS_CORE_ERRORS_H

/* X(constant, value, name, text): one row each; the spec reads the
 * constant, value and name of every row. */
#define MS_ERRORS(X)                                                        \
    X(MS_EOVERFLOW, -4100, "overflow", "the shard's mailbox is full")       \
    X(MS_ENOTYPE, -4101, "unknown_type", "unknown entity type")             \
    X(MS_EHANDLER, -4102, "handler_error",                                  \
      "the entity's handler raised an error")                               \
    X(MS_ENOREPLY, -4103, "no_reply",                                       \
      "the handler finished without replying")                              \
    X(MS_EBADJSON, -4104, "bad_json", "the message is not valid JSON")      \
    X(MS_ENOTTABLE, -4105, "not_object",                                    \
      "the message is not a JSON object")                                   \
    X(MS_EUNAVAIL, -4106, "unavailable",                                    \
      "the entity type's behavior module failed to load")                   \
    X(MS_ESELF, -4107, "ask_self",                                          \
      "an entity cannot ask itself (deadlock)")                             \
    X(MS_ECONFIG, -4108, "config", "configuration error")                   \
    X(MS_EPARTITION, -4109, "partitioner",                                  \
      "the entity type's partitioner failed")                               \
    X(MS_ETIMEDOUT, -4110, "timeout", "the ask timed out")                  \
    X(MS_ECANCELED, -4111, "cancelled", "cancelled: the node is stopping")  \
    X(MS_EINVAL, -4112, "invalid", "invalid argument")                      \
    X(MS_E2BIG, -4113, "too_large", "id or message above its size limit")   \
    X(MS_ENOMEM, -4114, "no_memory", "out of memory")                       \
    X(MS_EBUSY, -4115, "busy", "already under way")                         \
    X(MS_ENOOWNER, -4116, "no_owner",                                       \
      "no node takes the message as the owner of its shard")               \
    X(MS_EBADTIMEOUT, -4117, "bad_timeout",                                 \
      "the ask timeout is not a positive number")                           \
    X(MS_ELEASE, -4118, "lease_unavailable",                                \
      "the shard's lease could not be had within its window")               \
    X(MS_EDBQUERY, -4119, "db_query", "PostgreSQL refused the statement")   \
    X(MS_EDBCONN, -4120, "db_connection", "no connection to PostgreSQL")    \
    X(MS_EDBFULL, -4121, "db_queue_full", "the PostgreSQL queue is full")  \
    X(MS_EDBSCHEMA, -4122, "db_schema",                                     \
      "the database's schema is newer than this build knows")              \
    X(MS_ESTALE, -4123, "stale_owner",                                      \
      "this node no longer holds the shard's lease: the write was refused") \
    X(MS_ECONFLICT, -4124, "revision_conflict",                             \
      "another writer extended the entity's history (concurrent history)") \
    X(MS_EREMEMBER, -4125, "remember_store_failed",                         \
      "the shard's remember-entities store failed (fail_closed)")

enum ms_error {
#define MS_ERROR_ENUM(c, v, name, text) c = v,
    MS_ERRORS(MS_ERROR_ENUM)
#undef MS_ERROR_ENUM
};

/* The static, human-readable text of an MS_E* code; "unknown error" for
 * any other value (the I/O layer has ms_io_strerror for libuv's). */
const char *ms_strerror(int err);

/* The stable snake_case name of an MS_E* code ("timeout",
 * "handler_error", ...), the `code` field of error tables; "error" for
 * any other value. */
const char *ms_errname(int err);

#endif
