/* The node's lease table and its indexes (libgoblin/node/lease.c): lease id -> slot,
 * and each task's list of its leases. Random adds and removals (swap-removes move the
 * last lease into the hole) are checked against a plain scan of the table, which is
 * what the indexes replace. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "node/node_impl.h"

enum { TASKS = 4001, HOT = 3, OPS = 200000 };

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rnd(void) { /* xorshift64 */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static int64_t scan_find(const goblin_node *n, uint64_t id) {
    for (int64_t i = 0; i < n->n_leases; i++)
        if (n->leases[i].id == id) return i;
    return -1;
}

static int scan_task(const goblin_node *n, const goblin_job *j, int64_t ti) {
    int k = 0;
    for (int64_t i = 0; i < n->n_leases; i++)
        if (n->leases[i].job == j && n->leases[i].task == ti) k++;
    return k;
}

Test(lease_index, matches_a_scan_under_random_churn) {
    goblin_node *n = calloc(1, sizeof *n);
    goblin_job *j = calloc(1, sizeof *j);
    cr_assert(n && j);
    j->ntasks = TASKS;
    j->tasks = calloc(TASKS, sizeof(task));
    cr_assert(j->tasks);
    uint64_t next_id = 1;
    int64_t peak = 0;
    int listed = 0; /* checks of a task found through its list, with leases */
    for (int op = 0; op < OPS; op++) {
        /* The table grows to a few thousand leases, then drains, then grows again. */
        int phase = (op / 20000) % 2;
        bool add = n->n_leases == 0 || (int)(rnd() % 100) < (phase == 0 ? 70 : 30);
        if (add) {
            /* Most tasks hold a lease or two; a few (0 .. HOT-1) pile up more than
             * the per-task list keeps. */
            int64_t ti = rnd() % 20 == 0 ? (int64_t)(rnd() % HOT) : (int64_t)(rnd() % TASKS);
            cr_assert(goblin__node_lease_reserve(n));
            lease L = {.id = next_id++, .job = j, .task = ti, .peer = -1};
            goblin__node_lease_push(n, &L);
            if (n->n_leases > peak) peak = n->n_leases;
        } else {
            int64_t li = (int64_t)(rnd() % (uint64_t)n->n_leases);
            goblin__node_remove_lease(n, li);
        }
        if (op % 997 == 0 || n->n_leases < 8) {
            for (int64_t i = 0; i < n->n_leases; i++)
                cr_assert_eq(goblin__node_find_lease(n, n->leases[i].id), i, "op %d: lease %llu", op,
                             (unsigned long long)n->leases[i].id);
            for (int q = 0; q < 16; q++) { /* ids issued earlier, most of them removed */
                uint64_t id = 1 + rnd() % next_id;
                cr_assert_eq(goblin__node_find_lease(n, id), scan_find(n, id));
            }
            for (int q = 0; q < 64; q++) {
                int64_t ti = q < HOT ? q : (int64_t)(rnd() % TASKS);
                int64_t sl[TASK_LIDS];
                int k = goblin__node_task_lease_slots(n, j, ti, sl, TASK_LIDS);
                if (k < 0) continue; /* overflowed: the callers scan the table */
                cr_assert_eq(k, scan_task(n, j, ti), "op %d, task %lld", op, (long long)ti);
                listed += k > 0;
                for (int q = 0; q < k; q++) {
                    cr_assert_eq(n->leases[sl[q]].task, ti);
                    cr_assert_eq(n->leases[sl[q]].job, j);
                }
            }
        }
    }
    cr_assert_gt(peak, 1000, "the table grew past the index's first size (peak %lld)", (long long)peak);
    cr_assert_gt(listed, 1000, "tasks were found through their lists (%d times)", listed);
    cr_assert(j->tasks[0].lids_over, "a hot task overflowed its list");
    /* Moot marking reaches exactly the task's leases, through the list or the scan. */
    for (int64_t ti = 0; ti < 200; ti++) {
        for (int64_t i = 0; i < n->n_leases; i++) n->leases[i].moot = false;
        goblin__node_task_leases_moot(n, j, ti);
        for (int64_t i = 0; i < n->n_leases; i++)
            cr_assert_eq(n->leases[i].moot, n->leases[i].task == ti);
    }
    goblin__node_leases_clear(n);
    cr_assert_eq(n->n_leases, 0);
    cr_assert_eq(goblin__node_find_lease(n, next_id - 1), -1);
    goblin__free(n->leases);
    goblin__free(n->lidx);
    free(j->tasks);
    free(j);
    free(n);
}
