/* tests/unit/test_hub_worker_link.c - volunteers linking their workers' identities to
 * their hub account (hub/worker_link.c, net/worker_link.c, worker/link.c), attacked:
 * tampered signatures, another key's signature, a statement made for another account's
 * code or for a code since redrawn, a node-proof signature offered as a link, garbage,
 * oversized and injected text, an identity already linked elsewhere. The link code is
 * recomputed with mbedTLS's HMAC from the secret file and the stored seed; the
 * identity with mbedTLS's SHA-256 of the key decoded from the statement; and the
 * database files are searched for the key and the statement, which must not be there. */
#include <criterion/criterion.h>
#include <goblin/hub.h>
#include <goblin/worker.h>
#include <mbedtls/base64.h>
#include <mbedtls/md.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hub/hub_impl.h"
#include "hub_util.h"
#include "net/worker_key.h"
#include "net/worker_link.h"

static char dir[256];
static goblin_hub *hub;
static goblin_hub_store *st;
static int64_t alice, mallory;
static const int64_t T0 = 1700000000;

static void setup(void) {
    snprintf(dir, sizeof dir, "/tmp/goblin-hublink-%d-XXXXXX", (int)getpid());
    cr_assert_not_null(mkdtemp(dir));
    goblin_errbuf err;
    cr_assert_eq(goblin_hub_init_dir(dir, "op@example.org", NULL, NULL, &err), GOBLIN_OK, "%s", err.message);
    cr_assert_eq(goblin_hub_open(dir, &hub, &err), GOBLIN_OK, "%s", err.message);
    st = goblin_hub_get_store(hub);
    goblin_hub_account a;
    cr_assert_eq(goblin_hub_store_account_ensure(st, "alice@example.org", T0, &a), GOBLIN_OK);
    alice = a.id;
    cr_assert_eq(goblin_hub_store_account_ensure(st, "mallory@example.org", T0, &a), GOBLIN_OK);
    mallory = a.id;
}

static void teardown(void) {
    goblin_hub_free(hub);
    hub = NULL;
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(hub_worker_link, .init = setup, .fini = teardown);

/* A worker installation's config directory under the test's directory. */
static const char *worker_dir(const char *name) {
    static char p[4][400];
    static int k;
    char *out = p[k++ % 4];
    snprintf(out, 400, "%s/%s", dir, name);
    return out;
}

static void statement(const char *wdir, const char *code, char *out, char *id) {
    goblin_errbuf err;
    cr_assert_eq(goblin_worker_link_statement(wdir, code, out, GOBLIN_WORKER_LINK_STATEMENT_SIZE, id, &err), GOBLIN_OK,
                 "%s", err.message);
}

static void code_of(int64_t account, char *code) {
    cr_assert_eq(goblin_hub_link_code(hub, account, T0, code), GOBLIN_OK, "%s", goblin_hub_error(hub));
}

static int64_t links(void) {
    int64_t n = 0;
    char path[400];
    snprintf(path, sizeof path, "%s/hub.db", dir);
    sqlite3 *d;
    sqlite3_stmt *s;
    cr_assert_eq(sqlite3_open(path, &d), SQLITE_OK);
    cr_assert_eq(sqlite3_prepare_v2(d, "SELECT count(*) FROM worker_link", -1, &s, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_step(s), SQLITE_ROW);
    n = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    sqlite3_close(d);
    return n;
}

/* The field @p i (0-based) of statement @p s into @p out. */
static void field_of(const char *s, int i, char *out, size_t cap) {
    for (; i > 0; i--) s = strchr(s, ' ') + 1;
    size_t n = strcspn(s, " ");
    cr_assert(n < cap);
    memcpy(out, s, n);
    out[n] = 0;
}

Test(hub_worker_link, the_code_is_derived_from_a_stored_seed_and_the_secret) {
    char c1[GOBLIN_HUB_LINK_CODE_SIZE], c2[GOBLIN_HUB_LINK_CODE_SIZE], c3[GOBLIN_HUB_LINK_CODE_SIZE], cm[33];
    code_of(alice, c1);
    code_of(alice, c2);
    cr_assert_str_eq(c1, c2, "one code until it is redrawn");
    code_of(mallory, cm);
    cr_assert_str_neq(c1, cm);
    cr_assert(goblin__wlink_code_valid(c1));
    /* HMAC(secret, "link-code" 0 account 0 hex(seed)), first 16 bytes in hex. */
    uint8_t key[32], seed[32], d[32];
    hub_util_read_secret(dir, key);
    cr_assert_eq(goblin_hub_store_link_seed_get(st, alice, seed), GOBLIN_OK);
    char id[24], seed_hex[65], want[33];
    snprintf(id, sizeof id, "%lld", (long long)alice);
    for (int i = 0; i < 32; i++) sprintf(seed_hex + 2 * i, "%02x", seed[i]);
    hub_util_hmac(key, "link-code", id, seed_hex, d);
    for (int i = 0; i < 16; i++) sprintf(want + 2 * i, "%02x", d[i]);
    cr_assert_str_eq(c1, want);
    cr_assert(!hub_util_file_has(dir, "hub.db", c1, 32) && !hub_util_file_has(dir, "hub.db-wal", c1, 32),
              "the code itself is not stored");
    cr_assert_eq(goblin_hub_link_code_redraw(hub, alice, T0 + 1, c3), GOBLIN_OK);
    cr_assert_str_neq(c3, c1);
    code_of(alice, c2);
    cr_assert_str_eq(c2, c3);
    cr_assert_eq(goblin_hub_link_code(hub, alice + mallory + 100, T0, c2), GOBLIN_ENOTFOUND);
}

Test(hub_worker_link, a_statement_links_its_identity_and_only_its_fingerprint_is_kept) {
    char code[33], line[GOBLIN_WORKER_LINK_STATEMENT_SIZE], id[65], fp[65];
    code_of(alice, code);
    const char *w = worker_dir("w1");
    statement(w, code, line, id);
    /* The key is the one in the worker's directory, made there on first use (0600). */
    char kpath[500];
    snprintf(kpath, sizeof kpath, "%s/worker_key.pem", w);
    struct stat sb;
    cr_assert_eq(stat(kpath, &sb), 0);
    cr_assert_eq(sb.st_mode & 0777, 0600);
    goblin_worker_params p;
    goblin_worker_params_default(&p);
    p.connect[0] = "tcp://127.0.0.1:1";
    p.n_connect = 1;
    p.config_dir = w;
    goblin_worker *wk;
    cr_assert_eq(goblin_worker_new(&wk, &p), GOBLIN_OK);
    cr_assert_str_eq(goblin_worker_identity(wk), id, "the identity the worker presents to nodes");
    goblin_worker_free(wk);
    /* The identity is SHA-256 of the DER key the statement carries. */
    char b64[200];
    uint8_t der[120], h[32];
    size_t n;
    field_of(line, 2, b64, sizeof b64);
    cr_assert_eq(mbedtls_base64_decode(der, sizeof der, &n, (const unsigned char *)b64, strlen(b64)), 0);
    cr_assert_eq(n, 91);
    cr_assert_eq(mbedtls_md(mbedtls_md_info_from_type(MBEDTLS_MD_SHA256), der, n, h), 0);
    char want[65];
    for (int i = 0; i < 32; i++) sprintf(want + 2 * i, "%02x", h[i]);
    cr_assert_str_eq(id, want);
    cr_assert_eq(goblin_hub_worker_link(hub, alice, line, T0 + 5, fp), GOBLIN_OK, "%s", goblin_hub_error(hub));
    cr_assert_str_eq(fp, want);
    cr_assert_eq(goblin_hub_worker_link(hub, alice, line, T0 + 6, fp), GOBLIN_OK, "the same statement again: a no-op");
    goblin_hub_link l;
    cr_assert_eq(goblin_hub_store_link_get(st, want, &l), GOBLIN_OK);
    cr_assert_eq(l.account_id, alice);
    cr_assert_eq(l.created, T0 + 5);
    /* Work reported afterwards shows on the link. */
    cr_assert_eq(goblin_hub_store_work_add(st, want, 12, 11, 1), GOBLIN_OK);
    cr_assert_eq(goblin_hub_store_link_get(st, want, &l), GOBLIN_OK);
    cr_assert_eq(l.tasks, 12);
    cr_assert_eq(l.accepted, 11);
    cr_assert_eq(l.rejected, 1);
    /* Stored: the fingerprint; not the key (DER or base64), the signature, the line. */
    char sig[200];
    field_of(line, 3, sig, sizeof sig);
    const char *files[] = {"hub.db", "hub.db-wal"};
    bool fp_seen = false;
    for (int i = 0; i < 2; i++) {
        fp_seen |= hub_util_file_has(dir, files[i], want, 64);
        cr_assert(!hub_util_file_has(dir, files[i], der + 27, 64), "%s holds the public key", files[i]);
        cr_assert(!hub_util_file_has(dir, files[i], b64, strlen(b64)), "%s holds the key's base64", files[i]);
        cr_assert(!hub_util_file_has(dir, files[i], sig, strlen(sig)), "%s holds the signature", files[i]);
    }
    cr_assert(fp_seen, "the fingerprint is stored");
    cr_assert_eq(goblin_hub_worker_unlink(hub, mallory, want), GOBLIN_ENOTFOUND);
    cr_assert_eq(goblin_hub_worker_unlink(hub, alice, want), GOBLIN_OK);
    cr_assert_eq(links(), 0);
}

Test(hub_worker_link, forged_and_misdirected_statements_are_refused) {
    char ca[33], cm[33], line[GOBLIN_WORKER_LINK_STATEMENT_SIZE], other[GOBLIN_WORKER_LINK_STATEMENT_SIZE];
    char id[65], id2[65], bad[1024];
    code_of(alice, ca);
    code_of(mallory, cm);
    statement(worker_dir("wa"), ca, line, id);
    statement(worker_dir("wb"), ca, other, id2);
    /* One character of the signature changed. */
    snprintf(bad, sizeof bad, "%s", line);
    char *sig = strrchr(bad, ' ') + 1;
    sig[10] = sig[10] == 'A' ? 'B' : 'A';
    cr_assert_eq(goblin_hub_worker_link(hub, alice, bad, T0, NULL), GOBLIN_EAUTH, "%s", goblin_hub_error(hub));
    /* Another key's signature under this key: does not verify. */
    char k1[200], s2[200];
    field_of(line, 2, k1, sizeof k1);
    field_of(other, 3, s2, sizeof s2);
    snprintf(bad, sizeof bad, "goblin-link-v1 %s %s %s", ca, k1, s2);
    cr_assert_eq(goblin_hub_worker_link(hub, alice, bad, T0, NULL), GOBLIN_EAUTH);
    /* Alice's statement pasted into Mallory's account: made for another code. */
    cr_assert_eq(goblin_hub_worker_link(hub, mallory, line, T0, NULL), GOBLIN_EAUTH);
    cr_assert(strstr(goblin_hub_error(hub), "another link code"), "%s", goblin_hub_error(hub));
    /* Mallory's code put into Alice's statement: the signature covers the code. */
    snprintf(bad, sizeof bad, "%s", line);
    memcpy(bad + 15, cm, 32);
    cr_assert_eq(goblin_hub_worker_link(hub, mallory, bad, T0, NULL), GOBLIN_EAUTH);
    /* A node's identity proof (same key, another domain) is no link statement. */
    goblin__wkey *k;
    bool created;
    char kmsg[256];
    cr_assert_eq(goblin__wkey_load_or_create(worker_dir("wa"), &k, &created, kmsg, sizeof kmsg), GOBLIN_OK);
    cr_assert(!created);
    uint8_t nonce[32], hh[32], d[32], ps[GOBLIN__WKEY_SIG_MAX];
    memcpy(nonce, ca, 32); /* a nonce a hostile node chose to be the code's bytes */
    memset(hh, 7, sizeof hh);
    size_t pn;
    cr_assert_eq(goblin__wkey_proof_digest(nonce, hh, goblin__wkey_public(k), d), GOBLIN_OK);
    cr_assert_eq(goblin__wkey_sign(k, d, ps, &pn, kmsg, sizeof kmsg), GOBLIN_OK);
    goblin__wkey_free(k);
    char psb[200];
    size_t w;
    cr_assert_eq(mbedtls_base64_encode((unsigned char *)psb, sizeof psb, &w, ps, pn), 0);
    snprintf(bad, sizeof bad, "goblin-link-v1 %s %s %s", ca, k1, psb);
    cr_assert_eq(goblin_hub_worker_link(hub, alice, bad, T0, NULL), GOBLIN_EAUTH);
    /* A code since redrawn: the old statement is refused, a new one works. */
    cr_assert_eq(goblin_hub_link_code_redraw(hub, alice, T0, NULL), GOBLIN_OK);
    cr_assert_eq(goblin_hub_worker_link(hub, alice, line, T0, NULL), GOBLIN_EAUTH);
    cr_assert_eq(links(), 0, "nothing linked by any of these");
    char nc[33];
    code_of(alice, nc);
    statement(worker_dir("wa"), nc, line, id);
    cr_assert_eq(goblin_hub_worker_link(hub, alice, line, T0, NULL), GOBLIN_OK, "%s", goblin_hub_error(hub));
    cr_assert_eq(links(), 1);
}

Test(hub_worker_link, garbage_oversized_and_injected_text_is_refused) {
    char ca[33], line[GOBLIN_WORKER_LINK_STATEMENT_SIZE], id[65], bad[2048];
    code_of(alice, ca);
    statement(worker_dir("wg"), ca, line, id);
    char k[200], s[200];
    field_of(line, 2, k, sizeof k);
    field_of(line, 3, s, sizeof s);
    char upper[33];
    for (int i = 0; i < 33; i++) upper[i] = (char)(ca[i] >= 'a' && ca[i] <= 'f' ? ca[i] - 32 : ca[i]);
    char big[600];
    memset(big, 'A', sizeof big - 1);
    big[sizeof big - 1] = 0;
    const char *garbage[] = {
        "", " ", "\n", "goblin-link-v1", "hello world",
        "Robert'); DROP TABLE worker_link;--",
        "<script>alert(document.cookie)</script>",
        "goblin-link-v1 ' OR '1'='1 x y",
        big,
    };
    for (size_t i = 0; i < sizeof garbage / sizeof garbage[0]; i++)
        cr_assert_eq(goblin_hub_worker_link(hub, alice, garbage[i], T0, NULL), GOBLIN_EINVAL, "[%zu]", i);
    cr_assert_eq(goblin_hub_worker_link(hub, alice, NULL, T0, NULL), GOBLIN_EINVAL);
    const char *forms[] = {
        "goblin-link-v2 %s %s %s",  /* another version */
        "goblin-link-v1  %s %s %s", /* two spaces */
        "goblin-link-v1 %s %s %s x",
        "goblin-link-v1 %s %s%s",
        "goblin-link-v1 %s %s\t%s",
    };
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        snprintf(bad, sizeof bad, forms[i], ca, k, s);
        cr_assert_eq(goblin_hub_worker_link(hub, alice, bad, T0, NULL), GOBLIN_EINVAL, "%s", bad);
    }
    snprintf(bad, sizeof bad, "goblin-link-v1 %s %s %s", upper, k, s);
    cr_assert_eq(goblin_hub_worker_link(hub, alice, bad, T0, NULL), GOBLIN_EINVAL, "an upper-case code");
    /* The key's base64 cut, padded wrong, or holding a character outside the alphabet. */
    char k2[200];
    snprintf(k2, sizeof k2, "%s", k);
    k2[strlen(k2) - 4] = 0;
    snprintf(bad, sizeof bad, "goblin-link-v1 %s %s %s", ca, k2, s);
    cr_assert_eq(goblin_hub_worker_link(hub, alice, bad, T0, NULL), GOBLIN_EINVAL);
    snprintf(k2, sizeof k2, "%s", k);
    k2[5] = '*';
    snprintf(bad, sizeof bad, "goblin-link-v1 %s %s %s", ca, k2, s);
    cr_assert_eq(goblin_hub_worker_link(hub, alice, bad, T0, NULL), GOBLIN_EINVAL);
    snprintf(k2, sizeof k2, "%s", k);
    k2[0] = '=';
    snprintf(bad, sizeof bad, "goblin-link-v1 %s %s %s", ca, k2, s);
    cr_assert_eq(goblin_hub_worker_link(hub, alice, bad, T0, NULL), GOBLIN_EINVAL);
    /* A 91-byte key that is not P-256 SPKI (its header changed). */
    snprintf(k2, sizeof k2, "%s", k);
    k2[1] = k2[1] == 'F' ? 'G' : 'F';
    snprintf(bad, sizeof bad, "goblin-link-v1 %s %s %s", ca, k2, s);
    cr_assert_eq(goblin_hub_worker_link(hub, alice, bad, T0, NULL), GOBLIN_EINVAL, "%s", goblin_hub_error(hub));
    /* A signature of 200 bytes: over the bound. */
    char s2[400];
    memset(s2, 'A', 272);
    s2[272] = 0;
    snprintf(bad, sizeof bad, "goblin-link-v1 %s %s %s", ca, k, s2);
    cr_assert_eq(goblin_hub_worker_link(hub, alice, bad, T0, NULL), GOBLIN_EINVAL);
    cr_assert_eq(links(), 0);
    /* Blanks and a line end around a good statement (a paste) are fine. */
    snprintf(bad, sizeof bad, "  %s\r\n", line);
    cr_assert_eq(goblin_hub_worker_link(hub, alice, bad, T0, NULL), GOBLIN_OK, "%s", goblin_hub_error(hub));
    cr_assert_eq(links(), 1);
}

Test(hub_worker_link, an_identity_linked_elsewhere_cannot_be_taken) {
    char ca[33], cm[33], la[GOBLIN_WORKER_LINK_STATEMENT_SIZE], lm[GOBLIN_WORKER_LINK_STATEMENT_SIZE], id[65];
    code_of(alice, ca);
    code_of(mallory, cm);
    /* Mallory holds the same key (a shared machine) and makes a statement for her code. */
    statement(worker_dir("shared"), ca, la, id);
    statement(worker_dir("shared"), cm, lm, id);
    cr_assert_eq(goblin_hub_worker_link(hub, alice, la, T0, NULL), GOBLIN_OK);
    cr_assert_eq(goblin_hub_worker_link(hub, mallory, lm, T0, NULL), GOBLIN_ESTATE);
    cr_assert(strstr(goblin_hub_error(hub), "another account"), "%s", goblin_hub_error(hub));
    cr_assert_eq(goblin_hub_worker_unlink(hub, mallory, id), GOBLIN_ENOTFOUND);
    goblin_hub_link l;
    cr_assert_eq(goblin_hub_store_link_get(st, id, &l), GOBLIN_OK);
    cr_assert_eq(l.account_id, alice);
    /* Once its owner unlinks it, it may be linked elsewhere. */
    cr_assert_eq(goblin_hub_worker_unlink(hub, alice, id), GOBLIN_OK);
    cr_assert_eq(goblin_hub_worker_link(hub, mallory, lm, T0, NULL), GOBLIN_OK);
    cr_assert_eq(goblin_hub_store_link_get(st, id, &l), GOBLIN_OK);
    cr_assert_eq(l.account_id, mallory);
    cr_assert_eq(goblin_hub_worker_unlink(hub, alice, "not hex"), GOBLIN_EINVAL);
}

Test(hub_worker_link, the_worker_side_checks_the_code_before_touching_a_key) {
    char line[GOBLIN_WORKER_LINK_STATEMENT_SIZE], id[65];
    goblin_errbuf err;
    const char *w = worker_dir("never");
    const char *bad[] = {"", "123", "0123456789abcdef0123456789abcdeg", "0123456789abcdef0123456789abcdef0",
                         "0123456789abcdef 123456789abcdef"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_assert_eq(goblin_worker_link_statement(w, bad[i], line, sizeof line, id, &err), GOBLIN_EINVAL, "%s", bad[i]);
    struct stat sb;
    cr_assert_neq(stat(w, &sb), 0, "no key directory was made for a bad code");
    cr_assert_eq(goblin_worker_link_statement(w, "0123456789abcdef0123456789abcdef", line, 10, id, &err),
                 GOBLIN_EINVAL, "a buffer too small");
    /* Upper-case digits (typed by hand) mean the same code. */
    cr_assert_eq(goblin_worker_link_statement(w, "0123456789ABCDEF0123456789abcdef", line, sizeof line, id, &err),
                 GOBLIN_OK, "%s", err.message);
    cr_assert(!strncmp(line, "goblin-link-v1 0123456789abcdef0123456789abcdef ", 48), "%s", line);
    cr_assert(strlen(line) < GOBLIN_WORKER_LINK_STATEMENT_SIZE);
    char code[33], fp[65];
    cr_assert_eq(goblin__wlink_check(line, strlen(line), code, fp, NULL, 0), GOBLIN_OK);
    cr_assert_str_eq(fp, id);
}
