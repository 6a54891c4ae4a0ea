/*
 * tcpinfo.h -- what the kernel knows of a TCP connection.
 *
 * Kept apart from transport.c because the kernel's struct tcp_info
 * (<linux/tcp.h>, which has tcpi_bytes_acked) and the C library's
 * (<netinet/tcp.h>, which libuv includes, and which does not) cannot
 * both be in one file.
 */
#ifndef MS_IO_TCPINFO_H
#define MS_IO_TCPINFO_H

#include <stdint.h>

/* The bytes of the socket `fd` that its peer's kernel has acknowledged,
 * counted as the kernel counts them (a dialer's SYN counts one: callers
 * take a reading before they write and subtract it). Also readable after
 * the kernel ended the connection, until the socket is closed. Returns 0
 * and *out, or -1 where the kernel does not say (not Linux, or older
 * than 4.1). */
int ms_tcp_bytes_acked(int fd, uint64_t *out);

#endif
