/* tests/unit/testutil.c - the state of the helpers in testutil.h that must exist
 * once per test program: the counting allocator. */
#include "testutil.h"

gt_alloc_counts gt_allocs = {0, 0, 0, 0, -1, false};

static void *gt_count_alloc(void *user, size_t size, size_t align) {
    (void)user;
    long i = gt_allocs.asked++;
    if (gt_allocs.fail_at >= 0 &&
        (i == gt_allocs.fail_at || (gt_allocs.fail_rest && i > gt_allocs.fail_at)))
        return NULL;
    void *p = NULL;
    if (posix_memalign(&p, align, size)) return NULL;
    gt_allocs.made++;
    gt_allocs.live++;
    return p;
}

static void gt_count_free(void *user, void *p) {
    (void)user;
    gt_allocs.freed++;
    gt_allocs.live--;
    free(p);
}

void gt_alloc_on(void) {
    static const goblin_allocator a = {gt_count_alloc, gt_count_free, NULL};
    gt_allocs = (gt_alloc_counts){0, 0, 0, 0, -1, false};
    goblin_set_allocator(&a);
}

void gt_alloc_off(void) { goblin_set_allocator(NULL); }

void gt_alloc_fail_from(long n) {
    gt_allocs.asked = 0;
    gt_allocs.live = 0;
    gt_allocs.fail_at = n;
    gt_allocs.fail_rest = n >= 0;
}
