/* tests/unit/test_hub_intro.c - direct introductions (docs/hub.md, "Direct
 * introductions"): a lab node that offers an address its lent workers can reach gets
 * them introduced instead of relayed. Real hub, nodes and workers on loopback: a verified
 * matmul with no byte through the relay (tcp:// and TLS, the node's certificate pinned
 * from the introduction); a ticket admits only the identity the hub checked, once; an
 * unreachable address falls back to the relay; the operator's quarantine and the fair
 * share take introduced workers back; hostile introductions are not followed; the new
 * messages of both protocols round-trip and every cut is refused. */
#include <criterion/criterion.h>
#include <goblin/tls.h>

#include "hostile_peer.h"
#include "hub/hub_impl.h"
#include "hub_machines_util.h"
#include "net/transport.h"
#include "net/worker_key.h"
#include "proto/wire.h"

/* A node listening on tcp:// (or tls+tcp:// with an identity made in @p tls_dir) at a
 * free loopback port, its URL into @p url; a join token when @p token (so that only a
 * ticket or the token admits). */
static goblin_node *direct_node_up(char *url, size_t cap, const char *tls_dir, const char *token) {
    static goblin_tls_identity id;
    goblin_node_params p;
    goblin_node_params_default(&p);
    snprintf(url, cap, "%s://127.0.0.1:%d", tls_dir ? "tls+tcp" : "tcp", hp_free_port());
    p.listen[0] = url;
    p.n_listen = 1;
    p.probation_results = 0;
    if (tls_dir) {
        goblin_errbuf err;
        cr_assert_eq(goblin_tls_init_dir(tls_dir, NULL, &id, &err), GOBLIN_OK, "%s", err.message);
        p.cert_file = id.cert_path;
        p.key_file = id.key_path;
    }
    if (token) {
        p.join_token = (const uint8_t *)token;
        p.token_len = (uint32_t)strlen(token);
    }
    goblin_node *n = NULL;
    cr_assert_eq(goblin_node_new(&n, &p), GOBLIN_OK);
    cr_assert_eq(goblin_node_start(n), GOBLIN_OK);
    return n;
}

static bool offer_taken(void *arg) { return hstats().nodes_direct >= *(int64_t *)arg; }

/* Link @p n offering @p direct, and wait until the hub has the offer: it comes after
 * NODE_ACK, and a worker lent before the hub reads it is relayed. */
static goblin_err link_direct(goblin_node *n, const char *key, const char *direct) {
    goblin_node_hub_params hp;
    goblin_node_hub_params_default(&hp);
    hp.url = murl;
    hp.key = key;
    hp.direct_url = direct;
    if (!strncmp(murl, "tls+", 4)) hp.fingerprint = fp;
    int64_t want = hstats().nodes_direct + 1;
    goblin_err e = goblin_node_hub_connect(n, &hp);
    if (!e) cr_assert(wait_for(offer_taken, &want), "the hub took the direct address");
    return e;
}

/* An approved lab whose node (tcp://, a join token when @p token) is linked to the hub
 * offering its own address for introductions, or with @p nowhere an address where
 * nothing listens (picked once the node listens: a free port asked for before could be
 * the one the node then gets); its URL into @p url. */
static goblin_node *direct_lab(char *url, size_t cap, const char *token, bool nowhere) {
    char key[GOBLIN_HUB_NODE_KEY_SIZE], offer[128];
    int64_t kid;
    lab_key("lab@example.org", key, &kid);
    goblin_node *node = direct_node_up(url, cap, NULL, token);
    snprintf(offer, sizeof offer, "%s", url);
    while (nowhere && !strcmp(offer, url)) snprintf(offer, sizeof offer, "tcp://127.0.0.1:%d", hp_free_port());
    cr_assert_eq(link_direct(node, key, offer), GOBLIN_OK);
    return node;
}

static goblin_node_hub_stats lstats(goblin_node *n) {
    goblin_node_hub_stats s;
    cr_assert_eq(goblin_node_hub_stats_get(n, &s), GOBLIN_OK);
    return s;
}

typedef struct direct_goal {
    goblin_node *node;
    int64_t want;
} direct_goal;
static bool direct_now(void *arg) {
    direct_goal *g = arg;
    goblin_node_hub_stats s;
    return goblin_node_hub_stats_get(g->node, &s) == GOBLIN_OK && s.workers_direct == g->want &&
           hstats().workers_direct == g->want;
}

static goblin_err count_direct(void *ctx, const goblin_hub_machine *m) {
    if (!m->node && m->direct && m->identity[0] && m->lab > 0) ++*(int *)ctx;
    return GOBLIN_OK;
}

static void introduced_matmul(const char *scheme) {
    hub_up(scheme, NULL);
    char key[GOBLIN_HUB_NODE_KEY_SIZE], url[128], tdir[300];
    int64_t kid;
    lab_key("lab@example.org", key, &kid);
    snprintf(tdir, sizeof tdir, "%s/node-tls", dir);
    goblin_node *node = direct_node_up(url, sizeof url, strcmp(scheme, "tcp") ? tdir : NULL, NULL);
    cr_assert_eq(link_direct(node, key, url), GOBLIN_OK);
    wset ws;
    workers_up(&ws, 2);
    direct_goal g = {node, 2};
    cr_assert(wait_for(direct_now, &g), "both workers dial the node themselves (node %lld, hub %lld direct)",
              (long long)lstats(node).workers_direct, (long long)hstats().workers_direct);
    cr_assert(rt_wait_workers(node, 2));
    matmul_checked(node, 96, 80, 72, 21);
    cr_assert_gt(accepted_from_workers(node), 0, "the introduced workers computed tiles");
    goblin_hub_machines_stats st = hstats();
    cr_assert_eq(st.bytes_relayed, 0, "no byte went through the relay");
    cr_assert_geq(st.workers_introduced, 2);
    cr_assert_eq(st.workers_lent, 0, "nothing spliced");
    int64_t lent = -1;
    cr_assert_eq(goblin_hub_machines_lab_lent(hub, lstats(node).lab, &lent), GOBLIN_OK);
    cr_assert_eq(lent, 2, "introduced workers count in the lab's share");
    int listed = 0;
    cr_assert_eq(goblin_hub_machines_each(hub, 16, count_direct, &listed), GOBLIN_OK);
    cr_assert_eq(listed, 2, "the operator's list shows both, introduced, with identity and lab");
    /* The node knows each worker by its own key, which the hub checked first. */
    int found = 0;
    goblin_node_worker_stats w;
    for (int64_t i = 0; goblin_node_worker_stats_get(node, i, &w) == GOBLIN_OK; i++)
        for (int j = 0; j < 2; j++) found += !strcmp(w.identity, goblin_worker_identity(ws.w[j]));
    cr_assert_eq(found, 2);
    for (int j = 0; j < 2; j++) {
        goblin_worker_stats s;
        goblin_worker_stats_get(ws.w[j], &s);
        cr_assert_geq(s.introductions, 1);
        cr_assert_eq(s.introductions_failed, 0);
    }
    workers_down(&ws);
    goblin_node_free(node);
    hub_down();
}

Test(hub_intro, introduced_workers_compute_without_the_relay_tcp, .timeout = 120) { introduced_matmul("tcp"); }

Test(hub_intro, introduced_workers_pin_the_nodes_certificate_tls, .timeout = 120) { introduced_matmul("tls+tcp"); }

/* ---- tickets ---------------------------------------------------------------------------- */

/* A raw worker with key @p k asks the hub (offering to follow an introduction) and
 * returns the INTRODUCE it gets (the caller frees it). */
static goblin__wire_msg *introduction_for(goblin__wkey *k) {
    goblin__wire_msg hello = rt_raw_hello(1 << 24, false);
    hello.body.hello.backends |= GOBLIN_WIRE_CAP_INTRO;
    nng_socket s = raw_dial(murl);
    goblin__wire_msg *r = rt_raw_join(s, &hello, k, NULL);
    cr_assert_not_null(r, "the hub answers the PROOF");
    cr_assert_eq(r->type, GOBLIN_WIRE_TYPE_INTRODUCE, "an INTRODUCE, got %s", goblin__wire_type_name(r->type));
    nng_close(s);
    return r;
}

/* Join node @p url presenting @p ticket (32 bytes) as the token, proving key @p k;
 * the node's answer type (REFUSE's text into @p text). */
static int join_with_ticket(const char *url, const uint8_t *ticket, goblin__wkey *k, char *text, size_t cap) {
    goblin__wire_msg hello = rt_raw_hello(1 << 24, false);
    hello.body.hello.token = ticket;
    hello.body.hello.token_len = GOBLIN_WIRE_TICKET_BYTES;
    nng_socket s = raw_dial(url);
    goblin__wire_msg *r = rt_raw_join(s, &hello, k, NULL);
    cr_assert_not_null(r);
    int t = r->type;
    text[0] = 0;
    if (t == GOBLIN_WIRE_TYPE_REFUSE) snprintf(text, cap, "%s", r->body.refuse.message ? r->body.refuse.message : "");
    goblin__wire_msg_free(r);
    nng_close(s);
    return t;
}

static goblin__wkey *key_in(const char *sub) {
    char d[400];
    snprintf(d, sizeof d, "%s/%s", dir, sub);
    goblin__wkey *k = NULL;
    bool created = false;
    cr_assert_eq(goblin__wkey_load_or_create(d, &k, &created, NULL, 0), GOBLIN_OK);
    return k;
}

Test(hub_intro, a_ticket_admits_only_the_identity_the_hub_checked_once, .timeout = 120) {
    hub_up("tcp", NULL);
    char url[128], text[600];
    goblin_node *node = direct_lab(url, sizeof url, "the-node-own-join-token", false);
    goblin__wkey *ka = key_in("ka"), *kb = key_in("kb");
    /* The hub checked A's PROOF and hands A a ticket and the node's address. */
    goblin__wire_msg *in = introduction_for(ka);
    cr_assert_str_eq(in->body.introduce.url, url, "the address the node offered");
    uint8_t zero[32] = {0};
    cr_assert(!memcmp(in->body.introduce.fingerprint, zero, 32), "tcp://: no certificate to pin");
    uint8_t ticket[GOBLIN_WIRE_TICKET_BYTES];
    memcpy(ticket, in->body.introduce.ticket, sizeof ticket);
    goblin__wire_msg_free(in);
    /* B holding A's ticket is refused at its PROOF, and the ticket is spent. */
    int t = join_with_ticket(url, ticket, kb, text, sizeof text);
    cr_assert_eq(t, GOBLIN_WIRE_TYPE_REFUSE, "another key with A's ticket: refused");
    cr_assert(strstr(text, "introduced identity"), "%s", text);
    cr_assert_eq(lstats(node).tickets_refused, 1);
    t = join_with_ticket(url, ticket, ka, text, sizeof text);
    cr_assert_eq(t, GOBLIN_WIRE_TYPE_REFUSE, "the ticket is single use, even for A");
    cr_assert(strstr(text, "join token"), "%s", text);
    /* A guessed ticket is nothing. */
    uint8_t guess[GOBLIN_WIRE_TICKET_BYTES];
    memset(guess, 0x5a, sizeof guess);
    cr_assert_eq(join_with_ticket(url, guess, ka, text, sizeof text), GOBLIN_WIRE_TYPE_REFUSE);
    /* A fresh introduction, used by A itself: admitted as the hub's worker. */
    in = introduction_for(ka);
    memcpy(ticket, in->body.introduce.ticket, sizeof ticket);
    goblin__wire_msg_free(in);
    goblin__wire_msg hello = rt_raw_hello(1 << 24, false);
    hello.body.hello.token = ticket;
    hello.body.hello.token_len = sizeof ticket;
    nng_socket s = raw_dial(url);
    goblin__wire_msg *r = rt_raw_join(s, &hello, ka, NULL);
    cr_assert_not_null(r);
    cr_assert_eq(r->type, GOBLIN_WIRE_TYPE_HELLO_ACK, "A with its own ticket joins");
    goblin__wire_msg_free(r);
    direct_goal g = {node, 1};
    cr_assert(wait_for(direct_now, &g), "one introduced worker, on both sides");
    /* It leaves: the node says LEFT, the hub's count drops. */
    nng_close(s);
    g.want = 0;
    cr_assert(wait_for(direct_now, &g), "gone on both sides");
    cr_assert_geq(hstats().direct_left, 1);
    goblin__wkey_free(ka);
    goblin__wkey_free(kb);
    goblin_node_free(node);
    hub_down();
}

/* ---- falling back, taking back ------------------------------------------------------------ */

Test(hub_intro, an_unreachable_address_falls_back_to_the_relay, .timeout = 120) {
    hub_up("tcp", NULL);
    char url[128];
    goblin_node *node = direct_lab(url, sizeof url, NULL, true);
    wset ws;
    workers_up(&ws, 2);
    cr_assert(rt_wait_workers(node, 2), "both workers reach the node, through the relay");
    matmul_checked(node, 64, 48, 40, 31);
    goblin_hub_machines_stats st = hstats();
    cr_assert_gt(st.bytes_relayed, 64 * 48 * 8, "the operands went through the relay");
    for (int j = 0; j < 2; j++) {
        goblin_worker_stats s;
        goblin_worker_stats_get(ws.w[j], &s);
        cr_assert_geq(s.introductions_failed, 1, "it tried the address first");
    }
    workers_down(&ws);
    goblin_node_free(node);
    hub_down();
}

typedef struct quarantined_goal {
    wset *ws;
} quarantined_goal;
static bool refused_at_hub(void *arg) {
    wset *ws = arg;
    goblin_worker_stats s;
    goblin_worker_stats_get(ws->w[0], &s);
    return hstats().workers_ended_quarantined >= 1 && hstats().workers_refused_quarantined >= 1 && s.refused >= 1;
}

Test(hub_intro, a_quarantine_ends_an_introduced_worker_and_it_is_refused_at_the_hub, .timeout = 120) {
    hub_up("tcp", NULL);
    char url[128];
    goblin_node *node = direct_lab(url, sizeof url, NULL, false);
    wset ws;
    workers_up(&ws, 1);
    direct_goal g = {node, 1};
    cr_assert(wait_for(direct_now, &g));
    /* The operator quarantines its identity (as another lab's report would). */
    int64_t qid;
    cr_assert_eq(goblin_hub_store_quarantine_add(goblin_hub_get_store(hub), goblin_worker_identity(ws.w[0]),
                                                 "caught elsewhere", "operator", T0, &qid),
                 GOBLIN_OK);
    cr_assert(wait_for(refused_at_hub, &ws), "ended at the node, refused at its next PROOF to the hub");
    g.want = 0;
    cr_assert(wait_for(direct_now, &g), "no introduced worker left");
    workers_down(&ws);
    goblin_node_free(node);
    hub_down();
}

static bool one_each(void *arg) {
    int64_t *labs = arg, a = -1, b = -1;
    goblin_hub_machines_lab_lent(hub, labs[0], &a);
    goblin_hub_machines_lab_lent(hub, labs[1], &b);
    return a == 1 && b == 1;
}

Test(hub_intro, the_fair_share_takes_an_introduced_worker_back, .timeout = 180) {
    hub_up("tcp", NULL);
    char ka[GOBLIN_HUB_NODE_KEY_SIZE], kb[GOBLIN_HUB_NODE_KEY_SIZE], url[128];
    int64_t kid;
    int64_t labs[2];
    labs[0] = lab_key("a@example.org", ka, &kid);
    labs[1] = lab_key("b@example.org", kb, &kid);
    goblin_node *na = direct_node_up(url, sizeof url, NULL, NULL);
    cr_assert_eq(link_direct(na, ka, url), GOBLIN_OK);
    wset ws;
    workers_up(&ws, 2);
    direct_goal g = {na, 2};
    cr_assert(wait_for(direct_now, &g), "lab a has both, introduced");
    goblin_node *nb = node_up(NULL); /* relay only */
    cr_assert_eq(link_node(nb, kb), GOBLIN_OK);
    cr_assert(wait_for(one_each, labs), "one taken back from a's node (END) and lent to b");
    cr_assert_geq(hstats().workers_taken_back, 1);
    cr_assert(rt_wait_workers(nb, 1));
    matmul_checked(nb, 48, 40, 32, 41);
    workers_down(&ws);
    goblin_node_free(na);
    goblin_node_free(nb);
    hub_down();
}

/* ---- hostile introductions ------------------------------------------------------------- */

/* A peer posing as the hub sends the worker an INTRODUCE it must not follow; the worker
 * ends that connection and its next HELLO does not offer to follow one. */
static void not_followed(const char *to, bool with_fp) {
    char url[128];
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", hp_free_port());
    nng_socket l;
    cr_assert_eq(nng_pair1_open(&l), 0);
    nng_socket_set_ms(l, NNG_OPT_RECVTIMEO, 20000);
    cr_assert_eq(nng_listen(l, url, NULL, 0), 0);
    goblin_worker_params wp;
    goblin_worker_params_default(&wp);
    wp.connect[0] = url;
    wp.n_connect = 1;
    wp.threads = 1;
    wset ws;
    memset(&ws, 0, sizeof ws);
    cr_assert_eq(goblin_worker_new(&ws.w[0], &wp), GOBLIN_OK);
    wruns[0] = (wrun){&ws, 0};
    pthread_create(&ws.th[0], NULL, wmain, &wruns[0]);
    ws.n = 1;
    goblin__wire_limits lim;
    goblin__wire_limits_default(&lim);
    goblin__wire_msg *h = rt_raw_next(l);
    cr_assert_not_null(h);
    cr_assert_eq(h->type, GOBLIN_WIRE_TYPE_HELLO);
    cr_assert(h->body.hello.backends & GOBLIN_WIRE_CAP_INTRO, "a worker offers to follow an introduction");
    goblin__wire_msg_free(h);
    goblin__wire_msg m;
    goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_INTRODUCE);
    memset(m.body.introduce.ticket, 7, GOBLIN_WIRE_TICKET_BYTES);
    if (with_fp) memset(m.body.introduce.fingerprint, 9, 32);
    m.body.introduce.url = to;
    uint8_t *buf;
    size_t len;
    cr_assert_eq(goblin__wire_encode(&m, &buf, &len), GOBLIN_OK);
    cr_assert_eq(nng_send(l, buf, len, 0), 0);
    goblin_buffer_free(buf);
    h = rt_raw_next(l); /* the worker ended that connection and dialed again */
    cr_assert_not_null(h, "the worker redials");
    cr_assert_eq(h->type, GOBLIN_WIRE_TYPE_HELLO);
    goblin_worker_stats s0;
    goblin_worker_stats_get(ws.w[0], &s0);
    cr_assert(!(h->body.hello.backends & GOBLIN_WIRE_CAP_INTRO), "the next HELLO asks to be relayed (%s; %lld connects)",
              to, (long long)s0.connects);
    cr_assert_eq(h->body.hello.token_len, 0, "no ticket went anywhere");
    goblin__wire_msg_free(h);
    goblin_worker_stats s;
    goblin_worker_stats_get(ws.w[0], &s);
    cr_assert_eq(s.introductions, 0, "%s was not dialed", to);
    workers_down(&ws);
    nng_close(l);
}

Test(hub_intro, plain_tcp_off_loopback_is_not_followed, .timeout = 60) { not_followed("tcp://192.0.2.7:7000", false); }
Test(hub_intro, ipc_and_inproc_are_not_followed, .timeout = 60) {
    not_followed("ipc:///tmp/goblin-not-a-node", false);
    not_followed("inproc://goblin-not-a-node", false);
}
Test(hub_intro, tls_without_a_fingerprint_is_not_followed, .timeout = 60) {
    not_followed("tls+tcp://127.0.0.1:7000", false);
}
Test(hub_intro, a_fingerprint_on_plain_tcp_is_not_followed, .timeout = 60) { not_followed("tcp://127.0.0.1:7000", true); }
Test(hub_intro, link_local_and_multicast_are_not_followed, .timeout = 60) {
    not_followed("tls+tcp://169.254.169.254:443", true);
    not_followed("tls+tcp://[fe80::1]:7000", true);
    not_followed("tls+tcp://224.0.0.1:7000", true);
    not_followed("tls+tcp://0.0.0.0:7000", true);
}

Test(hub_intro, address_scopes) {
    cr_assert_eq(goblin__transport_url_scope("tls+tcp://127.0.0.1:7"), GOBLIN__SCOPE_LOOPBACK);
    cr_assert_eq(goblin__transport_url_scope("tcp://[::1]:7"), GOBLIN__SCOPE_LOOPBACK);
    cr_assert_eq(goblin__transport_url_scope("tcp://10.1.2.3:7"), GOBLIN__SCOPE_PRIVATE);
    cr_assert_eq(goblin__transport_url_scope("tcp://172.16.0.1:7"), GOBLIN__SCOPE_PRIVATE);
    cr_assert_eq(goblin__transport_url_scope("tcp://172.31.255.1:7"), GOBLIN__SCOPE_PRIVATE);
    cr_assert_eq(goblin__transport_url_scope("tcp://172.32.0.1:7"), GOBLIN__SCOPE_PUBLIC);
    cr_assert_eq(goblin__transport_url_scope("tcp://192.168.9.9:7"), GOBLIN__SCOPE_PRIVATE);
    cr_assert_eq(goblin__transport_url_scope("tcp://[fd00::5]:7"), GOBLIN__SCOPE_PRIVATE);
    cr_assert_eq(goblin__transport_url_scope("tcp://169.254.169.254:80"), GOBLIN__SCOPE_OTHER);
    cr_assert_eq(goblin__transport_url_scope("tcp://[fe80::1]:7"), GOBLIN__SCOPE_OTHER);
    cr_assert_eq(goblin__transport_url_scope("tcp://[::ffff:127.0.0.1]:7"), GOBLIN__SCOPE_OTHER);
    cr_assert_eq(goblin__transport_url_scope("tcp://239.1.1.1:7"), GOBLIN__SCOPE_OTHER);
    cr_assert_eq(goblin__transport_url_scope("tcp://0.0.0.0:7"), GOBLIN__SCOPE_OTHER);
    cr_assert_eq(goblin__transport_url_scope("tcp://203.0.113.4:7"), GOBLIN__SCOPE_PUBLIC);
    cr_assert_eq(goblin__transport_url_scope("tcp://[2001:db8::1]:7"), GOBLIN__SCOPE_PUBLIC);
    cr_assert_eq(goblin__transport_url_scope("tls+tcp://lab.example.org:7"), GOBLIN__SCOPE_NAME);
    cr_assert_eq(goblin__transport_url_scope("tcp://localhost:7"), GOBLIN__SCOPE_NAME);
    cr_assert_eq(goblin__transport_url_scope("ipc:///tmp/x"), GOBLIN__SCOPE_LOCAL);
    cr_assert_eq(goblin__transport_url_scope("tcp://127.0.0.1"), GOBLIN__SCOPE_BAD);
    cr_assert_eq(goblin__transport_url_scope("tcp://127.0.0.1:7x"), GOBLIN__SCOPE_BAD);
    cr_assert_eq(goblin__transport_url_scope("nonsense"), GOBLIN__SCOPE_BAD);
}

/* A tcp:// direct address is a loopback one: it is used only when the worker and the
 * node both reach the hub on loopback (one machine). Workers that come from elsewhere
 * (the hub's test address makes loopback stand for 10.9.8.7) are relayed. */
Test(hub_intro, a_loopback_address_is_offered_only_to_workers_on_the_same_machine, .timeout = 120) {
    hub_up("tcp", NULL);
    cr_assert_eq(goblin__hub_relay_test_addr(hub, "10.9.8.7"), GOBLIN_OK);
    char url[128];
    goblin_node *node = direct_lab(url, sizeof url, NULL, false);
    wset ws;
    workers_up(&ws, 2);
    cr_assert(rt_wait_workers(node, 2), "both lent, through the relay");
    matmul_checked(node, 48, 40, 32, 51);
    goblin_hub_machines_stats st = hstats();
    cr_assert_eq(st.workers_introduced, 0, "a remote worker is not sent to a loopback address");
    cr_assert_gt(st.bytes_relayed, 0);
    for (int j = 0; j < 2; j++) {
        goblin_worker_stats s;
        goblin_worker_stats_get(ws.w[j], &s);
        cr_assert_eq(s.introductions, 0);
    }
    workers_down(&ws);
    goblin_node_free(node);
    hub_down();
}

/* ---- the messages ------------------------------------------------------------------------ */

Test(hub_intro, hub_messages_round_trip_and_every_cut_is_refused) {
    goblin__hubw_msg m[4];
    memset(m, 0, sizeof m);
    m[0].type = GOBLIN__HUBW_NODE_DIRECT;
    memset(m[0].fingerprint, 0xab, sizeof m[0].fingerprint);
    snprintf(m[0].url, sizeof m[0].url, "tls+tcp://lab.example.org:7700");
    m[1].type = GOBLIN__HUBW_INTRODUCE;
    memset(m[1].ticket, 0x11, sizeof m[1].ticket);
    memset(m[1].identity, 0x22, sizeof m[1].identity);
    m[1].origin_kind = 4;
    m[1].origin[0] = 10, m[1].origin[1] = 1, m[1].origin[2] = 2;
    m[2].type = GOBLIN__HUBW_END;
    memset(m[2].identity, 0x33, sizeof m[2].identity);
    m[3].type = GOBLIN__HUBW_READY;
    memset(m[3].identity, 0x44, sizeof m[3].identity);
    memset(m[3].ticket, 0x55, sizeof m[3].ticket);
    for (int i = 0; i < 4; i++) {
        uint8_t b[GOBLIN__HUBW_MAX];
        size_t n = 0;
        cr_assert_eq(goblin__hubw_encode(&m[i], b, &n), GOBLIN_OK);
        cr_assert_eq(n % 8, 0);
        goblin__hubw_msg d;
        cr_assert_eq(goblin__hubw_decode(b, n, &d, NULL, 0), GOBLIN_OK);
        cr_assert_eq(d.type, m[i].type);
        cr_assert(!memcmp(d.identity, m[i].identity, 32) && !memcmp(d.ticket, m[i].ticket, 32) &&
                  !memcmp(d.fingerprint, m[i].fingerprint, 32) && !strcmp(d.url, m[i].url) &&
                  d.origin_kind == m[i].origin_kind && !memcmp(d.origin, m[i].origin, 7));
        for (size_t cut = 0; cut < n; cut++)
            cr_assert_neq(goblin__hubw_decode(b, cut, &d, NULL, 0), GOBLIN_OK, "type %d cut at %zu", m[i].type, cut);
    }
    /* Hostile NODE_DIRECT bodies: a space in the url, a url of length 0, reserved bytes. */
    uint8_t b[GOBLIN__HUBW_MAX];
    size_t n = 0;
    cr_assert_eq(goblin__hubw_encode(&m[0], b, &n), GOBLIN_OK);
    goblin__hubw_msg d;
    b[GOBLIN__HUBW_HEADER + 40 + 3] = ' ';
    cr_assert_eq(goblin__hubw_decode(b, n, &d, NULL, 0), GOBLIN_EFORMAT);
    cr_assert_eq(goblin__hubw_encode(&m[0], b, &n), GOBLIN_OK);
    b[GOBLIN__HUBW_HEADER + 32] = 0, b[GOBLIN__HUBW_HEADER + 33] = 0;
    cr_assert_eq(goblin__hubw_decode(b, n, &d, NULL, 0), GOBLIN_EFORMAT);
    cr_assert_eq(goblin__hubw_encode(&m[0], b, &n), GOBLIN_OK);
    b[GOBLIN__HUBW_HEADER + 36] = 1;
    cr_assert_eq(goblin__hubw_decode(b, n, &d, NULL, 0), GOBLIN_EFORMAT);
    /* An INTRODUCE with an origin of an unknown kind. */
    cr_assert_eq(goblin__hubw_encode(&m[1], b, &n), GOBLIN_OK);
    b[GOBLIN__HUBW_HEADER + 64] = 5;
    cr_assert_eq(goblin__hubw_decode(b, n, &d, NULL, 0), GOBLIN_EFORMAT);
    /* The encoder refuses a url it would have to alter. */
    snprintf(m[0].url, sizeof m[0].url, "tcp://a b");
    cr_assert_eq(goblin__hubw_encode(&m[0], b, &n), GOBLIN_EINVAL);
    m[0].url[0] = 0;
    cr_assert_eq(goblin__hubw_encode(&m[0], b, &n), GOBLIN_EINVAL);
}

Test(hub_intro, the_workers_introduce_round_trips_and_every_cut_is_refused) {
    goblin__wire_msg m;
    goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_INTRODUCE);
    for (int i = 0; i < GOBLIN_WIRE_TICKET_BYTES; i++) m.body.introduce.ticket[i] = (uint8_t)(i * 7 + 1);
    for (int i = 0; i < 32; i++) m.body.introduce.fingerprint[i] = (uint8_t)(255 - i);
    m.body.introduce.url = "tls+tcp://[2001:db8::7]:7700";
    uint8_t *buf;
    size_t len;
    cr_assert_eq(goblin__wire_encode(&m, &buf, &len), GOBLIN_OK);
    /* header 24, ticket 32, fingerprint 32, u16 u16 u32, url 28, padded to 8 */
    cr_assert_eq(len, 24 + 64 + 8 + 32);
    goblin__wire_limits lim;
    goblin__wire_limits_default(&lim);
    goblin__wire_msg *d = NULL;
    cr_assert_eq(goblin__wire_decode(buf, len, &lim, 0, &d, NULL, 0), GOBLIN_OK);
    cr_assert_str_eq(d->body.introduce.url, m.body.introduce.url);
    cr_assert(!memcmp(d->body.introduce.ticket, m.body.introduce.ticket, GOBLIN_WIRE_TICKET_BYTES));
    cr_assert(!memcmp(d->body.introduce.fingerprint, m.body.introduce.fingerprint, 32));
    goblin__wire_msg_free(d);
    for (size_t cut = GOBLIN_WIRE_HEADER_SIZE; cut < len; cut++) {
        /* the header says the whole length: a shorter buffer with a matching header */
        uint8_t *c = malloc(cut);
        memcpy(c, buf, cut);
        uint64_t bl = cut - GOBLIN_WIRE_HEADER_SIZE;
        for (int i = 0; i < 8; i++) c[16 + i] = (uint8_t)(bl >> (8 * i));
        cr_assert_neq(goblin__wire_decode(c, cut, &lim, 0, &d, NULL, 0), GOBLIN_OK, "cut at %zu", cut);
        free(c);
    }
    size_t at_url = 24 + 64 + 8;
    buf[at_url + 4] = ' '; /* a space in the url */
    cr_assert_eq(goblin__wire_decode(buf, len, &lim, 0, &d, NULL, 0), GOBLIN_EFORMAT);
    buf[at_url + 4] = '+';
    buf[24 + 64 + 2] = 1; /* reserved */
    cr_assert_eq(goblin__wire_decode(buf, len, &lim, 0, &d, NULL, 0), GOBLIN_EFORMAT);
    buf[24 + 64 + 2] = 0;
    buf[len - 1] = 1; /* padding */
    cr_assert_eq(goblin__wire_decode(buf, len, &lim, 0, &d, NULL, 0), GOBLIN_EFORMAT);
    goblin_buffer_free(buf);
    m.body.introduce.url = "";
    cr_assert_neq(goblin__wire_encode(&m, &buf, &len), GOBLIN_OK, "no address, no INTRODUCE");
}
