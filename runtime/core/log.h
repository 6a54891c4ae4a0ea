/*
 * log.h -- structured log lines on stderr:
 *   2026-11-29T16:50:50.123Z INFO node=n1 type=Counter shard=3 id=a msg="..."
 */
#ifndef MS_CORE_LOG_H
#define MS_CORE_LOG_H

enum { MS_LOG_DEBUG, MS_LOG_INFO, MS_LOG_WARN, MS_LOG_ERROR };

/* Sets the node name printed on every line (borrowed; must outlive use)
 * and the lowest level printed. */
void ms_log_setup(const char *node, int min_level);

/* Parses "debug"|"info"|"warn"|"error"; returns -1 when unknown. */
int ms_log_level(const char *name);

/* Logs one line. `fields` is preformatted "k=v k=v" text or NULL. */
void ms_log(int level, const char *fields, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
