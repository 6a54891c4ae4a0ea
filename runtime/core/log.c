/*
 * log.c -- one line per event, key=value, on stderr.
 */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

static const char *node_name = "-";
static int min_level = MS_LOG_INFO;
static const char *names[] = {"DEBUG", "INFO", "WARN", "ERROR"};

void ms_log_setup(const char *node, int level)
{
    node_name = node ? node : "-";
    min_level = level;
}

int ms_log_level(const char *name)
{
    static const char *lower[] = {"debug", "info", "warn", "error"};
    for (int i = 0; i < 4; i++)
        if (strcmp(name, lower[i]) == 0)
            return i;
    return -1;
}

void ms_log(int level, const char *fields, const char *fmt, ...)
{
    if (level < min_level)
        return;
    if (level < MS_LOG_DEBUG || level > MS_LOG_ERROR)
        level = MS_LOG_ERROR;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* keep one event on one line */
    for (char *p = msg; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    char ts[32];
    strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
    fprintf(stderr, "%s.%03dZ %s node=%s%s%s msg=\"%s\"\n", ts,
            (int)(tv.tv_usec / 1000), names[level], node_name,
            fields ? " " : "", fields ? fields : "", msg);
}
