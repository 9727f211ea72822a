/* bench/bench_hub_relay.c - a matmul with the workers lent through goblin-hub against
 * the same product with the same workers dialing the node directly, on loopback, in one
 * run: plain tcp:// throughout, then tls+tcp:// (the relay then decrypts and encrypts
 * every byte once more). Lent two ways: through the hub's relay, and introduced (the
 * node offers its address, docs/hub.md "Direct introductions": the hub checks each
 * worker and sends it to dial the node itself). Everything in this process: a hub
 * (temporary directory), a node per mode (linked to the hub with a node key for the lent
 * modes), W worker threads. Prints the best wall time of each mode over R alternating
 * repetitions and the ratios direct / lent (1.0: lending costs nothing; goal >= 0.85).
 *
 *   bench_hub_relay [N [W [R]]]    N: m = k = n (default 1024), W workers (2), R reps (3) */
#include <arpa/inet.h>
#include <goblin/hub.h>
#include <goblin/node.h>
#include <goblin/tls.h>
#include <goblin/worker.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int free_port(void) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t n = sizeof a;
    if (bind(s, (struct sockaddr *)&a, sizeof a) || getsockname(s, (struct sockaddr *)&a, &n)) return -1;
    close(s);
    return ntohs(a.sin_port);
}

#define DIE(...) do { fprintf(stderr, "bench_hub_relay: " __VA_ARGS__); fprintf(stderr, "\n"); exit(1); } while (0)

typedef struct wset {
    goblin_worker *w[16];
    pthread_t th[16];
    int n;
} wset;

static void *wmain(void *arg) {
    goblin_worker_run(arg);
    return NULL;
}

static void workers_up(wset *s, int n, const char *url, const char *fp) {
    s->n = n;
    for (int i = 0; i < n; i++) {
        goblin_worker_params wp;
        goblin_worker_params_default(&wp);
        wp.connect[0] = url;
        wp.n_connect = 1;
        wp.threads = 1;
        if (fp) wp.tls_fingerprint = fp;
        if (goblin_worker_new(&s->w[i], &wp)) DIE("worker_new");
        pthread_create(&s->th[i], NULL, wmain, s->w[i]);
    }
}

static void workers_down(wset *s) {
    for (int i = 0; i < s->n; i++) goblin_worker_stop(s->w[i]);
    for (int i = 0; i < s->n; i++) pthread_join(s->th[i], NULL);
    for (int i = 0; i < s->n; i++) goblin_worker_free(s->w[i]);
    s->n = 0;
}

static void wait_workers(goblin_node *node, int64_t n) {
    for (int i = 0; i < 6000; i++) {
        goblin_node_stats st;
        goblin_node_stats_get(node, &st);
        if (st.workers_connected == n) return;
        usleep(10000);
    }
    DIE("workers did not join");
}

static double run_once(goblin_node *node, goblin_tensor *a, goblin_tensor *b, goblin_tensor *c) {
    goblin_job_params jp;
    goblin_job_params_default(&jp);
    goblin_job *job = NULL;
    double t0 = now_s();
    if (goblin_node_submit_matmul(node, a, b, c, &jp, &job)) DIE("submit: %s", goblin_node_submit_error());
    if (goblin_job_wait(job, 600000)) DIE("job: %s", goblin_job_error(job));
    double t = now_s() - t0;
    goblin_job_free(job);
    return t;
}

int main(int argc, char **argv) {
    int64_t n = argc > 1 ? atoll(argv[1]) : 1024;
    int nw = argc > 2 ? atoi(argv[2]) : 2;
    int reps = argc > 3 ? atoi(argv[3]) : 3;
    if (n < 16 || nw < 1 || nw > 16 || reps < 1) DIE("usage: bench_hub_relay [N [W [R]]]");
    char dir[] = "/tmp/goblin-bench-hub-XXXXXX";
    if (!mkdtemp(dir)) DIE("mkdtemp");
    char fp[65];
    goblin_errbuf err;
    if (goblin_hub_init_dir(dir, NULL, NULL, fp, &err)) DIE("init: %s", err.message);
    float *ad = malloc((size_t)(n * n) * 4), *bd = malloc((size_t)(n * n) * 4), *cd = malloc((size_t)(n * n) * 4);
    for (int64_t i = 0; i < n * n; i++) {
        ad[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
        bd[i] = (float)((i * 104729) % 1000) / 1000.0f - 0.5f;
    }
    int64_t shp[2] = {n, n};
    goblin_tensor a, b, c;
    goblin_tensor_init(&a, GOBLIN_DTYPE_F32, 2, shp, ad);
    goblin_tensor_init(&b, GOBLIN_DTYPE_F32, 2, shp, bd);
    goblin_tensor_init(&c, GOBLIN_DTYPE_F32, 2, shp, cd);
    printf("matmul %lld^3 f32, %d workers (1 thread each), best of %d; ratio = direct / relayed time\n",
           (long long)n, nw, reps);
    printf("| transport | direct s | relayed s | introduced s | relayed ratio | introduced ratio |\n"
           "|---|---|---|---|---|---|\n");
    const char *schemes[2] = {"tcp", "tls+tcp"};
    for (int si = 0; si < 2; si++) {
        bool tls = si == 1;
        char path[400];
        snprintf(path, sizeof path, "%s/hub.conf", dir);
        FILE *f = fopen(path, "w");
        fprintf(f, "listen = https://127.0.0.1:0\nmachines = %s://127.0.0.1:0\n", schemes[si]);
        fclose(f);
        goblin_hub *hub = NULL;
        if (goblin_hub_open(dir, &hub, &err)) DIE("open: %s", err.message);
        if (goblin_hub_serve_machines(hub)) DIE("machines: %s", goblin_hub_error(hub));
        int mport = 0;
        goblin_hub_machines_port(hub, &mport);
        char murl[128], nurl[128], key[GOBLIN_HUB_NODE_KEY_SIZE], cert[500], keyf[500];
        snprintf(murl, sizeof murl, "%s://127.0.0.1:%d", schemes[si], mport);
        snprintf(nurl, sizeof nurl, "%s://127.0.0.1:%d", schemes[si], free_port());
        snprintf(cert, sizeof cert, "%s/cert.pem", dir);
        snprintf(keyf, sizeof keyf, "%s/key.pem", dir);
        goblin_hub_account acc;
        goblin_hub_store *st = goblin_hub_get_store(hub);
        char email[64];
        snprintf(email, sizeof email, "lab%d@example.org", si);
        goblin_hub_access_request rq;
        memset(&rq, 0, sizeof rq);
        strcpy(rq.name, "Bench");
        strcpy(rq.institution, "Bench");
        strcpy(rq.purpose, "bench");
        strcpy(rq.expected_use, "bench");
        int64_t rid, kid;
        if (goblin_hub_store_account_ensure(st, email, 0, &acc) || goblin_hub_request_file(hub, acc.id, &rq, 0, &rid) ||
            goblin_hub_store_request_decide(st, rid, GOBLIN_HUB_REQUEST_APPROVED, "", 0) ||
            goblin_hub_key_create(hub, acc.id, "bench", 0, key, &kid))
            DIE("key: %s", goblin_hub_error(hub));
        double best[3] = {1e30, 1e30, 1e30};
        int64_t relayed_bytes[3] = {0, 0, 0};
        for (int r = 0; r < reps; r++)
            for (int mode = 0; mode < 3; mode++) { /* 0 direct, 1 relayed, 2 introduced */
                snprintf(nurl, sizeof nurl, "%s://127.0.0.1:%d", schemes[si], free_port());
                goblin_node_params np;
                goblin_node_params_default(&np);
                np.listen[0] = nurl;
                np.n_listen = 1;
                np.cert_file = cert; /* the hub's identity serves the node too: one pin for both */
                np.key_file = keyf;
                goblin_node *node = NULL;
                if (goblin_node_new(&node, &np) || goblin_node_start(node)) DIE("node");
                if (mode) {
                    goblin_node_hub_params hp;
                    goblin_node_hub_params_default(&hp);
                    hp.url = murl;
                    hp.key = key;
                    if (tls) hp.fingerprint = fp;
                    if (mode == 2) hp.direct_url = nurl;
                    if (goblin_node_hub_connect(node, &hp)) DIE("hub link");
                }
                goblin_hub_machines_stats h0, h1;
                goblin_hub_machines_stats_get(hub, &h0);
                wset ws;
                workers_up(&ws, nw, mode ? murl : nurl, tls ? fp : NULL);
                wait_workers(node, nw);
                if (r == 0) run_once(node, &a, &b, &c); /* warm-up: panels, pages, BLIS */
                double t = run_once(node, &a, &b, &c);
                if (t < best[mode]) best[mode] = t;
                goblin_hub_machines_stats_get(hub, &h1);
                relayed_bytes[mode] += h1.bytes_relayed - h0.bytes_relayed;
                workers_down(&ws);
                goblin_node_free(node);
            }
        printf("| %s | %.3f | %.3f | %.3f | %.2f | %.2f |\n", schemes[si], best[0], best[1], best[2],
               best[0] / best[1], best[0] / best[2]);
        fprintf(stderr, "  (%s: bytes relayed: %lld relayed mode, %lld introduced mode)\n", schemes[si],
                (long long)relayed_bytes[1], (long long)relayed_bytes[2]);
        goblin_hub_free(hub);
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) return 1;
    free(ad);
    free(bd);
    free(cd);
    return 0;
}
