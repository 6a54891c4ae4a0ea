/*
 * logsink.h -- the host's side of the core's log (runtime/core/log.h):
 * lines go to stderr, their time is the system's wall clock.
 */
#ifndef MS_IO_LOGSINK_H
#define MS_IO_LOGSINK_H

/* Installs the stderr sink and the wall clock into the core's log. Each
 * line is written with one write(2) (retried on EINTR or a short write),
 * so lines from the loop thread and the watchdog thread do not mix. Call
 * once at start, before any other thread logs. */
void ms_io_log_install(void);

#endif
