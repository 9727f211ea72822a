/* tests/unit/hostile_peer.h - a raw, hostile peer for the attack tests: a free loopback
 * port, this process's resident memory, and a TCP connection that speaks just enough
 * SP to be let in (the 8-byte handshake of a given protocol), then announces a message
 * of any size and sends as much of it as the socket takes. */
#ifndef GOBLIN_TEST_HOSTILE_PEER_H
#define GOBLIN_TEST_HOSTILE_PEER_H

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define HP_PAIR1 0x11  /* a worker or a client (the node's and the gateway's peer) */

static inline int hp_free_port(void) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {0};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(bind(s, (struct sockaddr *)&sa, sizeof sa), 0);
    socklen_t sl = sizeof sa;
    cr_assert_eq(getsockname(s, (struct sockaddr *)&sa, &sl), 0);
    close(s);
    return ntohs(sa.sin_port);
}

/* VmRSS of this process in KiB (-1 if /proc says nothing). */
static inline long hp_rss_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1) break;
    if (f) fclose(f);
    return kb;
}

/* Connect to 127.0.0.1:@p port, send the SP handshake of protocol @p proto and, if
 * @p announce, a message header announcing that many bytes and up to @p send_bytes of
 * junk (a peer that closes is fine: MSG_NOSIGNAL). The descriptor, or -1. */
static inline int hp_connect(int port, int proto, uint64_t announce, size_t send_bytes) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {0};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = htons((uint16_t)port);
    if (connect(s, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(s);
        return -1;
    }
    const uint8_t hs[8] = {0, 'S', 'P', 0, (uint8_t)(proto >> 8), (uint8_t)proto, 0, 0};
    if (send(s, hs, sizeof hs, MSG_NOSIGNAL) != (ssize_t)sizeof hs || !announce) return s;
    uint8_t h[8];
    for (int i = 0; i < 8; i++) h[i] = (uint8_t)(announce >> (56 - 8 * i));
    if (send(s, h, 8, MSG_NOSIGNAL) != 8) return s;
    fcntl(s, F_SETFL, O_NONBLOCK);
    static uint8_t junk[1 << 16];
    memset(junk, 0x5a, sizeof junk);
    for (size_t sent = 0; sent < send_bytes;) {
        ssize_t w = send(s, junk, sizeof junk, MSG_NOSIGNAL);
        if (w <= 0) break;
        sent += (size_t)w;
    }
    return s;
}

/* Peers that leave before the listener's SP header is sent, which nng 1.5.2 takes for
 * its listener being closed (net/listen_guard.h). TCP: a FIN and then an RST, so that
 * the node's first send fails with EPIPE; ipc: closed at once. */
static inline void hp_vanish_tcp(int port) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {0};
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(s, (struct sockaddr *)&sa, sizeof sa) == 0) {
        shutdown(s, SHUT_WR);
        struct linger lg = {1, 0};
        setsockopt(s, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    }
    close(s);
}

static inline void hp_vanish_ipc(const char *path) {
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {0};
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    (void)connect(s, (struct sockaddr *)&sa, sizeof sa);
    close(s);
}

#endif
