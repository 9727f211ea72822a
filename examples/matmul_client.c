/* examples/matmul_client.c - multiply two .npy files into a third through a node.
 *
 *   matmul_client URL A.npy B.npy C.npy [--fingerprint HEX | --ca FILE] [--on-node]
 *
 * By default A and B are read here (memory-mapped), sent to the node, and the verified
 * product is written to C.npy here. With --on-node the three paths name files on the
 * node's own disk: the node maps them and writes C there (for products larger than
 * what one message may carry). Progress goes to stderr, then the node's verification
 * counters. Built against the installed library:
 *   cc matmul_client.c $(pkg-config --cflags --libs goblin) -o matmul_client */
#include <goblin/goblin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool progress(void *user, int64_t done, int64_t total) {
    int *last = user;
    int pct = total > 0 ? (int)(100 * done / total) : 0;
    if (pct != *last) {
        fprintf(stderr, "\rprogress: %3d%% (%lld / %lld tasks)", pct, (long long)done,
                (long long)total);
        *last = pct;
    }
    return true;
}

int main(int argc, char **argv) {
    goblin_client_params cp;
    goblin_client_params_default(&cp);
    const char *pos[4];
    int npos = 0;
    bool on_node = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--fingerprint") == 0 && i + 1 < argc) cp.fingerprint = argv[++i];
        else if (strcmp(argv[i], "--ca") == 0 && i + 1 < argc) cp.ca_file = argv[++i];
        else if (strcmp(argv[i], "--credential") == 0 && i + 1 < argc) cp.credential = argv[++i];
        else if (strcmp(argv[i], "--on-node") == 0) on_node = true;
        else if (argv[i][0] != '-' && npos < 4) pos[npos++] = argv[i];
        else npos = 99;
    }
    if (npos != 4) {
        fprintf(stderr, "usage: matmul_client URL A.npy B.npy C.npy [--fingerprint HEX | --ca FILE] "
                        "[--credential C] [--on-node]\n");
        return 2;
    }
    if (!cp.credential) cp.credential = getenv("GOBLIN_CREDENTIAL"); /* NULL if unset */
    goblin_errbuf why_eb = {0};
    goblin_client *c;
    goblin_err e = goblin_client_connect(&c, pos[0], &cp, &why_eb);
    if (e) {
        fprintf(stderr, "matmul_client: %s (%s)\n", why_eb.message, goblin_strerror(e));
        return 3;
    }
    int last = -1;
    if (on_node) {
        e = goblin_client_matmul_files(c, pos[1], pos[2], pos[3], false, progress, &last);
    } else {
        goblin_npy *fa = NULL, *fb = NULL;
        if ((e = goblin_npy_open(pos[1], false, &fa, &why_eb)) ||
            (e = goblin_npy_open(pos[2], false, &fb, &why_eb))) {
            fprintf(stderr, "matmul_client: %s\n", why_eb.message);
            goblin_npy_close(fa);
            goblin_client_free(c);
            return 1;
        }
        goblin_tensor out;
        e = goblin_client_matmul(c, goblin_npy_tensor(fa), goblin_npy_tensor(fb), &out, progress, &last);
        goblin_npy_close(fa);
        goblin_npy_close(fb);
        if (!e) {
            goblin_err se = goblin_npy_save(pos[3], &out, &why_eb);
            goblin_buffer_free(out.data);
            if (se) {
                fprintf(stderr, "\nmatmul_client: %s\n", why_eb.message);
                goblin_client_free(c);
                return 1;
            }
        }
    }
    fprintf(stderr, "\n");
    if (e) {
        fprintf(stderr, "matmul_client: the job failed: %s (%s)\n", goblin_client_error(c),
                goblin_strerror(e));
        goblin_client_free(c);
        return 1;
    }
    goblin_node_stats s;
    if (goblin_client_stats(c, &s, NULL, 0, NULL) == GOBLIN_OK)
        printf("wrote %s; node counters: accepted %lld rejected %lld reissued %lld quarantined "
               "workers %lld\n",
               pos[3], (long long)s.results_accepted, (long long)s.results_rejected,
               (long long)s.tasks_reissued, (long long)s.workers_quarantined);
    goblin_client_free(c);
    return 0;
}
