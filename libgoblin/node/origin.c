/* libgoblin/node/origin.c - the network origin of a worker's connection: the IPv4 /24
 * or IPv6 /48 its remote address is in, read from the pipe (NNG_OPT_REMADDR) when the
 * worker proves its identity. Two connections from one origin are one party for
 * replication (identity.c, same_party): one person's machines behind one address
 * block never check each other.
 *
 * Local connections (inproc://, ipc://, abstract sockets, 127.0.0.0/8, ::1) have no
 * network origin: they come from processes on the node's own host, which the node's
 * operator runs, and nothing on the wire tells two of them apart, so the origin rule
 * does not apply to them (the identity and owner rules still do). Tests simulate
 * machines by assigning an origin to an identity's local connections through
 * goblin_test_control (GOBLIN_TESTCTRL_NODE_ORIGIN). */
#include "node_impl.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "origin.h"

/* The top 4 bits of a key say what it is; the rest is the prefix. */
#define ORIGIN_V4 ((uint64_t)0x4 << 60)
#define ORIGIN_V6 ((uint64_t)0x6 << 60)
#define ORIGIN_TEST ((uint64_t)0x7 << 60)
#define ORIGIN_KIND(k) ((k) & ((uint64_t)0xf << 60))
#define ORIGIN_LOW ((((uint64_t)1) << 60) - 1)

static uint64_t v4_key(uint32_t host) {
    if ((host >> 24) == 127) return 0; /* loopback: local */
    return ORIGIN_V4 | (host >> 8);
}

uint64_t goblin__node_origin_key(const nng_sockaddr *sa) {
    if (!sa) return 0;
    switch (sa->s_family) {
    case NNG_AF_INET: return v4_key(ntohl(sa->s_in.sa_addr));
    case NNG_AF_INET6: {
        const uint8_t *a = sa->s_in6.sa_addr;
        static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        static const uint8_t loop[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
        if (memcmp(a, loop, 16) == 0) return 0;
        if (memcmp(a, mapped, 12) == 0)
            return v4_key((uint32_t)a[12] << 24 | (uint32_t)a[13] << 16 | (uint32_t)a[14] << 8 | a[15]);
        uint64_t k = 0;
        for (int i = 0; i < 6; i++) k = k << 8 | a[i];
        return ORIGIN_V6 | k;
    }
    default: return 0; /* inproc, ipc, abstract, zerotier: local or unknown */
    }
}

uint64_t goblin__node_origin_of_prefix(uint8_t kind, const uint8_t prefix[7]) {
    if (kind == 4) return v4_key((uint32_t)prefix[0] << 24 | (uint32_t)prefix[1] << 16 | (uint32_t)prefix[2] << 8);
    if (kind != 6) return 0;
    uint64_t k = 0;
    for (int i = 0; i < 6; i++) k = k << 8 | prefix[i];
    return ORIGIN_V6 | k;
}

void goblin__node_origin_name(uint64_t key, char *buf, size_t cap) {
    if (!cap) return;
    uint64_t low = key & ORIGIN_LOW;
    switch (ORIGIN_KIND(key)) {
    case ORIGIN_V4:
        snprintf(buf, cap, "%u.%u.%u.0/24", (unsigned)(low >> 16 & 255), (unsigned)(low >> 8 & 255),
                 (unsigned)(low & 255));
        break;
    case ORIGIN_V6:
        snprintf(buf, cap, "%x:%x:%x::/48", (unsigned)(low >> 32 & 0xffff), (unsigned)(low >> 16 & 0xffff),
                 (unsigned)(low & 0xffff));
        break;
    case ORIGIN_TEST: snprintf(buf, cap, "test:%llu", (unsigned long long)low); break;
    default: snprintf(buf, cap, "local"); break;
    }
}

/* The origin a test assigned to identity @p fp's local connections, or 0. */
static uint64_t test_origin(const goblin_node *n, const char *fp) {
    for (int32_t i = 0; i < n->n_test_origins; i++)
        if (strcmp(n->test_origins[i].fp, fp) == 0) return n->test_origins[i].origin;
    return 0;
}

/* The network origin of pipe @p pp: for a worker relayed by the hub, the one the hub
 * saw (its connection to the node is the hub's, hub_link.c); else its remote address's. */
static uint64_t pipe_origin(goblin_node *n, nng_pipe pp, bool *relayed) {
    uint64_t o = 0;
    *relayed = goblin__node_hub_pipe_origin(n, nng_pipe_id(pp), &o);
    if (*relayed) return o;
    nng_sockaddr sa;
    return nng_pipe_get_addr(pp, NNG_OPT_REMADDR, &sa) == 0 ? goblin__node_origin_key(&sa) : 0;
}

void goblin__node_peer_set_origin(goblin_node *n, int32_t pi) {
    peer *p = &n->peers[pi];
    p->origin = pipe_origin(n, p->pipe, &p->relayed);
    const ident *id = goblin__node_peer_ident(n, pi);
    if (!p->origin && id) p->origin = test_origin(n, id->fp);
}

bool goblin__node_same_origin(const goblin_node *n, int32_t a, int32_t b) {
    uint64_t oa = n->peers[a].origin;
    return oa != 0 && oa == n->peers[b].origin;
}

goblin_err goblin__node_test_origin(goblin_node *n, const char *identity, uint64_t origin) {
    if (!n || !identity || strlen(identity) != GOBLIN__WKEY_FP_HEX - 1 || origin > ORIGIN_LOW) return GOBLIN_EINVAL;
    uint64_t key = origin ? ORIGIN_TEST | origin : 0;
    goblin_err e = GOBLIN_OK;
    pthread_mutex_lock(&n->mu);
    int32_t at = -1;
    for (int32_t i = 0; i < n->n_test_origins && at < 0; i++)
        if (strcmp(n->test_origins[i].fp, identity) == 0) at = i;
    if (at < 0) {
        int64_t cap = n->cap_test_origins;
        if (!goblin__node_grow((void **)&n->test_origins, &cap, n->n_test_origins + 1, sizeof *n->test_origins)) {
            e = GOBLIN_ENOMEM;
        } else {
            n->cap_test_origins = (int32_t)cap;
            at = n->n_test_origins++;
            memcpy(n->test_origins[at].fp, identity, GOBLIN__WKEY_FP_HEX);
        }
    }
    if (at >= 0) {
        n->test_origins[at].origin = key;
        /* Connected peers of that identity take it now (local ones only: a network
         * origin is what the address says). */
        for (int32_t k = 0; k < n->n_peers; k++) {
            const ident *id = n->peers[k].used && n->peers[k].hello ? goblin__node_peer_ident(n, k) : NULL;
            if (!id || strcmp(id->fp, identity) != 0) continue;
            bool relayed;
            if (pipe_origin(n, n->peers[k].pipe, &relayed) == 0) n->peers[k].origin = key;
        }
    }
    pthread_mutex_unlock(&n->mu);
    return e;
}

void goblin__node_origin_free(goblin_node *n) {
    goblin__free(n->test_origins);
    n->test_origins = NULL;
    n->n_test_origins = n->cap_test_origins = 0;
}
