/*
 * pg.h -- a small pool of non-blocking PostgreSQL connections on the
 * node's libuv loop (libpq's asynchronous API; nothing here blocks).
 *
 * A pool holds `connections` libpq connections, each watched with a
 * uv_poll on its socket. Jobs wait in one FIFO queue (at most
 * `queue_max`) and run on the first idle connection. A job is one
 * statement (ms_pg_query) or a transaction (ms_pg_transaction): BEGIN,
 * its statements, COMMIT, sent one after the other on the same
 * connection; the first failing statement makes the pool send ROLLBACK.
 * A group (ms_pg_group) is sent whole, as one pipeline (pg_pipe.c).
 *
 * Timeouts: every connection is opened with the server settings
 * statement_timeout (the server cancels a statement that runs longer:
 * SQLSTATE 57014) and idle_in_transaction_session_timeout. Cancelling
 * from the client (PQcancel) would block the loop, so the pool adds a
 * local deadline instead: a job that has not finished `deadline_ms`
 * after it was queued fails with MS_ETIMEDOUT; if it was running, its
 * connection is dropped (the server rolls back its transaction) and
 * opened again.
 *
 * Connections that fail or are lost are opened again after a capped
 * exponential backoff (backoff_min_ms, doubled per failed attempt, at
 * most backoff_max_ms). A job running on a lost connection fails with
 * MS_PG_ECONN (it may or may not have committed: the pool never retries
 * it); queued jobs wait for a connection until their deadline.
 *
 * The connection string may hold a password: the pool logs it masked
 * (ms_pg_mask_conninfo). The pool passes the two timeouts as the
 * connection's `options` (an `options` in the connection string is
 * replaced). libpq resolves a host NAME with a blocking getaddrinfo:
 * give `host` as an IP address (or `hostaddr`) to keep the loop free.
 * Results are read whole into memory by libpq: bound big SELECTs with
 * LIMIT. Single-threaded: call everything on the loop's thread.
 */
#ifndef MS_IO_PG_H
#define MS_IO_PG_H

#include <stddef.h>
#include <uv.h>

#include "../core/config.h"
#include "../core/errors.h"

/* Limits: each is checked by ms_pg_new (MS_EINVAL above it). */
#define MS_PG_MAX_CONNECTIONS 64    /* connections of one pool */
#define MS_PG_MAX_QUEUE 100000      /* queue_max */
#define MS_PG_MAX_PARAMS 64         /* parameters of one statement */
#define MS_PG_MAX_STATEMENTS 64     /* statements of one transaction */
#define MS_PG_MAX_GROUP_STATEMENTS 4096 /* statements of one group, its
                                           SAVEPOINT steps counted */
#define MS_PG_MAX_PREPARED 32     /* statements prepared per connection;
                                     more run unnamed */
#define MS_PG_MESSAGE_MAX 512       /* bytes of an error message kept */
#define MS_PG_STATEMENT_MAX MS_DB_STATEMENT_MAX /* bytes of one statement's
                                         text and parameters together
                                         (MS_E2BIG) */

/* The pool's own error codes (the others it returns are MS_E* codes of
 * runtime/core/errors.h: MS_ETIMEDOUT, MS_ECANCELED, MS_EINVAL,
 * MS_ENOMEM, MS_EBUSY). Their range does not overlap the core's. */
/* the pool's codes, rows of the one table (runtime/core/errors.h) */
#define MS_PG_EQUERY MS_EDBQUERY /* the server refused it: see sqlstate */
#define MS_PG_ECONN MS_EDBCONN   /* no connection: lost, or cannot connect */
#define MS_PG_EFULL MS_EDBFULL   /* the queue holds queue_max jobs already */

struct ms_pg_config {
    const char *conninfo;        /* libpq key=value or URI; copied */
    int connections;             /* pool size; 0: 2 */
    int queue_max;               /* jobs waiting at most; 0: 1024 */
    int statement_timeout_ms;    /* server statement_timeout; 0: 5000 */
    int idle_tx_timeout_ms;      /* idle_in_transaction_session_timeout;
                                    0: 5000 */
    int deadline_ms;             /* local deadline of a job from the time
                                    it is queued; 0: statement_timeout_ms
                                    + 2000 */
    int connect_timeout_ms;      /* one connection attempt; 0: 5000 */
    int backoff_min_ms;          /* first retry delay; 0: 100 */
    int backoff_max_ms;          /* cap of the retry delay; 0: 5000 */
};

struct ms_pg;
struct ms_pg_result;

/* A job's outcome, called once per accepted job, on the loop. `res` is
 * borrowed until the callback returns (copy what you keep). The callback
 * may queue new jobs; it must not call ms_pg_close. */
typedef void (*ms_pg_done_cb)(const struct ms_pg_result *res, void *data);

/* Called once ms_pg_close has released everything. */
typedef void (*ms_pg_close_cb)(void *data);

/* Creates a pool on `loop` and starts opening its connections (the
 * first job may be queued at once). 0 and *out, or MS_EINVAL (a limit
 * broken, no conninfo, conninfo that libpq cannot parse: `err` then
 * says why if not NULL) or MS_ENOMEM. The pool keeps copies of the
 * strings of `cfg`. */
int ms_pg_new(uv_loop_t *loop, const struct ms_pg_config *cfg,
              struct ms_pg **out, char *err, size_t err_len);

/* Queues one statement with `nparams` text parameters ($1...; NULL is
 * SQL NULL). `sql` and `params` are copied. Jobs start on a later loop
 * turn: `cb` never runs inside this call. 0: `cb` will be called once;
 * else no callback: MS_PG_EFULL, MS_EINVAL (too many parameters, no
 * sql), MS_E2BIG (above MS_PG_STATEMENT_MAX), MS_ECANCELED (the pool is
 * closing) or MS_ENOMEM. */
int ms_pg_query(struct ms_pg *pg, const char *sql, int nparams,
                const char *const *params, ms_pg_done_cb cb, void *data);

/* Queues a transaction: BEGIN, the `n` statements sql[i] with
 * nparams[i] parameters params[i] (copied; params[i] may be NULL when
 * nparams[i] is 0), COMMIT, on one connection. `cb` gets the result of
 * the last statement, or the first error (ms_pg_result_index says which
 * statement failed; the pool has rolled back). Return values as for
 * ms_pg_query; n is 1..MS_PG_MAX_STATEMENTS. */
int ms_pg_transaction(struct ms_pg *pg, int n, const char *const *sql,
                      const int *nparams, const char *const *const *params,
                      ms_pg_done_cb cb, void *data);

/* Queues a group transaction (group commit): BEGIN, then `nunits`
 * units one after the other, unit u being unit_n[u] statements (taken in
 * order from sql, nparams, params, as for ms_pg_transaction), then
 * COMMIT, all sent at once in libpq's pipeline mode (one round trip; the
 * statements are prepared once per connection, at most
 * MS_PG_MAX_PREPARED texts). A statement that fails undoes its unit
 * alone (the unit's later statements are skipped): the group goes on
 * with the other units, each under its own SAVEPOINT from then on, one
 * more round trip per failing unit, and they commit (see pg_pipe.c).
 * `cb` runs once, after COMMIT: with ms_pg_result_error 0, each
 * unit's outcome is ms_pg_result_unit_error (0: committed) and
 * _unit_index (its statement that failed, -1 for none or for its
 * SAVEPOINT or RELEASE), _unit_sqlstate, _unit_message;
 * with an error (BEGIN or COMMIT failed, the connection was lost, the
 * deadline passed), no unit committed -- or, for a connection lost
 * during COMMIT, it is unknown -- and every unit reports that error.
 * Return values as for ms_pg_query; unit_n[u] is 1..MS_PG_MAX_STATEMENTS
 * and the group at most MS_PG_MAX_GROUP_STATEMENTS statements. */
int ms_pg_group(struct ms_pg *pg, int nunits, const int *unit_n,
                const char *const *sql, const int *nparams,
                const char *const *const *params, ms_pg_done_cb cb,
                void *data);

/* Fails every job with MS_ECANCELED (their callbacks run here), closes
 * the connections and handles; `cb` runs on the loop when the pool is
 * freed. MS_EBUSY when called from a ms_pg_done_cb (nothing done). */
int ms_pg_close(struct ms_pg *pg, ms_pg_close_cb cb, void *data);

/* Jobs waiting in the queue (not running). */
int ms_pg_queued(const struct ms_pg *pg);

/* Connection attempts the pool has started, over its life (the first
 * ones included): how hard it is retrying. */
unsigned long long ms_pg_attempts(const struct ms_pg *pg);

/* Connections open and ready now (idle or running a job). */
int ms_pg_connected(const struct ms_pg *pg);

/* Result accessors; `res` as given to the callback. */
int ms_pg_result_error(const struct ms_pg_result *res);   /* 0 or code */
const char *ms_pg_result_sqlstate(const struct ms_pg_result *res);
                                                 /* "" when none */
const char *ms_pg_result_message(const struct ms_pg_result *res);
                                                 /* "" on success */
int ms_pg_result_index(const struct ms_pg_result *res); /* the statement of
                                  a transaction that failed, else -1 */
/* A group's unit u (see ms_pg_group). */
int ms_pg_result_unit_error(const struct ms_pg_result *res, int unit);
int ms_pg_result_unit_index(const struct ms_pg_result *res, int unit);
const char *ms_pg_result_unit_sqlstate(const struct ms_pg_result *res,
                                       int unit);
const char *ms_pg_result_unit_message(const struct ms_pg_result *res,
                                      int unit);
int ms_pg_result_rows(const struct ms_pg_result *res);
int ms_pg_result_cols(const struct ms_pg_result *res);
const char *ms_pg_result_colname(const struct ms_pg_result *res, int col);
/* The text of a value; NULL for SQL NULL or out of range. */
const char *ms_pg_result_value(const struct ms_pg_result *res, int row,
                               int col);
/* Rows a command touched (INSERT/UPDATE/DELETE...), else 0. */
long ms_pg_result_affected(const struct ms_pg_result *res);

/* ms_errname and ms_strerror: the pool's codes are rows of the core's
 * table ("db_query", "db_connection", "db_queue_full"). */
const char *ms_pg_errname(int code);
const char *ms_pg_strerror(int code);

/* A malloc'd copy of the NUL-terminated `s`, or NULL (no memory); for
 * the pool's users (journal, remember store) that keep parameters. */
char *ms_pg_dupstr(const char *s);

/* Puts an error text on one line in place: newlines, tabs and runs of
 * blanks become one space, none at the end (libpq's and a server's
 * messages hold newlines and tabs). */
void ms_pg_one_line(char *s);

/* Writes `conninfo` into out (NUL-terminated, truncated to out_len) with
 * the password replaced by "***", for logs. A string libpq cannot parse
 * gives "(unparsable connection string)". */
void ms_pg_mask_conninfo(const char *conninfo, char *out, size_t out_len);

#endif
