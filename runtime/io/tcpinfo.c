/*
 * tcpinfo.c -- TCP_INFO's acknowledged byte count (tcpinfo.h).
 */
#include "tcpinfo.h"

#include <stddef.h>
#include <string.h>
#include <sys/socket.h>

#if defined(__linux__)
#include <linux/tcp.h>
#include <netinet/in.h>

int ms_tcp_bytes_acked(int fd, uint64_t *out)
{
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    memset(&ti, 0, sizeof ti);
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0)
        return -1;
    /* a kernel older than the field fills less of the struct */
    if (len < offsetof(struct tcp_info, tcpi_bytes_acked) +
                  sizeof ti.tcpi_bytes_acked)
        return -1;
    *out = ti.tcpi_bytes_acked;
    return 0;
}
#else
int ms_tcp_bytes_acked(int fd, uint64_t *out)
{
    (void)fd;
    (void)out;
    return -1;
}
#endif
