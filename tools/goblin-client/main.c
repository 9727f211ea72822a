/* tools/goblin-client/main.c - a command-line client of a node's gateway (for scripts
 * and the process-level tests): run a matmul over .npy files, or print the node's
 * counters as JSON. All work is done by goblin_client_* (goblin/client.h).
 *
 *   goblin-client --connect URL [--fingerprint HEX | --ca FILE] matmul A B C [--on-node] [--progress]
 *   goblin-client --connect URL [...] stats */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common/tool_common.h"

static void usage(FILE *f) {
    fprintf(f,
        "Usage: goblin-client --connect URL [--fingerprint HEX | --ca FILE]\n"
        "                     [--credential C | --credential-file F] COMMAND\n"
        "  --credential C / --credential-file F  your researcher credential (from the\n"
        "      node's operator: goblin-node researcher add; F: a file holding it on its\n"
        "      first line; default: the environment variable GOBLIN_CREDENTIAL)\n"
        "  matmul A.npy B.npy C.npy [--on-node [--overwrite]] [--progress]\n"
        "      C = A . B through the node. Without --on-node A and B are read here and C\n"
        "      written here; with it the paths are files in the node's data directories\n"
        "      (C is created new unless --overwrite).\n"
        "      Prints one JSON line: seconds and the node's counters.\n"
        "  stats   print the node's counters as one JSON line\n"
        TOOL_EXIT_CODES_HELP);
}

static bool show_progress(void *user, int64_t done, int64_t total) {
    int *last = user;
    int pct = total > 0 ? (int)(100 * done / total) : 0;
    if (pct != *last) {
        fprintf(stderr, "progress %lld/%lld (%d%%)\n", (long long)done, (long long)total, pct);
        *last = pct;
    }
    return true;
}

/* @p s (printable ASCII, from the node) with '"' and '\\' replaced by '_', into @p out (64). */
static const char *json_safe(const char *s, char *out) {
    size_t i = 0;
    for (; s[i] && i < 63; i++) out[i] = s[i] == '"' || s[i] == '\\' ? '_' : s[i];
    out[i] = 0;
    return out;
}

static goblin_err print_stats(goblin_client *c, double seconds) {
    goblin_node_stats s;
    goblin_node_worker_stats ws[256];
    int64_t nw = 0;
    goblin_err e = goblin_client_stats(c, &s, ws, 256, &nw);
    if (e) {
        fprintf(stderr, "goblin-client: stats: %s\n", goblin_client_error(c));
        return e;
    }
    printf("{\"seconds\": %.6f, \"tasks_issued\": %lld, \"tasks_completed\": %lld, "
           "\"results_accepted\": %lld, \"results_rejected\": %lld, \"rejected_by_reason\": [",
           seconds, (long long)s.tasks_issued, (long long)s.tasks_completed,
           (long long)s.results_accepted, (long long)s.results_rejected);
    for (int i = 0; i < GOBLIN_VERIFY_REASON_COUNT; i++)
        printf("%s%lld", i ? ", " : "", (long long)s.rejected_by_reason[i]);
    printf("], \"results_escalated\": %lld, \"results_duplicate\": %lld, \"results_late\": %lld, "
           "\"tasks_reissued\": %lld, \"tasks_speculative\": %lld, \"panel_cache_hits\": %lld, "
           "\"panel_cache_misses\": %lld, \"rechecked\": %lld, \"recheck_failed\": %lld, "
           "\"peers_dropped\": %lld, \"workers_refused\": %lld, \"workers_connected\": %lld, "
           "\"workers_quarantined\": %lld, \"workers_seen\": %lld, \"freivalds_row_panels\": %lld, "
           "\"freivalds_row_fallbacks\": %lld, \"verify_ns\": %lld, \"verify_cpu_ns\": %lld, \"workers\": [",
           (long long)s.results_escalated, (long long)s.results_duplicate,
           (long long)s.results_late, (long long)s.tasks_reissued, (long long)s.tasks_speculative,
           (long long)s.panel_cache_hits, (long long)s.panel_cache_misses, (long long)s.rechecked,
           (long long)s.recheck_failed, (long long)s.peers_dropped, (long long)s.workers_refused,
           (long long)s.workers_connected, (long long)s.workers_quarantined,
           (long long)s.workers_seen, (long long)s.freivalds_row_panels, (long long)s.freivalds_row_fallbacks,
           (long long)s.verify_ns, (long long)s.verify_cpu_ns);
    char owner[64];
    for (int64_t i = 0; i < nw && i < 256; i++)
        printf("%s{\"session_id\": %llu, \"connected\": %s, \"quarantined\": %s, \"threads\": %d, "
               "\"memory_bytes\": %llu, \"issued\": %lld, \"accepted\": %lld, \"rejected\": %lld, "
               "\"failed_leases\": %lld, \"identity\": \"%s\", \"owner\": \"%s\"}",
               i ? ", " : "", (unsigned long long)ws[i].session_id,
               ws[i].connected ? "true" : "false", ws[i].quarantined ? "true" : "false",
               ws[i].threads, (unsigned long long)ws[i].memory_bytes, (long long)ws[i].issued,
               (long long)ws[i].accepted, (long long)ws[i].rejected,
               (long long)ws[i].failed_leases, ws[i].identity, json_safe(ws[i].owner, owner));
    printf("]}\n");
    fflush(stdout);
    return GOBLIN_OK;
}

int main(int argc, char **argv) {
    tool_name = "goblin-client";
    goblin_client_params cp;
    goblin_client_params_default(&cp);
    const char *url = NULL, *cmd = NULL, *pos[3];
    int npos = 0;
    bool on_node = false, progress = false;
    bool overwrite = false;
    const char *token = NULL, *token_file = NULL;
    char token_buf[GOBLIN_TOKEN_MAX_BYTES + 2];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool hasv = i + 1 < argc;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--connect") == 0 && hasv) url = argv[++i];
        else if (strcmp(a, "--fingerprint") == 0 && hasv) cp.fingerprint = argv[++i];
        else if (strcmp(a, "--ca") == 0 && hasv) cp.ca_file = argv[++i];
        else if (strcmp(a, "--credential") == 0 && hasv) token = argv[++i];
        else if (strcmp(a, "--credential-file") == 0 && hasv) token_file = argv[++i];
        else if (strcmp(a, "--overwrite") == 0) overwrite = true;
        else if (strcmp(a, "--on-node") == 0) on_node = true;
        else if (strcmp(a, "--progress") == 0) progress = true;
        else if (a[0] != '-' && !cmd) cmd = a;
        else if (a[0] != '-' && npos < 3) pos[npos++] = a;
        else {
            fprintf(stderr, "goblin-client: unexpected argument '%s'\n", a);
            usage(stderr);
            return TOOL_EXIT_USAGE;
        }
    }
    bool is_mm = cmd && strcmp(cmd, "matmul") == 0, is_stats = cmd && strcmp(cmd, "stats") == 0;
    if (!url || !(is_mm || is_stats) || (is_mm && npos != 3) || (is_stats && npos)) {
        usage(stderr);
        return TOOL_EXIT_USAGE;
    }
    if (token && token_file) {
        fprintf(stderr, "goblin-client: --credential and --credential-file go one at a time\n");
        return TOOL_EXIT_USAGE;
    }
    if (token_file) {
        FILE *tf = fopen(token_file, "r");
        if (!tf || !fgets(token_buf, sizeof token_buf, tf)) {
            fprintf(stderr, "goblin-client: cannot read a credential from %s\n", token_file);
            if (tf) fclose(tf);
            return TOOL_EXIT_USAGE;
        }
        fclose(tf);
        token_buf[strcspn(token_buf, "\r\n")] = 0;
        token = token_buf;
    }
    if (!token && getenv("GOBLIN_CREDENTIAL") && *getenv("GOBLIN_CREDENTIAL"))
        token = getenv("GOBLIN_CREDENTIAL");
    if (token) {
        size_t tl = strlen(token);
        if (tl == 0 || tl > GOBLIN_TOKEN_MAX_BYTES) {
            fprintf(stderr, "goblin-client: a credential has 1 to %d characters\n",
                    GOBLIN_TOKEN_MAX_BYTES);
            return TOOL_EXIT_USAGE;
        }
        cp.credential = token;
    }
    goblin_errbuf why_eb = {0};
    goblin_client *c;
    goblin_err e = goblin_client_connect(&c, url, &cp, &why_eb);
    if (e) {
        fprintf(stderr, "goblin-client: %s (%s)\n", why_eb.message, goblin_strerror(e));
        return tool_exit_code(e);
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int last = -1;
    if (is_mm && on_node) {
        e = goblin_client_matmul_files(c, pos[0], pos[1], pos[2], overwrite, progress ? show_progress : NULL,
                                       &last);
    } else if (is_mm) {
        goblin_npy *fa = NULL, *fb = NULL;
        if ((e = goblin_npy_open(pos[0], false, &fa, &why_eb)) ||
            (e = goblin_npy_open(pos[1], false, &fb, &why_eb))) {
            fprintf(stderr, "goblin-client: %s\n", why_eb.message);
            goblin_npy_close(fa);
            goblin_client_free(c);
            return tool_exit_code(e);
        }
        goblin_tensor out;
        e = goblin_client_matmul(c, goblin_npy_tensor(fa), goblin_npy_tensor(fb), &out,
                                 progress ? show_progress : NULL, &last);
        goblin_npy_close(fa);
        goblin_npy_close(fb);
        if (!e) {
            e = goblin_npy_save(pos[2], &out, &why_eb);
            goblin_buffer_free(out.data);
            if (e) fprintf(stderr, "goblin-client: %s\n", why_eb.message);
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (e) {
        fprintf(stderr, "goblin-client: %s (%s)\n", goblin_client_error(c), goblin_strerror(e));
        goblin_client_free(c);
        return tool_exit_code(e);
    }
    e = print_stats(c, (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9);
    goblin_client_free(c);
    return e ? tool_exit_code(e) : 0;
}
