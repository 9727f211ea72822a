/* tests/unit/test_hub_relay.c - goblin-hub's machine side with real objects on loopback:
 * a hub serving its machines address (TLS and plain), lab nodes linked with node keys
 * (goblin_node_hub_connect), workers dialing the hub. A verified matmul through the relay
 * against an f64 product computed here; identities end to end; wrong, tampered and
 * revoked keys refused; tickets that were never issued or are used twice refused; a
 * worker claiming another's identity refused by the node through the relay; hostile
 * bytes to the machines port refused at once, before their bodies; two labs sharing the
 * workers (equal weights and 3:1). */
#define _GNU_SOURCE /* memmem */
#include <criterion/criterion.h>
#include <goblin/hub.h>
#include <goblin/node.h>
#include <goblin/worker.h>
#include <nng/nng.h>
#include <nng/protocol/pair1/pair.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hostile_peer.h"
#include "hub_machines_util.h"
#include "hub/hub_impl.h"
#include "proto/hub_wire.h"
#include "runtime_util.h"

/* Whether any file under the hub's directory holds @p len bytes at @p p. */
static bool hub_files_hold(const void *p, size_t len) {
    char cmd[400];
    snprintf(cmd, sizeof cmd, "find '%s' -type f", dir);
    FILE *l = popen(cmd, "r");
    char path[600];
    bool found = false;
    while (l && fgets(path, sizeof path, l)) {
        path[strcspn(path, "\n")] = 0;
        FILE *f = fopen(path, "rb");
        if (!f) continue;
        static uint8_t buf[1 << 22];
        size_t n = fread(buf, 1, sizeof buf, f);
        fclose(f);
        found |= n >= len && memmem(buf, n, p, len) != NULL;
    }
    if (l) pclose(l);
    return found;
}

typedef struct lent_goal {
    int64_t lab, want;
} lent_goal;
static bool lab_has(void *arg) {
    lent_goal *g = arg;
    int64_t n = -1;
    goblin_hub_machines_lab_lent(hub, g->lab, &n);
    return n == g->want;
}

/* ---- one lab, two workers, TLS ----------------------------------------------------------- */

Test(hub_relay, matmul_through_the_hub_with_identities_end_to_end) {
    hub_up("tls+tcp", NULL);
    char key[GOBLIN_HUB_NODE_KEY_SIZE];
    int64_t kid;
    int64_t lab = lab_key("lab@example.org", key, &kid);
    goblin_node *node = node_up(NULL);
    cr_assert_eq(link_node(node, key), GOBLIN_OK);
    goblin_node_hub_stats ls;
    cr_assert_eq(goblin_node_hub_stats_get(node, &ls), GOBLIN_OK);
    cr_assert(ls.connected);
    cr_assert_eq(ls.lab, lab);
    wset ws;
    workers_up(&ws, 2);
    cr_assert(rt_wait_workers(node, 2), "both workers reach the node through the hub");
    goblin_hub_machines_stats st = hstats();
    cr_assert_eq(st.nodes_connected, 1);
    cr_assert_eq(st.workers_lent, 2);
    matmul_checked(node, 96, 80, 72, 11);
    cr_assert_gt(accepted_from_workers(node), 0, "the workers computed tiles");
    /* Identities are the workers' own keys, proved to the node through the splice. */
    int found = 0;
    goblin_node_worker_stats w;
    for (int64_t i = 0; goblin_node_worker_stats_get(node, i, &w) == GOBLIN_OK; i++)
        for (int j = 0; j < 2; j++) found += !strcmp(w.identity, goblin_worker_identity(ws.w[j]));
    cr_assert_eq(found, 2, "the node knows each worker by its own identity");
    st = hstats();
    cr_assert_gt(st.bytes_relayed, 96 * 80 * 8, "the operands went through the relay");
    cr_assert(!hub_files_hold(a_head, sizeof a_head), "no task bytes in any file of the hub");
    workers_down(&ws);
    goblin_node_free(node);
    hub_down();
}

/* ---- keys ----------------------------------------------------------------------------------- */

Test(hub_relay, wrong_tampered_and_revoked_keys_are_refused) {
    hub_up("tls+tcp", NULL);
    char key[GOBLIN_HUB_NODE_KEY_SIZE];
    int64_t kid;
    int64_t lab = lab_key("lab@example.org", key, &kid);
    rt_log lg = {.mu = PTHREAD_MUTEX_INITIALIZER};
    goblin_node *node = node_up(&lg);
    char bad[GOBLIN_HUB_NODE_KEY_SIZE];
    memcpy(bad, key, sizeof bad);
    bad[40] = bad[40] == 'a' ? 'b' : 'a'; /* one digit of the secret changed */
    cr_assert_eq(link_node(node, bad), GOBLIN_EAUTH);
    cr_assert(rt_log_has(&lg, "refused this node"));
    cr_assert_eq(link_node(node, "gbk1_0000000000000001_not-a-key"), GOBLIN_EAUTH);
    cr_assert_eq(link_node(node, "hello"), GOBLIN_EAUTH);
    cr_assert_eq(hstats().nodes_refused, 3);
    cr_assert_eq(hstats().nodes_connected, 0);
    /* The right key works; once revoked, it is refused. */
    cr_assert_eq(link_node(node, key), GOBLIN_OK);
    goblin_node_free(node);
    cr_assert_eq(goblin_hub_store_key_revoke(goblin_hub_get_store(hub), lab, kid, T0), GOBLIN_OK);
    node = node_up(NULL);
    cr_assert_eq(link_node(node, key), GOBLIN_EAUTH, "a revoked key");
    /* A refused node is lent nothing: a worker waits at the hub. */
    wset ws;
    workers_up(&ws, 1);
    sleep_ms(300);
    goblin_node_stats ns;
    goblin_node_stats_get(node, &ns);
    cr_assert_eq(ns.workers_seen, 0);
    workers_down(&ws);
    goblin_node_free(node);
    hub_down();
}

/* ---- tickets and identities: what a worker cannot do ------------------------------------------ */

Test(hub_relay, tickets_cannot_be_guessed_or_used_twice) {
    hub_up("tcp", NULL);
    char key[GOBLIN_HUB_NODE_KEY_SIZE];
    int64_t kid;
    lab_key("lab@example.org", key, &kid);
    /* 1: a guessed ticket. */
    nng_socket s = raw_dial(murl);
    goblin__hubw_msg m;
    memset(&m, 0, sizeof m);
    m.type = GOBLIN__HUBW_ATTACH;
    memset(m.ticket, 0x42, sizeof m.ticket);
    send_hubw(s, &m);
    goblin__hubw_msg r;
    cr_assert(recv_hubw(s, &r));
    cr_assert_eq(r.type, GOBLIN__HUBW_REFUSE);
    cr_assert_eq(r.reason, GOBLIN_EAUTH);
    nng_close(s);
    cr_assert_eq(hstats().tickets_refused, 1);
    /* 2: a node by hand: its ticket works once. */
    nng_socket ctl = raw_dial(murl);
    memset(&m, 0, sizeof m);
    m.type = GOBLIN__HUBW_NODE_HELLO;
    snprintf(m.key, sizeof m.key, "%s", key);
    send_hubw(ctl, &m);
    cr_assert(recv_hubw(ctl, &r));
    cr_assert_eq(r.type, GOBLIN__HUBW_NODE_ACK);
    wset ws;
    workers_up(&ws, 1);
    cr_assert(recv_hubw(ctl, &r), "an OPEN for the worker");
    cr_assert_eq(r.type, GOBLIN__HUBW_OPEN);
    uint8_t ticket[32];
    memcpy(ticket, r.ticket, 32);
    nng_socket d1 = raw_dial(murl);
    memset(&m, 0, sizeof m);
    m.type = GOBLIN__HUBW_ATTACH;
    memcpy(m.ticket, ticket, 32);
    send_hubw(d1, &m);
    /* What comes back is the worker's own HELLO. */
    goblin__wire_msg *h = rt_raw_next(d1);
    cr_assert_not_null(h);
    cr_assert_eq(h->type, GOBLIN_WIRE_TYPE_HELLO);
    goblin__wire_msg_free(h);
    nng_socket d2 = raw_dial(murl);
    send_hubw(d2, &m);
    cr_assert(recv_hubw(d2, &r));
    cr_assert_eq(r.type, GOBLIN__HUBW_REFUSE, "a ticket works once");
    cr_assert_eq(hstats().tickets_refused, 2);
    nng_close(d2);
    nng_close(d1);
    workers_down(&ws);
    nng_close(ctl);
    hub_down();
}

Test(hub_relay, a_worker_cannot_pose_as_another_through_the_hub) {
    hub_up("tcp", NULL);
    char key[GOBLIN_HUB_NODE_KEY_SIZE];
    int64_t kid;
    lab_key("lab@example.org", key, &kid);
    rt_log lg = {.mu = PTHREAD_MUTEX_INITIALIZER};
    goblin_node *node = node_up(&lg);
    cr_assert_eq(link_node(node, key), GOBLIN_OK);
    goblin__wkey *mine = NULL, *victim = NULL;
    cr_assert_eq(goblin__wkey_ephemeral(&mine, NULL, 0), GOBLIN_OK);
    cr_assert_eq(goblin__wkey_ephemeral(&victim, NULL, 0), GOBLIN_OK);
    goblin__wire_msg hello = rt_raw_hello(1 << 24, false);
    nng_socket s = raw_dial(murl);
    rt_proof_lie steal = {.pub = goblin__wkey_public(victim)};
    goblin__wire_msg *r = rt_raw_join(s, &hello, mine, &steal);
    cr_assert_not_null(r, "the node's answer comes back through the hub");
    cr_assert_eq(r->type, GOBLIN_WIRE_TYPE_REFUSE);
    cr_assert_eq(r->body.refuse.reason, GOBLIN_EAUTH);
    goblin__wire_msg_free(r);
    nng_close(s);
    /* The honest proof of the same connection's kind is admitted, by its own key. */
    s = raw_dial(murl);
    r = rt_raw_join(s, &hello, mine, NULL);
    cr_assert_not_null(r);
    cr_assert_eq(r->type, GOBLIN_WIRE_TYPE_HELLO_ACK);
    goblin__wire_msg_free(r);
    goblin_node_worker_stats w;
    cr_assert_eq(goblin_node_worker_stats_get(node, 0, &w), GOBLIN_OK);
    cr_assert_str_eq(w.identity, goblin__wkey_fingerprint(mine));
    goblin_node_stats ns;
    goblin_node_stats_get(node, &ns);
    cr_assert_eq(ns.workers_refused, 1);
    char line[128];
    snprintf(line, sizeof line, "identity proof failed for %.16s", goblin__wkey_fingerprint(victim));
    cr_assert(rt_log_has(&lg, line));
    nng_close(s);
    goblin__wkey_free(mine);
    goblin__wkey_free(victim);
    goblin_node_free(node);
    hub_down();
}

/* ---- hostile bytes ------------------------------------------------------------------------------ */

static bool closed_by_peer(int fd) {
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    int fl = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    uint8_t b[4096];
    for (int i = 0; i < 10000; i++) {
        ssize_t k = recv(fd, b, sizeof b, 0);
        if (k == 0 || (k < 0 && errno == ECONNRESET)) return true;
        if (k < 0) return false;
    }
    return false;
}

Test(hub_relay, hostile_bytes_are_refused_before_their_bodies) {
    hub_up("tcp", NULL);
    long rss0 = hp_rss_kib();
    /* Not SP at all. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                             .sin_port = htons((uint16_t)mport)};
    cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    const char junk[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    cr_assert_eq(send(fd, junk, sizeof junk - 1, MSG_NOSIGNAL), (ssize_t)(sizeof junk - 1));
    cr_assert(closed_by_peer(fd), "closed: not our protocol");
    close(fd);
    /* SP of another protocol (req0 = 0x30). */
    fd = hp_connect(mport, 0x30, 0, 0);
    cr_assert(closed_by_peer(fd));
    close(fd);
    /* Huge announcements: 1 GiB and 2^60 bytes, of which only 64 KiB are sent. The hub
     * answers (a worker REFUSE or a close) without waiting for the body. */
    uint64_t sizes[2] = {(uint64_t)1 << 30, (uint64_t)1 << 60};
    for (int i = 0; i < 2; i++) {
        fd = hp_connect(mport, HP_PAIR1, sizes[i], 1 << 16);
        cr_assert_geq(fd, 0);
        cr_assert(closed_by_peer(fd), "refused before the body");
        close(fd);
    }
    /* A worker's message that is not a HELLO gets a REFUSE it can read. */
    nng_socket s = raw_dial(murl);
    goblin__wire_msg m;
    goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_LEASE_REQUEST);
    m.body.lease_request.slots = 1;
    uint8_t *buf;
    size_t len;
    cr_assert_eq(goblin__wire_encode(&m, &buf, &len), GOBLIN_OK);
    cr_assert_eq(nng_send(s, buf, len, 0), 0);
    goblin_buffer_free(buf);
    goblin__wire_msg *r = rt_raw_next(s);
    cr_assert_not_null(r);
    cr_assert_eq(r->type, GOBLIN_WIRE_TYPE_REFUSE);
    cr_assert_eq(r->body.refuse.reason, GOBLIN_EPROTO);
    goblin__wire_msg_free(r);
    nng_close(s);
    /* A malformed hub message gets a hub REFUSE. */
    s = raw_dial(murl);
    uint8_t bad[32] = {'G', 'B', 'L', 'H', 1, 0, 99};
    bad[16] = 8;
    cr_assert_eq(nng_send(s, bad, sizeof bad, 0), 0);
    goblin__hubw_msg hr;
    cr_assert(recv_hubw(s, &hr));
    cr_assert_eq(hr.type, GOBLIN__HUBW_REFUSE);
    nng_close(s);
    /* 400 connections that say nothing: at most 256 are held, the rest closed at once. */
    int fds[400], closed = 0;
    for (int i = 0; i < 400; i++) fds[i] = hp_connect(mport, HP_PAIR1, 0, 0);
    for (int i = 0; i < 400; i++) {
        if (fds[i] < 0) continue;
        struct timeval tv = {0, 200000};
        setsockopt(fds[i], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        uint8_t b[16];
        ssize_t k = recv(fds[i], b, sizeof b, 0);
        if (k == 0 || (k < 0 && errno == ECONNRESET)) closed++;
    }
    cr_assert_geq(closed, 400 - 256, "%d closed", closed);
    for (int i = 0; i < 400; i++)
        if (fds[i] >= 0) close(fds[i]);
    goblin_hub_machines_stats st = hstats();
    cr_assert_geq(st.connections_refused, 4 + 400 - 256);
    cr_assert_eq(st.workers_refused, 1);
    long rss1 = hp_rss_kib();
    cr_assert_lt(rss1 - rss0, 64 * 1024, "RSS grew %ld KiB", rss1 - rss0);
    /* The hub still works: a node and a worker meet through it. */
    char key[GOBLIN_HUB_NODE_KEY_SIZE];
    int64_t kid;
    lab_key("lab@example.org", key, &kid);
    goblin_node *node = node_up(NULL);
    cr_assert_eq(link_node(node, key), GOBLIN_OK);
    wset ws;
    workers_up(&ws, 1);
    cr_assert(rt_wait_workers(node, 1));
    workers_down(&ws);
    goblin_node_free(node);
    hub_down();
}

/* ---- two labs share the workers ---------------------------------------------------------------- */

static void two_labs(const char *extra, int64_t want_a, int64_t want_b) {
    hub_up("tcp", extra);
    char ka[GOBLIN_HUB_NODE_KEY_SIZE], kb[GOBLIN_HUB_NODE_KEY_SIZE];
    int64_t kid;
    int64_t la = lab_key("a@example.org", ka, &kid), lb = lab_key("b@example.org", kb, &kid);
    goblin_node *na = node_up(NULL);
    cr_assert_eq(link_node(na, ka), GOBLIN_OK);
    wset ws;
    workers_up(&ws, 4);
    lent_goal g = {la, 4};
    cr_assert(wait_for(lab_has, &g), "lab a alone has all four");
    /* Lab b arrives: the hub takes workers back from a until the shares are fair. */
    goblin_node *nb = node_up(NULL);
    cr_assert_eq(link_node(nb, kb), GOBLIN_OK);
    g = (lent_goal){lb, want_b};
    cr_assert(wait_for(lab_has, &g), "lab b gets its share");
    g = (lent_goal){la, want_a};
    cr_assert(wait_for(lab_has, &g), "lab a keeps its share");
    cr_assert(rt_wait_workers(nb, want_b));
    /* Both labs' jobs complete on the shared workers. */
    matmul_checked(na, 64, 48, 56, 21);
    matmul_checked(nb, 56, 64, 40, 31);
    cr_assert_gt(accepted_from_workers(na), 0);
    cr_assert_gt(accepted_from_workers(nb), 0);
    /* No worker served both labs at once: each is lent to one node. */
    goblin_node_stats sa, sb;
    goblin_node_stats_get(na, &sa);
    goblin_node_stats_get(nb, &sb);
    cr_assert_eq(sa.workers_connected + sb.workers_connected, 4);
    workers_down(&ws);
    goblin_node_free(nb);
    goblin_node_free(na);
    hub_down();
}

Test(hub_relay, two_labs_share_four_workers_equally, .timeout = 180) { two_labs(NULL, 2, 2); }

Test(hub_relay, lab_weights_split_three_to_one, .timeout = 180) { two_labs("lab_weight = a@example.org 3\n", 3, 1); }

Test(hub_relay, config_reads_machines_and_weights) {
    goblin_hub_config c;
    goblin_errbuf err;
    cr_assert_eq(goblin_hub_config_parse("machines = tls+tcp://0.0.0.0:9000\nlab_weight = A@Example.org 5\n"
                                         "machines_max_workers = 10\n", &c, &err), GOBLIN_OK, "%s", err.message);
    cr_assert_str_eq(c.machines, "tls+tcp://0.0.0.0:9000");
    cr_assert_eq(c.n_lab_weights, 1);
    cr_assert_str_eq(c.lab_weights[0].email, "a@example.org");
    cr_assert_eq(c.lab_weights[0].weight, 5);
    cr_assert_eq(c.machines_max_workers, 10);
    cr_assert_eq(goblin_hub_config_parse("lab_weight = a@example.org 0\n", &c, &err), GOBLIN_ESYNTAX);
    cr_assert_eq(goblin_hub_config_parse("lab_weight = a@example.org\n", &c, &err), GOBLIN_ESYNTAX);
    cr_assert_eq(goblin_hub_config_parse("lab_weight = nobody 2\n", &c, &err), GOBLIN_ESYNTAX);
}

Test(hub_relay, plain_tcp_only_on_loopback) {
    snprintf(dir, sizeof dir, "/tmp/goblin-hubrelay-%d-XXXXXX", (int)getpid());
    cr_assert_not_null(mkdtemp(dir));
    goblin_errbuf err;
    cr_assert_eq(goblin_hub_init_dir(dir, NULL, NULL, fp, &err), GOBLIN_OK, "%s", err.message);
    char path[400];
    snprintf(path, sizeof path, "%s/hub.conf", dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "machines = tcp://0.0.0.0:0\n");
    fclose(f);
    cr_assert_eq(goblin_hub_open(dir, &hub, &err), GOBLIN_OK, "%s", err.message);
    cr_assert_eq(goblin_hub_serve_machines(hub), GOBLIN_EINVAL);
    cr_assert(strstr(goblin_hub_error(hub), "loopback"));
    hub_down();
}

/* ---- reputation: lab nodes report quarantined identities --------------------------------------- */

static goblin_err count_q(void *ctx, const goblin_hub_quarantine *q) {
    (void)q;
    (*(int *)ctx)++;
    return GOBLIN_OK;
}

static int quarantines_in_force(void) {
    int n = 0;
    cr_assert_eq(goblin_hub_store_quarantine_each(goblin_hub_get_store(hub), false, count_q, &n), GOBLIN_OK);
    return n;
}

static nng_socket control_up(const char *key) {
    nng_socket s = raw_dial(murl);
    goblin__hubw_msg m, r;
    memset(&m, 0, sizeof m);
    m.type = GOBLIN__HUBW_NODE_HELLO;
    snprintf(m.key, sizeof m.key, "%s", key);
    send_hubw(s, &m);
    cr_assert(recv_hubw(s, &r));
    cr_assert_eq(r.type, GOBLIN__HUBW_NODE_ACK);
    return s;
}

static void send_quarantine(nng_socket s, uint8_t id_byte, const char *reason) {
    goblin__hubw_msg m;
    memset(&m, 0, sizeof m);
    m.type = GOBLIN__HUBW_QUARANTINE;
    memset(m.identity, id_byte, sizeof m.identity);
    snprintf(m.reason_text, sizeof m.reason_text, "%s", reason);
    send_hubw(s, &m);
}

/* The hub's counter @p field reaching @p want (the relay works on nng's threads). */
#define WAIT_STAT(field, want)                                                                      \
    do {                                                                                            \
        for (int i_ = 0; i_ < 2000 && hstats().field < (want); i_++) sleep_ms(5);                   \
        cr_assert_eq(hstats().field, (want), #field);                                               \
    } while (0)

static goblin_err find_q(void *ctx, const goblin_hub_quarantine *q) {
    goblin_hub_quarantine *out = ctx;
    if (!strcmp(q->subject, out->subject)) *out = *q;
    return GOBLIN_OK;
}

Test(hub_relay, a_lab_report_is_stored_once_with_reason_and_reporter) {
    hub_up("tcp", NULL);
    char key[GOBLIN_HUB_NODE_KEY_SIZE];
    int64_t kid;
    lab_key("lab@example.org", key, &kid);
    nng_socket ctl = control_up(key);
    send_quarantine(ctl, 0xab, "wrong tiles: 3 of 5 spot checks");
    send_quarantine(ctl, 0xab, "again"); /* the same identity: one row */
    WAIT_STAT(quarantines_repeated, 1);
    cr_assert_eq(hstats().quarantines_recorded, 1);
    goblin_hub_quarantine q;
    memset(&q, 0, sizeof q);
    for (int i = 0; i < 32; i++) memcpy(q.subject + 2 * i, "ab", 2);
    cr_assert_eq(goblin_hub_store_quarantine_each(goblin_hub_get_store(hub), false, find_q, &q), GOBLIN_OK);
    cr_assert_gt(q.id, 0, "the identity's fingerprint is the subject");
    cr_assert_str_eq(q.reason, "wrong tiles: 3 of 5 spot checks");
    char who[64];
    snprintf(who, sizeof who, "node key %lld", (long long)kid);
    cr_assert_str_eq(q.reported_by, who);
    bool in = false;
    cr_assert_eq(goblin_hub_store_quarantined(goblin_hub_get_store(hub), q.subject, &in), GOBLIN_OK);
    cr_assert(in);
    /* The control connection lives on: a heartbeat after the reports is fine. */
    goblin__hubw_msg hb;
    memset(&hb, 0, sizeof hb);
    hb.type = GOBLIN__HUBW_HEARTBEAT;
    send_hubw(ctl, &hb);
    cr_assert_eq(hstats().nodes_connected, 1);
    nng_close(ctl);
    hub_down();
}

Test(hub_relay, hostile_quarantine_reports_store_nothing_beyond_the_bound, .timeout = 60) {
    hub_up("tcp", NULL);
    char key[GOBLIN_HUB_NODE_KEY_SIZE];
    int64_t kid;
    lab_key("lab@example.org", key, &kid);
    /* 1: QUARANTINE as a connection's first message (no node key, or a data connection):
     * refused, nothing stored. */
    nng_socket s = raw_dial(murl);
    send_quarantine(s, 0x11, "no key");
    goblin__hubw_msg r;
    cr_assert(recv_hubw(s, &r));
    cr_assert_eq(r.type, GOBLIN__HUBW_REFUSE);
    nng_close(s);
    cr_assert_eq(quarantines_in_force(), 0);
    /* 2: garbage QUARANTINEs on a control connection: each closes it, nothing stored. */
    for (int k = 0; k < 3; k++) {
        nng_socket ctl = control_up(key);
        uint8_t b[GOBLIN__HUBW_MAX + 64];
        goblin__hubw_msg m;
        memset(&m, 0, sizeof m);
        m.type = GOBLIN__HUBW_QUARANTINE;
        memset(m.identity, 0x22, 32);
        strcpy(m.reason_text, "fine reason");
        size_t n;
        cr_assert_eq(goblin__hubw_encode(&m, b, &n), GOBLIN_OK);
        if (k == 0) b[GOBLIN__HUBW_HEADER + 40] = 0x07;                       /* unprintable reason */
        if (k == 1) b[GOBLIN__HUBW_HEADER + 32] = 0xff;                       /* reason longer than the body */
        if (k == 2) {                                                         /* oversized */
            memset(b + n, 0, sizeof b - n);
            n = sizeof b;
        }
        cr_assert_eq(nng_send(ctl, b, n, 0), 0);
        for (int i = 0; i < 2000 && hstats().nodes_connected > 0; i++) sleep_ms(5);
        cr_assert_eq(hstats().nodes_connected, 0, "case %d closes the control connection", k);
        nng_close(ctl);
    }
    cr_assert_eq(quarantines_in_force(), 0);
    /* 3: a flood past the per-key bound: 64 stored, 16 counted and dropped. */
    nng_socket ctl = control_up(key);
    for (int i = 0; i < 80; i++) {
        goblin__hubw_msg m;
        memset(&m, 0, sizeof m);
        m.type = GOBLIN__HUBW_QUARANTINE;
        m.identity[0] = (uint8_t)i;
        m.identity[1] = 0x5a;
        strcpy(m.reason_text, "flood");
        uint8_t b[GOBLIN__HUBW_MAX];
        size_t n;
        cr_assert_eq(goblin__hubw_encode(&m, b, &n), GOBLIN_OK);
        cr_assert_eq(nng_send(ctl, b, n, 0), 0);
    }
    WAIT_STAT(quarantines_refused, 3 + 16);
    cr_assert_eq(hstats().quarantines_recorded, 64);
    cr_assert_eq(quarantines_in_force(), 64);
    cr_assert_eq(hstats().nodes_connected, 1, "a node with many quarantines stays linked");
    nng_close(ctl);
    /* The key's next connection cannot add more either. */
    ctl = control_up(key);
    send_quarantine(ctl, 0x77, "one more");
    WAIT_STAT(quarantines_refused, 3 + 17);
    cr_assert_eq(quarantines_in_force(), 64);
    nng_close(ctl);
    hub_down();
}

Test(hub_relay, quarantine_message_round_trips_and_every_cut_is_refused) {
    goblin__hubw_msg m, d;
    memset(&m, 0, sizeof m);
    m.type = GOBLIN__HUBW_QUARANTINE;
    for (int i = 0; i < 32; i++) m.identity[i] = (uint8_t)(i * 7 + 1);
    strcpy(m.reason_text, "bad\tresult"); /* the tab is sent as '?' */
    uint8_t b[GOBLIN__HUBW_MAX];
    size_t n;
    cr_assert_eq(goblin__hubw_encode(&m, b, &n), GOBLIN_OK);
    cr_assert_eq(n, (size_t)GOBLIN__HUBW_HEADER + 40 + 16); /* 10 bytes of reason, padded to 16 */
    cr_assert_eq(goblin__hubw_decode(b, n, &d, NULL, 0), GOBLIN_OK);
    cr_assert_eq(d.type, GOBLIN__HUBW_QUARANTINE);
    cr_assert_arr_eq(d.identity, m.identity, 32);
    cr_assert_str_eq(d.reason_text, "bad?result");
    for (size_t k = 0; k < n; k++) /* every shorter message: refused, never read past */
        cr_assert_neq(goblin__hubw_decode(b, k, &d, NULL, 0), GOBLIN_OK, "cut at %zu", k);
    for (size_t k = GOBLIN__HUBW_HEADER + 32; k < n; k++) { /* each non-identity byte flipped */
        if (k >= (size_t)GOBLIN__HUBW_HEADER + 40 && k < (size_t)GOBLIN__HUBW_HEADER + 50) continue; /* reason text */
        uint8_t c[GOBLIN__HUBW_MAX];
        memcpy(c, b, n);
        c[k] ^= 0x80;
        cr_assert_neq(goblin__hubw_decode(c, n, &d, NULL, 0), GOBLIN_OK, "byte %zu flipped", k);
    }
    memset(&m.reason_text, 0, sizeof m.reason_text); /* an empty reason is not sent */
    cr_assert_eq(goblin__hubw_encode(&m, b, &n), GOBLIN_EINVAL);
    memset(m.reason_text, 'x', GOBLIN__HUBW_REASON_MAX); /* the longest */
    cr_assert_eq(goblin__hubw_encode(&m, b, &n), GOBLIN_OK);
    cr_assert_eq(goblin__hubw_decode(b, n, &d, NULL, 0), GOBLIN_OK);
    cr_assert_eq(strlen(d.reason_text), (size_t)GOBLIN__HUBW_REASON_MAX);
}

/* A node's quarantine list (here its quarantine file, as a node restarted after catching
 * a worker has it) reaches the hub once the link is up, reported by the node's key. */
Test(hub_relay, a_linked_node_reports_its_quarantines, .timeout = 60) {
    hub_up("tcp", NULL);
    char key[GOBLIN_HUB_NODE_KEY_SIZE];
    int64_t kid;
    lab_key("lab@example.org", key, &kid);
    static const char fp1[] = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    char qpath[400];
    snprintf(qpath, sizeof qpath, "%s/quarantine.txt", dir);
    FILE *f = fopen(qpath, "w");
    cr_assert_not_null(f);
    fprintf(f, "%s\n", fp1);
    fclose(f);
    goblin_node_params p;
    goblin_node_params_default(&p);
    p.listen[0] = "tcp://127.0.0.1:0";
    p.n_listen = 1;
    p.quarantine_file = qpath;
    goblin_node *n = NULL;
    cr_assert_eq(goblin_node_new(&n, &p), GOBLIN_OK);
    cr_assert_eq(goblin_node_start(n), GOBLIN_OK);
    cr_assert_eq(link_node(n, key), GOBLIN_OK);
    WAIT_STAT(quarantines_recorded, 1);
    goblin_hub_quarantine q;
    memset(&q, 0, sizeof q);
    strcpy(q.subject, fp1);
    cr_assert_eq(goblin_hub_store_quarantine_each(goblin_hub_get_store(hub), false, find_q, &q), GOBLIN_OK);
    cr_assert_gt(q.id, 0);
    char who[64];
    snprintf(who, sizeof who, "node key %lld", (long long)kid);
    cr_assert_str_eq(q.reported_by, who);
    cr_assert_eq(quarantines_in_force(), 1);
    /* The operator lifts it: no longer in force (the node's own quarantine stands). */
    cr_assert_eq(goblin_hub_store_quarantine_lift(goblin_hub_get_store(hub), q.id, T0), GOBLIN_OK);
    cr_assert_eq(quarantines_in_force(), 0);
    cr_assert_eq(goblin_hub_store_quarantine_lift(goblin_hub_get_store(hub), q.id, T0), GOBLIN_ESTATE);
    /* The node's next link resends its list: the lift stands. */
    goblin_node_free(n);
    int64_t rep = hstats().quarantines_repeated;
    cr_assert_eq(goblin_node_new(&n, &p), GOBLIN_OK);
    cr_assert_eq(goblin_node_start(n), GOBLIN_OK);
    cr_assert_eq(link_node(n, key), GOBLIN_OK);
    WAIT_STAT(quarantines_repeated, rep + 1);
    cr_assert_eq(quarantines_in_force(), 0);
    cr_assert_eq(hstats().quarantines_recorded, 1);
    goblin_node_free(n);
    hub_down();
}

/* ---- one lab's quarantine, every lab's refusal ------------------------------------------------ */

static bool ended_one(void *arg) {
    (void)arg;
    return hstats().workers_ended_quarantined >= 1;
}

static void identity_bytes(const char *hex, uint8_t out[32]) {
    for (int i = 0; i < 32; i++) {
        unsigned v;
        cr_assert_eq(sscanf(hex + 2 * i, "%2x", &v), 1);
        out[i] = (uint8_t)v;
    }
}

/* Join through the hub with @p key; the answer's type (REFUSE's reason into *why). */
static int join_answer(goblin__wkey *key, goblin_err *why, char *text, size_t cap) {
    goblin__wire_msg hello = rt_raw_hello(1 << 24, false);
    nng_socket s = raw_dial(murl);
    goblin__wire_msg *r = rt_raw_join(s, &hello, key, NULL);
    cr_assert_not_null(r, "an answer comes: the node's or the hub's");
    int t = r->type;
    if (t == GOBLIN_WIRE_TYPE_REFUSE) {
        *why = r->body.refuse.reason;
        snprintf(text, cap, "%s", r->body.refuse.message ? r->body.refuse.message : "");
    }
    goblin__wire_msg_free(r);
    nng_close(s);
    return t;
}

/* A worker caught by lab a (reported on a's control connection) is refused by the hub
 * whichever lab it is lent to next, its live splice is ended, honest identities are not
 * touched, and the operator's lift (in the store, as the pages and the CLI do it) lets
 * it in again. */
Test(hub_relay, an_identity_quarantined_by_one_lab_is_refused_for_every_lab, .timeout = 120) {
    hub_up("tcp", NULL);
    char ka[GOBLIN_HUB_NODE_KEY_SIZE], kb[GOBLIN_HUB_NODE_KEY_SIZE];
    int64_t kid_a, kid_b;
    lab_key("a@example.org", ka, &kid_a);
    lab_key("b@example.org", kb, &kid_b);
    goblin_node *na = node_up(NULL), *nb = node_up(NULL);
    cr_assert_eq(link_node(na, ka), GOBLIN_OK);
    cr_assert_eq(link_node(nb, kb), GOBLIN_OK);
    for (int i = 0; i < 2000 && hstats().nodes_connected < 2; i++) sleep_ms(5);
    cr_assert_eq(hstats().nodes_connected, 2);
    /* A real worker with a key on disk joins through the hub. */
    char kdir[400];
    snprintf(kdir, sizeof kdir, "%s/wkey", dir);
    goblin_worker_params wp;
    goblin_worker_params_default(&wp);
    wp.connect[0] = murl;
    wp.n_connect = 1;
    wp.threads = 1;
    wp.config_dir = kdir;
    wset ws;
    memset(&ws, 0, sizeof ws);
    cr_assert_eq(goblin_worker_new(&ws.w[0], &wp), GOBLIN_OK);
    wruns[0] = (wrun){&ws, 0};
    pthread_create(&ws.th[0], NULL, wmain, &wruns[0]);
    ws.n = 1;
    char wfp[65];
    snprintf(wfp, sizeof wfp, "%s", goblin_worker_identity(ws.w[0]));
    for (int i = 0; i < 6000 && hstats().workers_lent < 1; i++) sleep_ms(10);
    cr_assert_eq(hstats().workers_lent, 1);
    goblin_node_stats sa, sb;
    for (int i = 0; i < 6000; i++) {
        goblin_node_stats_get(na, &sa);
        goblin_node_stats_get(nb, &sb);
        if (sa.workers_connected + sb.workers_connected == 1) break;
        sleep_ms(10);
    }
    cr_assert_eq(sa.workers_connected + sb.workers_connected, 1, "admitted by one lab");
    /* Lab a reports it (as its node does after a wrong result). */
    nng_socket ctl = control_up(ka);
    goblin__hubw_msg m;
    memset(&m, 0, sizeof m);
    m.type = GOBLIN__HUBW_QUARANTINE;
    identity_bytes(wfp, m.identity);
    strcpy(m.reason_text, "a wrong tile");
    send_hubw(ctl, &m);
    cr_assert(wait_for(ended_one, NULL), "the live splice is ended at once");
    nng_close(ctl);
    /* Until the hub sees that control connection end it may lend a worker to it, which
     * would never attach (the ticket's 10 s): wait for the two real nodes alone. */
    for (int i = 0; i < 2000 && hstats().nodes_connected > 2; i++) sleep_ms(5);
    cr_assert_eq(hstats().nodes_connected, 2, "the hand-made control connection is gone");
    /* Redialing, the worker is refused by the hub and stops: EAUTH, whichever lab. */
    pthread_join(ws.th[0], NULL);
    ws.n = 0;
    cr_assert_eq(ws.rc[0], GOBLIN_EAUTH);
    goblin_worker_free(ws.w[0]);
    cr_assert_geq(hstats().workers_refused_quarantined, 1);
    /* The same key by hand, four times (the hub lends each to the lab below its share):
     * refused every time, with the hub's reason; neither lab admits it. */
    goblin__wkey *caught = NULL, *honest = NULL;
    goblin_errbuf eb;
    char kpath[500];
    snprintf(kpath, sizeof kpath, "%s", kdir);
    bool made = false;
    cr_assert_eq(goblin__wkey_load_or_create(kpath, &caught, &made, eb.message, sizeof eb.message), GOBLIN_OK);
    cr_assert(!made, "the worker's own key, loaded");
    cr_assert_str_eq(goblin__wkey_fingerprint(caught), wfp);
    int64_t before = hstats().workers_refused_quarantined;
    for (int k = 0; k < 4; k++) {
        goblin_err why = GOBLIN_OK;
        char text[300] = "";
        cr_assert_eq(join_answer(caught, &why, text, sizeof text), GOBLIN_WIRE_TYPE_REFUSE, "attempt %d", k);
        cr_assert_eq(why, GOBLIN_EAUTH);
        cr_assert(strstr(text, "quarantined on the network"), "%s", text);
    }
    cr_assert_eq(hstats().workers_refused_quarantined, before + 4);
    goblin_node_stats_get(na, &sa);
    goblin_node_stats_get(nb, &sb);
    cr_assert_eq(sa.workers_connected + sb.workers_connected, 0);
    /* Another identity is not touched. */
    cr_assert_eq(goblin__wkey_ephemeral(&honest, NULL, 0), GOBLIN_OK);
    goblin_err why = GOBLIN_OK;
    char text[300] = "";
    cr_assert_eq(join_answer(honest, &why, text, sizeof text), GOBLIN_WIRE_TYPE_HELLO_ACK, "%s", text);
    /* The operator lifts it: within the hub's refresh, the key is lent again. */
    goblin_hub_quarantine q;
    memset(&q, 0, sizeof q);
    strcpy(q.subject, wfp);
    cr_assert_eq(goblin_hub_store_quarantine_each(goblin_hub_get_store(hub), false, find_q, &q), GOBLIN_OK);
    cr_assert_gt(q.id, 0);
    cr_assert_eq(goblin_hub_store_quarantine_lift(goblin_hub_get_store(hub), q.id, T0), GOBLIN_OK);
    int t = GOBLIN_WIRE_TYPE_REFUSE;
    for (int k = 0; k < 100 && t == GOBLIN_WIRE_TYPE_REFUSE; k++) {
        t = join_answer(caught, &why, text, sizeof text);
        if (t == GOBLIN_WIRE_TYPE_REFUSE) sleep_ms(100);
    }
    cr_assert_eq(t, GOBLIN_WIRE_TYPE_HELLO_ACK, "lifted: %s", text);
    goblin__wkey_free(caught);
    goblin__wkey_free(honest);
    goblin_node_free(nb);
    goblin_node_free(na);
    hub_down();
}

/* Hostile first frames after the HELLO go on unread (the node judges them): a huge
 * length, a non-PROOF, a PROOF with a garbage key. Nothing is refused by the hub for
 * them and the hub stays up. */
Test(hub_relay, a_worker_that_does_not_send_a_proof_is_the_nodes_to_judge, .timeout = 60) {
    hub_up("tcp", NULL);
    char key[GOBLIN_HUB_NODE_KEY_SIZE];
    int64_t kid;
    lab_key("lab@example.org", key, &kid);
    rt_log lg = {.mu = PTHREAD_MUTEX_INITIALIZER};
    goblin_node *node = node_up(&lg);
    cr_assert_eq(link_node(node, key), GOBLIN_OK);
    for (int k = 0; k < 3; k++) {
        goblin__wire_msg hello = rt_raw_hello(1 << 24, false);
        nng_socket s = raw_dial(murl);
        uint8_t *buf;
        size_t len;
        cr_assert_eq(goblin__wire_encode(&hello, &buf, &len), GOBLIN_OK);
        cr_assert_eq(nng_send(s, buf, len, 0), 0);
        goblin_buffer_free(buf);
        goblin__wire_msg *c = rt_raw_next(s);
        cr_assert_not_null(c);
        cr_assert_eq(c->type, GOBLIN_WIRE_TYPE_CHALLENGE);
        goblin__wire_msg_free(c);
        if (k == 0) { /* a HEARTBEAT instead of the PROOF */
            goblin__wire_msg hb;
            goblin__wire_msg_init(&hb, GOBLIN_WIRE_TYPE_HEARTBEAT);
            cr_assert_eq(goblin__wire_encode(&hb, &buf, &len), GOBLIN_OK);
            cr_assert_eq(nng_send(s, buf, len, 0), 0);
            goblin_buffer_free(buf);
        } else if (k == 1) { /* 64 KiB of zeros */
            uint8_t *z = calloc(1, 65536);
            cr_assert_eq(nng_send(s, z, 65536, 0), 0);
            free(z);
        } else { /* a PROOF whose key is garbage */
            uint8_t junk[GOBLIN__WKEY_PUBLIC_BYTES], sig[8] = {1, 2, 3};
            memset(junk, 0x5a, sizeof junk);
            goblin__wire_msg m;
            goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_PROOF);
            m.body.proof.key = junk;
            m.body.proof.key_len = sizeof junk;
            m.body.proof.sig = sig;
            m.body.proof.sig_len = sizeof sig;
            cr_assert_eq(goblin__wire_encode(&m, &buf, &len), GOBLIN_OK);
            cr_assert_eq(nng_send(s, buf, len, 0), 0);
            goblin_buffer_free(buf);
        }
        /* The node got the bytes and judged them: its log says so. */
        static const char *const said[3] = {"HEARTBEAT before HELLO", "malformed message", "identity proof failed"};
        bool seen = false;
        for (int i = 0; i < 2000 && !(seen = rt_log_has(&lg, said[k])); i++) sleep_ms(10);
        cr_assert(seen, "case %d: the node logs '%s'", k, said[k]);
        if (k == 2) { /* refused by the node, not the hub */
            goblin__wire_msg *r = rt_raw_next(s);
            cr_assert_not_null(r);
            cr_assert_eq(r->type, GOBLIN_WIRE_TYPE_REFUSE);
            cr_assert_null(strstr(r->body.refuse.message, "goblin-hub"), "%s", r->body.refuse.message);
            goblin__wire_msg_free(r);
        }
        nng_close(s);
    }
    cr_assert_eq(hstats().workers_refused_quarantined, 0);
    goblin_node_stats ns;
    goblin_node_stats_get(node, &ns);
    cr_assert_eq(ns.workers_connected, 0);
    goblin_node_free(node);
    hub_down();
}

/* ---- origins: a relayed worker is where its own connection comes from ------------------------ */

Test(hub_relay, open_carries_the_origin_canonically) {
    goblin__hubw_msg m, d;
    uint8_t b[GOBLIN__HUBW_MAX];
    size_t n;
    static const struct {
        uint8_t kind, used;
    } ok[3] = {{0, 0}, {4, 3}, {6, 6}};
    for (int k = 0; k < 3; k++) {
        memset(&m, 0, sizeof m);
        m.type = GOBLIN__HUBW_OPEN;
        memset(m.ticket, 0x3c, sizeof m.ticket);
        m.origin_kind = ok[k].kind;
        for (int i = 0; i < ok[k].used; i++) m.origin[i] = (uint8_t)(0xa0 + i);
        cr_assert_eq(goblin__hubw_encode(&m, b, &n), GOBLIN_OK);
        cr_assert_eq(n, (size_t)GOBLIN__HUBW_HEADER + 40);
        cr_assert_eq(goblin__hubw_decode(b, n, &d, NULL, 0), GOBLIN_OK);
        cr_assert_eq(d.origin_kind, ok[k].kind);
        cr_assert_arr_eq(d.origin, m.origin, 7);
        cr_assert_arr_eq(d.ticket, m.ticket, 32);
        /* A byte past the prefix, or another kind: refused both ways. */
        uint8_t c[GOBLIN__HUBW_MAX];
        memcpy(c, b, n);
        c[GOBLIN__HUBW_HEADER + 32 + 1 + ok[k].used] = 1;
        cr_assert_eq(goblin__hubw_decode(c, n, &d, NULL, 0), GOBLIN_EFORMAT, "kind %u", ok[k].kind);
        m.origin[ok[k].used] = 1;
        cr_assert_eq(goblin__hubw_encode(&m, b, &n), GOBLIN_EINVAL);
    }
    memset(&m, 0, sizeof m);
    m.type = GOBLIN__HUBW_OPEN;
    m.origin_kind = 5;
    cr_assert_eq(goblin__hubw_encode(&m, b, &n), GOBLIN_EINVAL);
    m.origin_kind = 4;
    cr_assert_eq(goblin__hubw_encode(&m, b, &n), GOBLIN_OK);
    b[GOBLIN__HUBW_HEADER + 32] = 5;
    cr_assert_eq(goblin__hubw_decode(b, n, &d, NULL, 0), GOBLIN_EFORMAT);
    for (size_t k = 0; k < n; k++) cr_assert_neq(goblin__hubw_decode(b, k, &d, NULL, 0), GOBLIN_OK, "cut at %zu", k);
}

static bool origin_of_identity(goblin_node *node, const char *fp, char *out, size_t cap) {
    for (int32_t i = 0; i < 16; i++) {
        goblin_node_worker_stats w;
        if (goblin_node_worker_stats_get(node, i, &w) != GOBLIN_OK) break;
        if (!strcmp(w.identity, fp)) {
            snprintf(out, cap, "%s", w.origin);
            return true;
        }
    }
    return false;
}

/* Every relayed worker reaches the node from the hub's address; the origin rule must see
 * the volunteer's own /24 or /48 instead, as the hub saw it (and only that prefix: the
 * lab does not learn the full address). Loopback stands in for the volunteers' machines
 * through the hub's test-control op. */
Test(hub_relay, a_relayed_workers_origin_is_the_volunteers_not_the_hubs, .timeout = 60) {
    hub_up("tcp", NULL);
    char key[GOBLIN_HUB_NODE_KEY_SIZE];
    int64_t kid;
    lab_key("lab@example.org", key, &kid);
    goblin_node *node = node_up(NULL);
    cr_assert_eq(link_node(node, key), GOBLIN_OK);
    static const struct {
        const char *ip, *origin;
    } cases[3] = {{"10.9.8.7", "10.9.8.0/24"}, {"2001:db8:5:6::1", "2001:db8:5::/48"}, {NULL, "local"}};
    nng_socket socks[3];
    goblin__wkey *keys[3];
    for (int k = 0; k < 3; k++) {
        cr_assert_eq(goblin_test_control(GOBLIN_TESTCTRL_HUB_WORKER_ADDR, hub, cases[k].ip), GOBLIN_OK);
        cr_assert_eq(goblin__wkey_ephemeral(&keys[k], NULL, 0), GOBLIN_OK);
        goblin__wire_msg hello = rt_raw_hello(1 << 24, false);
        socks[k] = raw_dial(murl);
        goblin__wire_msg *r = rt_raw_join(socks[k], &hello, keys[k], NULL);
        cr_assert_not_null(r);
        cr_assert_eq(r->type, GOBLIN_WIRE_TYPE_HELLO_ACK);
        goblin__wire_msg_free(r);
        char o[64] = "";
        cr_assert(origin_of_identity(node, goblin__wkey_fingerprint(keys[k]), o, sizeof o));
        cr_assert_str_eq(o, cases[k].origin, "case %d", k);
    }
    cr_assert_eq(goblin_test_control(GOBLIN_TESTCTRL_HUB_WORKER_ADDR, hub, "10.1.2"), GOBLIN_EINVAL);
    cr_assert_eq(goblin_test_control(GOBLIN_TESTCTRL_HUB_WORKER_ADDR, (goblin_hub *)NULL, "10.1.2.3"), GOBLIN_EINVAL);
    for (int k = 0; k < 3; k++) {
        nng_close(socks[k]);
        goblin__wkey_free(keys[k]);
    }
    goblin_node_free(node);
    hub_down();
}

/* ---- work: what the volunteers' machines did ------------------------------------------------- */

static bool some_work(void *arg) {
    goblin_node *node = arg;
    goblin_node_hub_stats hs;
    return goblin_node_hub_stats_get(node, &hs) == GOBLIN_OK && hs.work_reports >= 1 && hstats().work_reports >= 1;
}

/* A lab node tells the hub what each lent worker did (WORK), kept under the identity for
 * its volunteer's page; the hub takes it only for identities it lent to that node: a
 * report about any other identity is dropped, and a malformed one closes the control
 * connection. The node learns the linked volunteer as the identity's owner (OWNER). */
Test(hub_relay, work_reports_come_only_for_workers_lent_to_that_node, .timeout = 120) {
    hub_up("tcp", NULL);
    char ka[GOBLIN_HUB_NODE_KEY_SIZE], kb[GOBLIN_HUB_NODE_KEY_SIZE];
    int64_t kid;
    lab_key("a@example.org", ka, &kid);
    lab_key("b@example.org", kb, &kid);
    goblin_node *node = node_up(NULL);
    cr_assert_eq(link_node(node, ka), GOBLIN_OK);
    /* A volunteer's worker, its identity linked to the volunteer's account first. */
    goblin_hub_account vol;
    cr_assert_eq(goblin_hub_store_account_ensure(goblin_hub_get_store(hub), "vol@example.org", T0, &vol), GOBLIN_OK);
    wset ws;
    memset(&ws, 0, sizeof ws);
    goblin_worker_params wp;
    goblin_worker_params_default(&wp);
    wp.connect[0] = murl;
    wp.n_connect = 1;
    wp.threads = 1;
    cr_assert_eq(goblin_worker_new(&ws.w[0], &wp), GOBLIN_OK);
    const char *wid = goblin_worker_identity(ws.w[0]);
    cr_assert_eq(goblin_hub_store_link_add(goblin_hub_get_store(hub), vol.id, wid, T0), GOBLIN_OK);
    wruns[0] = (wrun){&ws, 0};
    pthread_create(&ws.th[0], NULL, wmain, &wruns[0]);
    ws.n = 1;
    cr_assert(rt_wait_workers(node, 1));
    matmul_checked(node, 48, 40, 32, 77);
    cr_assert(wait_for(some_work, node), "the node reports the worker's work");
    /* Every accepted result is told, once, and kept under the identity. */
    int64_t acc = accepted_from_workers(node);
    for (int i = 0; i < 6000 && hstats().results_accepted < acc; i++) sleep_ms(10);
    cr_assert_eq(hstats().results_accepted, acc);
    cr_assert_geq(hstats().tasks_reported, acc);
    cr_assert_eq(hstats().results_rejected, 0);
    cr_assert_eq(hstats().work_reports_refused, 0);
    goblin_hub_link l;
    cr_assert_eq(goblin_hub_store_link_get(goblin_hub_get_store(hub), wid, &l), GOBLIN_OK);
    cr_assert_eq(l.account_id, vol.id);
    cr_assert_eq(l.accepted, acc);
    cr_assert_eq(l.rejected, 0);
    cr_assert_geq(l.tasks, acc);
    /* The node was told the owner: the worker's row names the volunteer's account. */
    cr_assert_geq(hstats().owners_told, 1);
    goblin_node_hub_stats hs;
    cr_assert_eq(goblin_node_hub_stats_get(node, &hs), GOBLIN_OK);
    cr_assert_geq(hs.owners_named, 1);
    goblin_node_worker_stats row;
    cr_assert_eq(goblin_node_worker_stats_get(node, 0, &row), GOBLIN_OK);
    char want[64];
    snprintf(want, sizeof want, "hub account %lld", (long long)vol.id);
    cr_assert_str_eq(row.owner, want);
    /* Lab b's node (a raw control connection) reports work of a's worker and of a
     * made-up identity: neither was lent to it. */
    nng_socket ctl = control_up(kb);
    goblin__hubw_msg m;
    memset(&m, 0, sizeof m);
    m.type = GOBLIN__HUBW_WORK;
    identity_bytes(goblin_worker_identity(ws.w[0]), m.identity);
    m.tasks = m.accepted = 1000000;
    send_hubw(ctl, &m);
    memset(m.identity, 0x42, sizeof m.identity);
    send_hubw(ctl, &m);
    WAIT_STAT(work_reports_refused, 2);
    cr_assert_eq(hstats().nodes_connected, 2, "b stays linked");
    cr_assert_eq(goblin_hub_store_link_get(goblin_hub_get_store(hub), wid, &l), GOBLIN_OK);
    cr_assert_eq(l.accepted, acc, "lab b wrote nothing into a's volunteer's counts");
    /* A WORK with its reserved bytes set closes b's control connection. */
    uint8_t b[GOBLIN__HUBW_MAX];
    size_t n;
    cr_assert_eq(goblin__hubw_encode(&m, b, &n), GOBLIN_OK);
    b[n - 1] = 1;
    cr_assert_eq(nng_send(ctl, b, n, 0), 0);
    for (int i = 0; i < 2000 && hstats().nodes_connected > 1; i++) sleep_ms(5);
    cr_assert_eq(hstats().nodes_connected, 1);
    nng_close(ctl);
    workers_down(&ws);
    goblin_node_free(node);
    hub_down();
}

/* ---- owners: one volunteer's machines never check each other ---------------------------------- */

/* y = x . w (f64), one row a task, every task replicated (REPLICATE, min 1): run on @p node
 * through two lent workers whose identities the hub links to accounts @p acc_a and
 * @p acc_b; the node's counters after it. The product is checked against plain loops. */
static goblin_node_stats replicated_rows(int64_t acc_a, int64_t acc_b) {
    hub_up("tcp", NULL);
    char key[GOBLIN_HUB_NODE_KEY_SIZE];
    int64_t kid;
    lab_key("lab@example.org", key, &kid);
    goblin_hub_store *s = goblin_hub_get_store(hub);
    for (int64_t a = 1; a <= 2; a++) {
        char email[64];
        snprintf(email, sizeof email, "vol%lld@example.org", (long long)a);
        goblin_hub_account acc;
        cr_assert_eq(goblin_hub_store_account_ensure(s, email, T0, &acc), GOBLIN_OK);
    }
    goblin_node_params p;
    goblin_node_params_default(&p);
    p.listen[0] = "tcp://127.0.0.1:0";
    p.n_listen = 1;
    p.probation_results = 0;
    p.audit_rate = 0.0;
    goblin_node *node = NULL;
    cr_assert_eq(goblin_node_new(&node, &p), GOBLIN_OK);
    cr_assert_eq(goblin_node_start(node), GOBLIN_OK);
    cr_assert_eq(link_node(node, key), GOBLIN_OK);
    wset ws;
    memset(&ws, 0, sizeof ws);
    int64_t owners[2] = {acc_a, acc_b};
    goblin_hub_account who;
    for (int i = 0; i < 2; i++) {
        goblin_worker_params wp;
        goblin_worker_params_default(&wp);
        wp.connect[0] = murl;
        wp.n_connect = 1;
        wp.threads = 1;
        cr_assert_eq(goblin_worker_new(&ws.w[i], &wp), GOBLIN_OK);
        char email[64];
        snprintf(email, sizeof email, "vol%lld@example.org", (long long)owners[i]);
        cr_assert_eq(goblin_hub_store_account_ensure(s, email, T0, &who), GOBLIN_OK);
        cr_assert_eq(goblin_hub_store_link_add(s, who.id, goblin_worker_identity(ws.w[i]), T0), GOBLIN_OK);
        wruns[i] = (wrun){&ws, i};
        pthread_create(&ws.th[i], NULL, wmain, &wruns[i]);
        ws.n = i + 1;
    }
    cr_assert(rt_wait_workers(node, 2));
    goblin_node_hub_stats hs;
    for (int i = 0; i < 6000; i++) { /* both owners known before the job */
        cr_assert_eq(goblin_node_hub_stats_get(node, &hs), GOBLIN_OK);
        if (hs.owners_named >= 2) break;
        sleep_ms(10);
    }
    cr_assert_eq(hs.owners_named, 2);
    enum { ROWS = 24 };
    goblin_graph *g = NULL;
    cr_assert_eq(goblin_graph_new(&g), GOBLIN_OK);
    int64_t sx[2] = {ROWS, 4}, sw[2] = {4, 3}, sy[2] = {ROWS, 3};
    int32_t x, w, mm;
    cr_assert_eq(goblin_graph_input(g, GOBLIN_DTYPE_F64, 2, sx, &x), GOBLIN_OK);
    cr_assert_eq(goblin_graph_input(g, GOBLIN_DTYPE_F64, 2, sw, &w), GOBLIN_OK);
    int32_t i2[2] = {x, w};
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_MATMUL, i2, 2, NULL, 0, &mm), GOBLIN_OK);
    cr_assert_eq(goblin_graph_output(g, mm), GOBLIN_OK);
    static double xv[ROWS * 4], wv[12], yv[ROWS * 3];
    for (int i = 0; i < ROWS * 4; i++) xv[i] = 0.5 + (i % 7) * 0.125;
    for (int i = 0; i < 12; i++) wv[i] = 1.0 + (i % 5) * 0.25;
    memset(yv, 0, sizeof yv);
    goblin_tensor in[2], out[1];
    goblin_tensor_init(&in[0], GOBLIN_DTYPE_F64, 2, sx, xv);
    goblin_tensor_init(&in[1], GOBLIN_DTYPE_F64, 2, sw, wv);
    goblin_tensor_init(&out[0], GOBLIN_DTYPE_F64, 2, sy, yv);
    goblin_graph_job_params jp;
    goblin_graph_job_params_default(&jp);
    jp.chunk_rows = 1;
    jp.verify = GOBLIN_VERIFY_REPLICATE;
    jp.min_replication = 1.0;
    goblin_job *job = rt_run_graph(node, g, in, 2, out, 1, &jp);
    goblin_job_free(job);
    for (int r = 0; r < ROWS; r++) /* exact: short sums of dyadic values */
        for (int c = 0; c < 3; c++) {
            double acc = 0;
            for (int q = 0; q < 4; q++) acc += xv[r * 4 + q] * wv[q * 3 + c];
            cr_assert_eq(yv[r * 3 + c], acc, "y[%d][%d]", r, c);
        }
    goblin_node_stats st;
    goblin_node_stats_get(node, &st);
    goblin_graph_free(g);
    workers_down(&ws);
    goblin_node_free(node);
    hub_down();
    return st;
}

Test(hub_relay, one_volunteers_machines_never_check_each_other, .timeout = 120) {
    goblin_node_stats st = replicated_rows(1, 1);
    cr_assert_eq(st.replicas_agreed, 0, "two machines of one volunteer agreed %lld times", (long long)st.replicas_agreed);
    cr_assert_eq(st.node_recomputed, 24, "the node checked every task itself");
    cr_assert_eq(st.results_rejected, 0);
}

Test(hub_relay, two_volunteers_machines_check_each_other, .timeout = 120) {
    goblin_node_stats st = replicated_rows(1, 2);
    cr_assert_gt(st.replicas_agreed, 0, "independent owners replicate");
    cr_assert_lt(st.node_recomputed, 24);
    cr_assert_eq(st.results_rejected, 0);
}

Test(hub_relay, identity_text_round_trips_and_refuses_other_text) {
    uint8_t id[32], back[32];
    for (int i = 0; i < 32; i++) id[i] = (uint8_t)(i * 37 + 5);
    char hex[65];
    goblin__hubw_identity_hex(id, hex);
    char want[65];
    for (int i = 0; i < 32; i++) sprintf(want + 2 * i, "%02x", id[i]); /* the C library's spelling */
    cr_assert_str_eq(hex, want);
    cr_assert(goblin__hubw_identity_parse(hex, back));
    cr_assert_arr_eq(back, id, 32);
    memset(back, 0x77, sizeof back);
    char bad[66];
    static const char *const cases[] = {"", "ab", "owner 7"};
    for (size_t k = 0; k < 3; k++) cr_assert(!goblin__hubw_identity_parse(cases[k], back), "%s", cases[k]);
    snprintf(bad, sizeof bad, "%s", hex);
    bad[10] = 'A'; /* upper case: not a fingerprint's text */
    cr_assert(!goblin__hubw_identity_parse(bad, back));
    snprintf(bad, sizeof bad, "%s0", hex); /* 65 digits */
    cr_assert(!goblin__hubw_identity_parse(bad, back));
    bad[63] = 'g';
    bad[64] = 0;
    cr_assert(!goblin__hubw_identity_parse(bad, back));
    for (int i = 0; i < 32; i++) cr_assert_eq(back[i], 0x77, "untouched on refusal");
    cr_assert(!goblin__hubw_identity_parse(NULL, back));
}
