/* libgoblin/service/sp_probe.c - the peer's SP protocol at a tcp:// address (sp_probe.h). */
#include "sp_probe.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/clock.h"

/* Wait until @p fd is ready for @p ev or the deadline passes. */
static bool wait_fd(int fd, short ev, int64_t deadline_ms) {
    for (;;) {
        int64_t left = deadline_ms - goblin__now_ms();
        if (left <= 0) return false;
        struct pollfd p = {fd, ev, 0};
        int r = poll(&p, 1, (int)(left > 1000000 ? 1000000 : left));
        if (r > 0) return (p.revents & ev) != 0;
        if (r < 0 && errno != EINTR) return false;
    }
}

bool goblin__sp_probe(const char *url, uint32_t timeout_ms, int *proto) {
    const char *h = strstr(url, "://");
    if (!h || !(strncmp(url, "tcp://", 6) == 0 || strncmp(url, "tcp4://", 7) == 0 ||
                strncmp(url, "tcp6://", 7) == 0))
        return false;
    h += 3;
    char host[256], port[16];
    const char *end;
    if (*h == '[') {
        end = strchr(h, ']');
        if (!end || end[1] != ':') return false;
        h++;
    } else {
        end = strrchr(h, ':');
        if (!end) return false;
    }
    size_t n = (size_t)(end - h);
    const char *ps = end + (*end == ']' ? 2 : 1);
    if (n == 0 || n >= sizeof host || !*ps || strlen(ps) >= sizeof port) return false;
    memcpy(host, h, n);
    host[n] = 0;
    snprintf(port, sizeof port, "%s", ps);
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_family = url[3] == '4' ? AF_INET : url[3] == '6' ? AF_INET6 : AF_UNSPEC;
    if (getaddrinfo(host, port, &hints, &ai) != 0 || !ai) return false;
    int64_t deadline = goblin__now_ms() + (timeout_ms ? timeout_ms : 10000);
    bool known = false;
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd >= 0) {
        int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
        bool up = rc == 0 || (errno == EINPROGRESS && wait_fd(fd, POLLOUT, deadline));
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        up = up && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr == 0;
        /* req0's handshake: "\0SP\0", protocol 0x0030 (big-endian), two zero bytes */
        static const unsigned char hs[8] = {0, 'S', 'P', 0, 0x00, 0x30, 0, 0};
        if (up && send(fd, hs, sizeof hs, MSG_NOSIGNAL) == (ssize_t)sizeof hs) {
            unsigned char got[8];
            size_t k = 0;
            while (k < sizeof got && wait_fd(fd, POLLIN, deadline)) {
                ssize_t r = recv(fd, got + k, sizeof got - k, 0);
                if (r <= 0) break;
                k += (size_t)r;
            }
            if (k == sizeof got && memcmp(got, "\0SP\0", 4) == 0) {
                *proto = got[4] << 8 | got[5];
                known = true;
            }
        }
        close(fd);
    }
    freeaddrinfo(ai);
    return known;
}
