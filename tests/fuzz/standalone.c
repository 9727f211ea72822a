/* tests/fuzz/standalone.c - a fuzz driver that needs no libFuzzer: it replays the
 * seed corpus, then random mutations of it, through the same entry points the
 * libFuzzer builds use. It is the 'fuzz-smoke' test, built with any compiler; it
 * finds shallow bugs cheaply and keeps the harnesses compiling and honest, while
 * the coverage-guided search is the clang build's job (docs/wire-protocol.md).
 *
 *   fuzz-smoke [--target wire|graph|client_wire|all] [--iterations N] [--seed S]
 *              [--write-corpus DIR] [FILE...]
 *
 * FILEs are replayed as they are (to reproduce a libFuzzer finding under gcc).
 * On a crash or failed oracle the input is written to fuzz-crash-<target>.bin. */
#include <goblin/alloc.h>
#include <goblin/graph.h>
#include "proto/wire.h"
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "proto/client_wire.h"
#include "fuzz.h"

typedef struct target {
    const char *name;
    int (*one)(const uint8_t *, size_t);
    void (*seeds)(fuzz_emit_fn, void *);
    void (*fixup)(uint8_t *, size_t);
    bool (*valid)(const uint8_t *, size_t, bool verbose); /* does the decoder accept it? */
    size_t min_seeds;
} target;

#ifndef GOBLIN_FUZZ_CORE_ONLY /* built without the runtime (-Druntime=disabled) */
static bool wire_valid(const uint8_t *d, size_t n, bool verbose) {
    goblin__wire_msg *m = NULL;
    char msg[256];
    goblin_err e = goblin__wire_decode(d, n, NULL, 0, &m, msg, sizeof msg);
    if (e && verbose) fprintf(stderr, "seed rejected: %s\n", msg);
    goblin__wire_msg_free(m);
    return e == GOBLIN_OK;
}
#endif

static bool graph_valid(const uint8_t *d, size_t n, bool verbose) {
    goblin_graph *g = NULL;
    goblin_errbuf msg_eb = {0};
    goblin_err e = goblin_graph_deserialize(d, n, NULL, &g, &msg_eb);
    if (e && verbose) fprintf(stderr, "seed rejected: %s\n", msg_eb.message);
    goblin_graph_free(g);
    return e == GOBLIN_OK;
}

#ifndef GOBLIN_FUZZ_CORE_ONLY
static bool client_wire_valid(const uint8_t *d, size_t n, bool verbose) {
    static goblin__cw_msg m; /* large: not on the stack */
    const goblin__cw_limits lim = {(uint64_t)1 << 30, GOBLIN_MAX_NUMEL};
    char msg[256];
    goblin_err e = goblin__cw_decode(d, n, &lim, &m, msg, sizeof msg);
    if (e && verbose) fprintf(stderr, "seed rejected: %s\n", msg);
    if (!e) goblin__cw_msg_clear(&m);
    return e == GOBLIN_OK;
}
#endif

static const target TARGETS[] = {
#ifndef GOBLIN_FUZZ_CORE_ONLY
    {"wire", fuzz_wire_one, fuzz_wire_seeds, fuzz_wire_fixup, wire_valid, 10},
#endif
    {"graph", fuzz_graph_one, fuzz_graph_seeds, fuzz_graph_fixup, graph_valid, 6},
#ifndef GOBLIN_FUZZ_CORE_ONLY
    {"client_wire", fuzz_client_wire_one, fuzz_client_wire_seeds, fuzz_client_wire_fixup,
     client_wire_valid, 16},
#endif
};

/* ---- corpus -------------------------------------------------------------- */

typedef struct corpus {
    uint8_t **data;
    size_t *size;
    size_t n, cap;
} corpus;

static void corpus_add(void *ctx, const uint8_t *data, size_t size) {
    corpus *c = ctx;
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 16;
        c->data = realloc(c->data, c->cap * sizeof *c->data);
        c->size = realloc(c->size, c->cap * sizeof *c->size);
        if (!c->data || !c->size) abort();
    }
    c->data[c->n] = malloc(size ? size : 1);
    if (!c->data[c->n]) abort();
    memcpy(c->data[c->n], data, size);
    c->size[c->n++] = size;
}

static void corpus_free(corpus *c) {
    for (size_t i = 0; i < c->n; i++) free(c->data[i]);
    free(c->data);
    free(c->size);
}

/* ---- crash capture ------------------------------------------------------- */

static const uint8_t *volatile g_cur;
static volatile size_t g_cur_size;
static char g_crash_path[256];

static void on_crash(int sig) {
    /* async-signal-safe only: open/write/close */
    int fd = open(g_crash_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        if (g_cur && g_cur_size) {
            ssize_t w = write(fd, (const void *)g_cur, g_cur_size);
            (void)w;
        }
        close(fd);
    }
    static const char note[] = "fuzz-smoke: crashing input written to ";
    ssize_t w = write(2, note, sizeof note - 1);
    w = write(2, g_crash_path, strlen(g_crash_path));
    w = write(2, "\n", 1);
    (void)w;
    signal(sig, SIG_DFL);
    raise(sig);
}

static void run_one(const target *t, const uint8_t *d, size_t n) {
    g_cur = d;
    g_cur_size = n;
    t->one(d, n);
    g_cur = NULL;
}

/* ---- mutations ----------------------------------------------------------- */

static uint64_t g_rng;
static uint64_t rnd(void) { /* xorshift64* */
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return g_rng * 0x2545F4914F6CDD1Dull;
}
static size_t below(size_t n) { return n ? (size_t)(rnd() % n) : 0; }

/* Values that sit on the decoders' boundaries: counts, lengths, limits, signs. */
static const uint64_t INTERESTING[] = {
    0, 1, 2, 7, 8, 9, 15, 16, 23, 24, 25, 127, 128, 255, 256, 257, 511, 512, 513,
    1023, 1024, 1025, 4096, 65535, 65536, 0x7fffffff, 0x80000000, 0xffffffff,
    (uint64_t)1 << 32, (uint64_t)1 << 40, ((uint64_t)1 << 40) + 1, (uint64_t)1 << 46,
    (uint64_t)1 << 62, (uint64_t)1 << 63, UINT64_MAX, UINT64_MAX - 7};

/* Mutate buf[0..*n) in place (capacity cap) with one random edit. */
static void mutate(uint8_t *buf, size_t *n, size_t cap, const corpus *c) {
    size_t len = *n;
    switch (rnd() % 9) {
    case 0: /* flip a bit */
        if (len) buf[below(len)] ^= (uint8_t)(1u << below(8));
        break;
    case 1: /* random byte */
        if (len) buf[below(len)] = (uint8_t)rnd();
        break;
    case 2: { /* interesting integer, 1/2/4/8 bytes little-endian */
        static const unsigned widths[] = {1, 2, 4, 8};
        unsigned w = widths[below(4)];
        if (len < w) break;
        uint64_t v = INTERESTING[below(sizeof INTERESTING / sizeof *INTERESTING)];
        size_t at = below(len - w + 1);
        if (rnd() & 1) at &= ~(size_t)(w - 1); /* fields are mostly aligned */
        for (unsigned i = 0; i < w; i++) buf[at + i] = (uint8_t)(v >> (8 * i));
        break;
    }
    case 3: /* truncate */
        *n = below(len + 1);
        break;
    case 4: { /* insert random bytes */
        size_t k = 1 + below(16), at = below(len + 1);
        if (len + k > cap) break;
        memmove(buf + at + k, buf + at, len - at);
        for (size_t i = 0; i < k; i++) buf[at + i] = (uint8_t)rnd();
        *n = len + k;
        break;
    }
    case 5: { /* delete a chunk */
        if (!len) break;
        size_t at = below(len), k = 1 + below(len - at < 32 ? len - at : 32);
        memmove(buf + at, buf + at + k, len - at - k);
        *n = len - k;
        break;
    }
    case 6: { /* copy a chunk over another place */
        if (len < 2) break;
        size_t k = 1 + below(len / 2), from = below(len - k + 1), to = below(len - k + 1);
        memmove(buf + to, buf + from, k);
        break;
    }
    case 7: { /* splice: keep a prefix, append another seed's suffix */
        size_t s = below(c->n), at = below(len + 1), from = below(c->size[s] + 1);
        size_t k = c->size[s] - from;
        if (at + k > cap) k = cap - at;
        memcpy(buf + at, c->data[s] + from, k);
        *n = at + k;
        break;
    }
    default: /* a run of one byte value (zeros, 0xff, 'A') */
        if (len) {
            static const uint8_t vals[] = {0, 0xff, 'A'};
            size_t at = below(len), k = 1 + below(len - at < 64 ? len - at : 64);
            memset(buf + at, vals[below(3)], k);
        }
        break;
    }
}

/* ---- main ---------------------------------------------------------------- */

static int write_corpus(const target *t, const corpus *c, const char *dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, t->name);
    mkdir(dir, 0755);
    if (mkdir(path, 0755) != 0 && errno != EEXIST) {
        perror(path);
        return 1;
    }
    for (size_t i = 0; i < c->n; i++) {
        snprintf(path, sizeof path, "%s/%s/seed-%03zu.bin", dir, t->name, i);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(c->data[i], 1, c->size[i], f) != c->size[i]) {
            perror(path);
            if (f) fclose(f);
            return 1;
        }
        fclose(f);
    }
    printf("%s: %zu seeds written to %s/%s\n", t->name, c->n, dir, t->name);
    return 0;
}

static int replay_file(const target *t, const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return 1;
    }
    corpus c = {0};
    uint8_t *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? 2 * cap : 4096;
            buf = realloc(buf, cap);
            if (!buf) abort();
        }
        size_t k = fread(buf + n, 1, cap - n, f);
        if (k == 0) break;
        n += k;
    }
    fclose(f);
    corpus_add(&c, buf, n);
    free(buf);
    run_one(t, c.data[0], c.size[0]);
    printf("%s: replayed %s (%zu bytes)\n", t->name, path, c.size[0]);
    corpus_free(&c);
    return 0;
}

static int fuzz_target(const target *t, long iterations, const char *corpus_dir) {
    corpus c = {0};
    t->seeds(corpus_add, &c);
    if (c.n < t->min_seeds) {
        fprintf(stderr, "%s: only %zu seeds, expected at least %zu\n", t->name, c.n, t->min_seeds);
        corpus_free(&c);
        return 1;
    }
    for (size_t i = 0; i < c.n; i++) {
        if (!t->valid(c.data[i], c.size[i], true)) {
            fprintf(stderr, "%s: seed %zu is not accepted by the decoder\n", t->name, i);
            corpus_free(&c);
            return 1;
        }
    }
    if (corpus_dir) {
        int rc = write_corpus(t, &c, corpus_dir);
        corpus_free(&c);
        return rc;
    }
    size_t maxlen = 0;
    for (size_t i = 0; i < c.n; i++) {
        if (c.size[i] > maxlen) maxlen = c.size[i];
        run_one(t, c.data[i], c.size[i]);
    }
    size_t cap = 2 * maxlen + 256;
    uint8_t *buf = malloc(cap);
    if (!buf) abort();
    long accepted = 0;
    for (long it = 0; it < iterations; it++) {
        size_t s = below(c.n), n = c.size[s];
        memcpy(buf, c.data[s], n);
        int edits = 1 + (int)below(rnd() & 1 ? 2 : 8);
        for (int k = 0; k < edits; k++) mutate(buf, &n, cap, &c);
        if (below(4) != 0) t->fixup(buf, n);
        run_one(t, buf, n);
        /* how many mutants get past every check: a smoke that only ever meets the
         * first check would prove little */
        accepted += t->valid(buf, n, false);
    }
    free(buf);
    printf("%s: %zu seeds, %ld mutated inputs (%ld accepted), no crash\n", t->name, c.n,
           iterations, accepted);
    corpus_free(&c);
    return 0;
}

int main(int argc, char **argv) {
    const char *which = "all", *corpus_dir = NULL;
    long iterations = 20000;
    unsigned long long seed = 0x5eed5eed5eedull;
    int first_file = argc;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--target") && i + 1 < argc) which = argv[++i];
        else if (!strcmp(argv[i], "--iterations") && i + 1 < argc) iterations = atol(argv[++i]);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--write-corpus") && i + 1 < argc) corpus_dir = argv[++i];
        else if (argv[i][0] == '-') {
            fprintf(stderr, "usage: %s [--target wire|graph|client_wire|all] [--iterations N] [--seed S] "
                            "[--write-corpus DIR] [FILE...]\n", argv[0]);
            return 2;
        } else {
            first_file = i;
            break;
        }
    }
    g_rng = seed ? seed : 1;
    signal(SIGSEGV, on_crash);
    signal(SIGILL, on_crash);
    signal(SIGABRT, on_crash);
    signal(SIGBUS, on_crash);
    signal(SIGFPE, on_crash);
    int rc = 0, ran = 0;
    for (size_t k = 0; k < sizeof TARGETS / sizeof *TARGETS; k++) {
        const target *t = &TARGETS[k];
        if (strcmp(which, "all") && strcmp(which, t->name)) continue;
        ran++;
        snprintf(g_crash_path, sizeof g_crash_path, "fuzz-crash-%s.bin", t->name);
        if (first_file < argc)
            for (int i = first_file; i < argc; i++) rc |= replay_file(t, argv[i]);
        else rc |= fuzz_target(t, iterations, corpus_dir);
    }
    if (!ran) {
        fprintf(stderr, "unknown target '%s'\n", which);
        return 2;
    }
    return rc;
}
