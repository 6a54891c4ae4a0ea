/* free_port.h -- a 127.0.0.1 TCP port nobody listens on now (bound to 0
 * and released), for the C tests and test tools that need a listener. */
#ifndef MS_SPEC_FREE_PORT_H
#define MS_SPEC_FREE_PORT_H

#include <uv.h>

static inline int free_port(void)
{
    uv_loop_t loop;
    uv_tcp_t tcp;
    struct sockaddr_in a;
    struct sockaddr_storage ss;
    int len = sizeof ss;
    uv_loop_init(&loop);
    uv_tcp_init(&loop, &tcp);
    uv_ip4_addr("127.0.0.1", 0, &a);
    uv_tcp_bind(&tcp, (struct sockaddr *)&a, 0);
    uv_tcp_getsockname(&tcp, (struct sockaddr *)&ss, &len);
    int port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    uv_close((uv_handle_t *)&tcp, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    return port;
}

#endif
