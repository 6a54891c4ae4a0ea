/*
 * pg_int.h -- the PostgreSQL pool's insides, shared by pg.c (connections,
 * jobs run step by step) and pg_pipe.c (group jobs run in libpq's
 * pipeline mode, statements prepared once per connection). Not an
 * interface: nothing outside runtime/io/pg*.c includes it.
 */
#ifndef MS_IO_PG_INT_H
#define MS_IO_PG_INT_H

#include <libpq-fe.h>
#include <stdint.h>
#include <uv.h>

#include "pg.h"

struct stmt {
    char *sql;
    int nparams;
    char **params; /* NULL entries are SQL NULL */
    int unit;      /* a group's unit, else -1 */
};

/* The outcome of one unit of a group (ms_pg_group). */
struct unit_out {
    int err;
    int index;     /* the unit's statement that failed, -1: none */
    char sqlstate[6];
    char message[MS_PG_MESSAGE_MAX];
};

struct job {
    struct job *next;
    int tx;        /* BEGIN .. COMMIT around the statements */
    int n;         /* statements */
    struct stmt *st;
    ms_pg_done_cb cb;
    void *data;
    uint64_t deadline_ms; /* uv_now() scale */
    int nunits;           /* a group: its units, else 0 */
    int *unit_start;      /* [nunits + 1] first statement of each unit */
    struct unit_out *units;
};

enum { C_DOWN, C_CONNECTING, C_IDLE, C_BUSY };

/* What one message of a group's pipeline was (pg_pipe.c), in the order
 * the server answers them. */
enum {
    P_ROLLBACK, P_BEGIN, P_SAVEPOINT, P_PREPARE, P_STMT, P_RELEASE,
    P_ROLLBACK_TO, P_RELEASE_AFTER, P_COMMIT, P_SYNC
};

struct pstep {
    int kind;  /* P_* */
    int unit;  /* its unit, -1 for BEGIN, COMMIT... */
    int st;    /* P_STMT, P_PREPARE: the job's statement */
    int slot;  /* P_PREPARE, P_STMT: its prepared slot, else -1 */
};

/* Statements prepared on one connection (MS_PG_MAX_PREPARED at most;
 * past that, statements go unnamed), named "ms_p<name>": a number never
 * used twice on a connection, so a slot forgotten while the server may
 * still hold its statement is never prepared again under that name. */
struct prepared {
    char *sql;     /* NULL: a free slot */
    uint32_t hash;
    unsigned name;
};

struct conn {
    struct ms_pg *pool;
    int state;
    PGconn *pg;
    uv_poll_t *poll; /* malloc'd; freed in its close callback */
    int poll_fd;
    int poll_events;
    uv_timer_t timer; /* retry delay, or connect timeout */
    int backoff_ms;   /* delay before the next attempt after a failure */
    unsigned long long failures; /* attempts failed in a row */
    struct job *job;
    int step;        /* tx: 0 BEGIN, 1..n statements, n+1 COMMIT */
    int rolling_back;
    int pipe_on;     /* a group's pipeline is running (pg_pipe.c) */
    struct pstep *pipe; /* the messages of its round, in order */
    int pipe_cap, pipe_n, pipe_at; /* allocated, sent, answered */
    int failed_unit; /* the unit that failed in this round, else -1 */
    int pipe_sp;     /* units run under savepoints (after a failure) */
    int commit_failed; /* the error was COMMIT's: no transaction left */
    struct prepared prep[MS_PG_MAX_PREPARED];
    unsigned prep_names; /* names given on this connection */
    PGresult *last;  /* the last statement's result */
    int err;         /* first error of the job, 0 if none */
    int err_index;
    char sqlstate[6];
    char message[MS_PG_MESSAGE_MAX];
};

struct ms_pg {
    uv_loop_t *loop;
    char *conninfo;
    char *masked;
    char options[160];
    struct ms_pg_config cfg;
    struct conn *conns;
    struct job *head, *tail;
    int queued;
    int jobs; /* queued + running */
    uv_timer_t tick;
    uv_timer_t kick; /* runs pump on the next loop turn after a submit */
    int polls;       /* socket watches not yet freed */
    unsigned long long attempts; /* connection attempts started */
    int in_cb;
    int closing;
    char last_error[MS_PG_MESSAGE_MAX]; /* of the last failed attempt */
    int pending_closes;
    ms_pg_close_cb close_cb;
    void *close_data;
};

struct ms_pg_result {
    int err;
    int index;
    const char *sqlstate;
    const char *message;
    PGresult *res; /* NULL on error */
    int nunits;    /* a group that ran to its end: its units' outcomes */
    const struct unit_out *units;
};

/* pg.c, for pg_pipe.c */
void ms__pg_conn_lost(struct conn *c, const char *why);
int ms__pg_watch(struct conn *c, int events);
void ms__pg_finish(struct conn *c);
void ms__pg_rollback(struct conn *c); /* ROLLBACK, then the job ends */
void ms__pg_copy_text(char *dst, size_t cap, const char *src);

/* pg_pipe.c */
/* Starts the group job c->job on idle connection c (BEGIN, its units,
 * COMMIT in one pipeline). */
void ms__pg_pipe_start(struct conn *c);
/* Reads what the server sent for the group job running on c. */
void ms__pg_pipe_read(struct conn *c);
/* Forgets the connection's prepared statements (its PGconn is gone). */
void ms__pg_prepared_reset(struct conn *c);

#endif
