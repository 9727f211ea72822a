/* tests/unit/hub_store_links.h - the store's volunteer operations (worker links, work
 * counters, link-code seeds) attacked the same way on every backend: test_hub_store.c
 * runs these on SQLite, test_hub_store_postgres.c on a real PostgreSQL server. Each
 * case takes an open store and @p count, which reads one integer back with the
 * backend's own client (not through the store), so what is stored is checked
 * independently. Expected values are worked out by hand in each case. */
#ifndef GOBLIN_TEST_HUB_STORE_LINKS_H
#define GOBLIN_TEST_HUB_STORE_LINKS_H

#include <criterion/criterion.h>
#include <goblin/hub_store.h>
#include <stdio.h>
#include <string.h>

typedef long long (*links_count_fn)(const char *sql);

/* A valid identity: 64 hex digits made from @p i (distinct for distinct i). */
static inline void links_fp(int i, char out[65]) {
    snprintf(out, 65, "%016x%016x%016x%016x", (unsigned)i * 2654435761u, (unsigned)i, 0xabcdefu, (unsigned)~i);
}

typedef struct links_seen {
    int n;
    goblin_hub_link rows[300];
} links_seen;

static inline goblin_err links_collect(void *ctx, const goblin_hub_link *l) {
    links_seen *s = ctx;
    if (s->n < 300) s->rows[s->n] = *l;
    s->n++;
    return GOBLIN_OK;
}

static inline links_seen *links_of(goblin_hub_store *s, int64_t account) {
    static links_seen seen;
    memset(&seen, 0, sizeof seen);
    cr_assert_eq(goblin_hub_store_link_each(s, account, links_collect, &seen), GOBLIN_OK, "%s",
                 goblin_hub_store_error(s));
    return &seen;
}

/* One owner per identity; idempotent relink; other accounts refused and untouched;
 * hostile identities refused before the database; an unknown account refused. */
static inline void links_case_owners(goblin_hub_store *s, links_count_fn count) {
    goblin_hub_account a, b;
    cr_assert_eq(goblin_hub_store_account_ensure(s, "vol-a@example.org", 1, &a), GOBLIN_OK);
    cr_assert_eq(goblin_hub_store_account_ensure(s, "vol-b@example.org", 1, &b), GOBLIN_OK);
    char f1[65], f2[65];
    links_fp(1, f1);
    links_fp(2, f2);
    cr_assert_eq(goblin_hub_store_link_add(s, a.id, f1, 100), GOBLIN_OK, "%s", goblin_hub_store_error(s));
    cr_assert_eq(goblin_hub_store_link_add(s, a.id, f1, 200), GOBLIN_OK, "linking again is a no-op");
    cr_assert_eq(goblin_hub_store_link_add(s, b.id, f1, 300), GOBLIN_ESTATE, "taken by another account");
    cr_assert(strstr(goblin_hub_store_error(s), "another account"), "%s", goblin_hub_store_error(s));
    cr_assert_eq(goblin_hub_store_link_remove(s, b.id, f1), GOBLIN_ENOTFOUND, "only its owner unlinks it");
    cr_assert_eq(goblin_hub_store_link_add(s, a.id, f2, 150), GOBLIN_OK);
    links_seen *v = links_of(s, a.id);
    cr_assert_eq(v->n, 2);
    cr_assert_str_eq(v->rows[0].fingerprint, f1);
    cr_assert_eq(v->rows[0].created, 100, "the first link's time is kept");
    cr_assert_eq(v->rows[0].account_id, a.id);
    cr_assert_eq(v->rows[0].tasks + v->rows[0].accepted + v->rows[0].rejected, 0);
    cr_assert_str_eq(v->rows[1].fingerprint, f2);
    cr_assert_eq(links_of(s, b.id)->n, 0);
    cr_assert_eq(links_of(s, 0)->n, 2, "account 0: every account's links");
    goblin_hub_link got;
    cr_assert_eq(goblin_hub_store_link_get(s, f1, &got), GOBLIN_OK);
    cr_assert_eq(got.account_id, a.id);
    /* Hostile identities: refused by form, nothing stored, nothing deleted. */
    const char *bad[] = {"", "x' OR '1'='1", "00'); DELETE FROM worker_link; --",
                         "ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789",
                         "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde",
                         "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0",
                         "<script>alert(1)</script>0123456789abcdef0123456789abcdef0123456"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(goblin_hub_store_link_add(s, a.id, bad[i], 1), GOBLIN_EINVAL, "%s", bad[i]);
        cr_assert_eq(goblin_hub_store_link_remove(s, a.id, bad[i]), GOBLIN_EINVAL);
        cr_assert_eq(goblin_hub_store_work_add(s, bad[i], 1, 1, 0), GOBLIN_EINVAL);
        cr_assert_eq(goblin_hub_store_link_get(s, bad[i], &got), GOBLIN_EINVAL);
    }
    cr_assert_eq(goblin_hub_store_link_add(s, a.id, NULL, 1), GOBLIN_EINVAL);
    char f3[65];
    links_fp(3, f3);
    cr_assert_eq(goblin_hub_store_link_add(s, a.id + b.id + 1000, f3, 1), GOBLIN_ENOTFOUND);
    cr_assert_eq(goblin_hub_store_link_get(s, f3, &got), GOBLIN_ENOTFOUND);
    cr_assert_eq(count("SELECT count(*) FROM worker_link"), 2);
    cr_assert_eq(count("SELECT count(*) FROM worker_work"), 0);
    /* The owner unlinks; then the other account may link it. */
    cr_assert_eq(goblin_hub_store_link_remove(s, a.id, f1), GOBLIN_OK);
    cr_assert_eq(goblin_hub_store_link_remove(s, a.id, f1), GOBLIN_ENOTFOUND);
    cr_assert_eq(goblin_hub_store_link_add(s, b.id, f1, 400), GOBLIN_OK);
    v = links_of(s, b.id);
    cr_assert_eq(v->n, 1);
    cr_assert_eq(v->rows[0].created, 400);
    cr_assert_eq(links_of(s, a.id)->n, 1);
}

/* GOBLIN_HUB_LINKS_MAX identities per account, then GOBLIN_ELIMIT; another account is
 * not affected; a relink of one it has still works. */
static inline void links_case_bound(goblin_hub_store *s, links_count_fn count) {
    goblin_hub_account a, b;
    cr_assert_eq(goblin_hub_store_account_ensure(s, "many@example.org", 1, &a), GOBLIN_OK);
    cr_assert_eq(goblin_hub_store_account_ensure(s, "other@example.org", 1, &b), GOBLIN_OK);
    char f[65];
    for (int i = 0; i < GOBLIN_HUB_LINKS_MAX; i++) {
        links_fp(1000 + i, f);
        cr_assert_eq(goblin_hub_store_link_add(s, a.id, f, 10 + i), GOBLIN_OK, "%d: %s", i, goblin_hub_store_error(s));
    }
    links_fp(5000, f);
    cr_assert_eq(goblin_hub_store_link_add(s, a.id, f, 9999), GOBLIN_ELIMIT);
    cr_assert(strstr(goblin_hub_store_error(s), "256"), "%s", goblin_hub_store_error(s));
    cr_assert_eq(goblin_hub_store_link_add(s, b.id, f, 9999), GOBLIN_OK, "the bound is per account");
    links_fp(1000, f);
    cr_assert_eq(goblin_hub_store_link_add(s, a.id, f, 1), GOBLIN_OK, "a relink is no new link");
    cr_assert_eq(count("SELECT count(*) FROM worker_link"), GOBLIN_HUB_LINKS_MAX + 1);
    cr_assert_eq(links_of(s, a.id)->n, GOBLIN_HUB_LINKS_MAX);
}

/* Counters: kept before linking and shown after it, added, saturating, refused out of
 * range, kept through an unlink. */
static inline void links_case_work(goblin_hub_store *s, links_count_fn count) {
    goblin_hub_account a;
    cr_assert_eq(goblin_hub_store_account_ensure(s, "work@example.org", 1, &a), GOBLIN_OK);
    char f[65], g[65];
    links_fp(7, f);
    links_fp(8, g);
    cr_assert_eq(goblin_hub_store_work_add(s, f, 10, 9, 1), GOBLIN_OK, "%s", goblin_hub_store_error(s));
    cr_assert_eq(goblin_hub_store_work_add(s, f, 5, 3, 2), GOBLIN_OK);
    cr_assert_eq(goblin_hub_store_work_add(s, g, 0, 0, 0), GOBLIN_OK);
    goblin_hub_link l;
    cr_assert_eq(goblin_hub_store_link_get(s, g, &l), GOBLIN_ENOTFOUND, "zeros store nothing");
    cr_assert_eq(goblin_hub_store_link_get(s, f, &l), GOBLIN_OK);
    cr_assert_eq(l.account_id, 0);
    cr_assert_eq(l.created, 0);
    cr_assert_eq(l.tasks, 15);
    cr_assert_eq(l.accepted, 12);
    cr_assert_eq(l.rejected, 3);
    /* Linking later shows the past work. */
    cr_assert_eq(goblin_hub_store_link_add(s, a.id, f, 50), GOBLIN_OK);
    links_seen *v = links_of(s, a.id);
    cr_assert_eq(v->n, 1);
    cr_assert_eq(v->rows[0].tasks, 15);
    cr_assert_eq(v->rows[0].accepted, 12);
    cr_assert_eq(v->rows[0].rejected, 3);
    cr_assert_eq(goblin_hub_store_work_add(s, f, 1, 0, 1), GOBLIN_OK);
    v = links_of(s, a.id);
    cr_assert_eq(v->rows[0].tasks, 16);
    cr_assert_eq(v->rows[0].rejected, 4);
    /* Out of range: refused, nothing changed. */
    cr_assert_eq(goblin_hub_store_work_add(s, f, -1, 0, 0), GOBLIN_EINVAL);
    cr_assert_eq(goblin_hub_store_work_add(s, f, 0, INT64_MIN, 0), GOBLIN_EINVAL);
    cr_assert_eq(goblin_hub_store_work_add(s, f, 0, 0, GOBLIN_HUB_WORK_COUNT_MAX + 1), GOBLIN_EINVAL);
    cr_assert_eq(goblin_hub_store_work_add(s, f, INT64_MAX, 0, 0), GOBLIN_EINVAL);
    /* Saturation: 16 + 2^62 + 2^62 stops at 2^62, in SQL that must not overflow. */
    cr_assert_eq(goblin_hub_store_work_add(s, f, GOBLIN_HUB_WORK_COUNT_MAX, GOBLIN_HUB_WORK_COUNT_MAX, 0), GOBLIN_OK,
                 "%s", goblin_hub_store_error(s));
    cr_assert_eq(goblin_hub_store_work_add(s, f, GOBLIN_HUB_WORK_COUNT_MAX, 1, 0), GOBLIN_OK, "%s",
                 goblin_hub_store_error(s));
    cr_assert_eq(goblin_hub_store_link_get(s, f, &l), GOBLIN_OK);
    cr_assert_eq(l.tasks, GOBLIN_HUB_WORK_COUNT_MAX);
    cr_assert_eq(l.accepted, GOBLIN_HUB_WORK_COUNT_MAX);
    cr_assert_eq(l.rejected, 4);
    cr_assert_eq(l.account_id, a.id);
    cr_assert_eq(l.created, 50);
    /* Unlinked: the counters stay with the identity. */
    cr_assert_eq(goblin_hub_store_link_remove(s, a.id, f), GOBLIN_OK);
    cr_assert_eq(goblin_hub_store_link_get(s, f, &l), GOBLIN_OK);
    cr_assert_eq(l.account_id, 0);
    cr_assert_eq(l.rejected, 4);
    cr_assert_eq(count("SELECT count(*) FROM worker_work"), 1);
}

/* At most the work limit of unlinked identities: the least recently counted go first;
 * linked ones are never forgotten and do not count against the bound. */
static inline void links_case_work_bound(goblin_hub_store *s, links_count_fn count) {
    goblin_hub_account a;
    cr_assert_eq(goblin_hub_store_account_ensure(s, "bound@example.org", 1, &a), GOBLIN_OK);
    cr_assert_eq(goblin_hub_store_set_work_limit(s, 0), GOBLIN_EINVAL);
    cr_assert_eq(goblin_hub_store_set_work_limit(s, 3), GOBLIN_OK);
    char f[8][65];
    for (int i = 0; i < 8; i++) links_fp(100 + i, f[i]);
    cr_assert_eq(goblin_hub_store_link_add(s, a.id, f[7], 1), GOBLIN_OK);
    cr_assert_eq(goblin_hub_store_work_add(s, f[7], 1, 1, 0), GOBLIN_OK);
    for (int i = 0; i < 3; i++) cr_assert_eq(goblin_hub_store_work_add(s, f[i], 1, 0, 0), GOBLIN_OK);
    /* f0 counted again: now f1 is the least recently counted. */
    cr_assert_eq(goblin_hub_store_work_add(s, f[0], 1, 0, 0), GOBLIN_OK);
    cr_assert_eq(goblin_hub_store_work_add(s, f[3], 1, 0, 0), GOBLIN_OK, "%s", goblin_hub_store_error(s));
    cr_assert_eq(count("SELECT count(*) FROM worker_work"), 4, "three unlinked and the linked one");
    goblin_hub_link l;
    cr_assert_eq(goblin_hub_store_link_get(s, f[1], &l), GOBLIN_ENOTFOUND, "f1 was forgotten");
    cr_assert_eq(goblin_hub_store_link_get(s, f[0], &l), GOBLIN_OK);
    cr_assert_eq(l.tasks, 2);
    cr_assert_eq(goblin_hub_store_link_get(s, f[2], &l), GOBLIN_OK);
    cr_assert_eq(goblin_hub_store_link_get(s, f[3], &l), GOBLIN_OK);
    /* A flood of new identities (a hostile lab) keeps the table at the bound and never
     * touches the linked identity's counters. */
    for (int i = 0; i < 40; i++) {
        char x[65];
        links_fp(9000 + i, x);
        cr_assert_eq(goblin_hub_store_work_add(s, x, 1, 0, 1), GOBLIN_OK);
    }
    cr_assert_eq(count("SELECT count(*) FROM worker_work"), 4);
    cr_assert_eq(goblin_hub_store_link_get(s, f[7], &l), GOBLIN_OK);
    cr_assert_eq(l.account_id, a.id);
    cr_assert_eq(l.tasks, 1);
    cr_assert_eq(l.accepted, 1);
}

/* Link-code seeds: absent, set, replaced, never for an unknown account. */
static inline void links_case_seed(goblin_hub_store *s, links_count_fn count) {
    goblin_hub_account a;
    cr_assert_eq(goblin_hub_store_account_ensure(s, "seed@example.org", 1, &a), GOBLIN_OK);
    uint8_t got[32], s1[32], s2[32];
    for (int i = 0; i < 32; i++) {
        s1[i] = (uint8_t)(i == 3 ? 0 : i == 4 ? '\'' : i == 5 ? '\\' : 200 + i); /* NUL, quote, backslash */
        s2[i] = (uint8_t)(255 - i);
    }
    cr_assert_eq(goblin_hub_store_link_seed_get(s, a.id, got), GOBLIN_ENOTFOUND);
    cr_assert_eq(goblin_hub_store_link_seed_set(s, a.id, s1, 10), GOBLIN_OK, "%s", goblin_hub_store_error(s));
    cr_assert_eq(goblin_hub_store_link_seed_get(s, a.id, got), GOBLIN_OK);
    cr_assert_arr_eq(got, s1, 32);
    cr_assert_eq(goblin_hub_store_link_seed_set(s, a.id, s2, 20), GOBLIN_OK);
    cr_assert_eq(goblin_hub_store_link_seed_get(s, a.id, got), GOBLIN_OK);
    cr_assert_arr_eq(got, s2, 32);
    cr_assert_eq(goblin_hub_store_link_seed_set(s, a.id + 1000, s2, 20), GOBLIN_ENOTFOUND);
    cr_assert_eq(count("SELECT count(*) FROM link_seed"), 1);
}

#endif
