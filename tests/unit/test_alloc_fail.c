/* tests/unit/test_alloc_fail.c - fail the Nth allocation: every call returns
 * GOBLIN_ENOMEM (or succeeds) and nothing leaks. (libgoblin/alloc.c and all) */
#include <criterion/criterion.h>
#include <stdlib.h>
#include "testutil.h"

/* Build, serialize, decode and evaluate a graph; any step may fail with ENOMEM. */
static goblin_err scenario(void) {
    goblin_graph *g = NULL, *h = NULL;
    goblin_exec *ex = NULL;
    uint8_t *buf = NULL;
    size_t len;
    goblin_tensor out[2];
    memset(out, 0, sizeof out);
    goblin_err e = goblin_graph_new(&g);
    if (e) return e;
    int64_t sx[] = {64, 32}, sw[] = {32};
    int32_t x, w, s, m, y;
    float wv[32];
    for (int i = 0; i < 32; i++) wv[i] = (float)i;
    goblin_tensor wt = gt_tensor(GOBLIN_DTYPE_F32, 1, sw, wv);
    if ((e = goblin_graph_input(g, GOBLIN_DTYPE_F32, 2, sx, &x))) goto out;
    if ((e = goblin_graph_constant(g, &wt, &w))) goto out;
    int32_t xw[] = {x, w};
    if ((e = goblin_graph_add(g, GOBLIN_OP_MUL, xw, 2, NULL, 0, &m))) goto out;
    int32_t mx[] = {m, x};
    if ((e = goblin_graph_add(g, GOBLIN_OP_ADD, mx, 2, NULL, 0, &s))) goto out;
    int64_t ax[] = {1};
    goblin_attr at = goblin_attr_ints(GOBLIN_ATTR_AXES, ax, 1);
    if ((e = goblin_graph_add(g, GOBLIN_OP_SUM, &s, 1, &at, 1, &y))) goto out;
    if ((e = goblin_graph_output(g, y))) goto out;
    if ((e = goblin_graph_output(g, s))) goto out;
    if ((e = goblin_graph_serialize(g, &buf, &len))) goto out;
    if ((e = goblin_graph_deserialize(buf, len, NULL, &h, NULL))) goto out;
    static float xv[64 * 32];
    for (int i = 0; i < 64 * 32; i++) xv[i] = (float)(i % 7);
    goblin_tensor in = gt_tensor(GOBLIN_DTYPE_F32, 2, sx, xv);
    goblin_exec_params p;
    goblin_exec_params_default(&p);
    p.backend = GOBLIN_BACKEND_REF;
    if ((e = goblin_exec_new(&ex, h, &p))) goto out;
    if ((e = goblin_exec_run(ex, &in, 1, out, 2))) goto out;
    /* row 0: x = i % 7 for i < 32; y = sum(x * (w + 1)) */
    double expect = 0;
    for (int i = 0; i < 32; i++) expect += (double)(i % 7) * (i + 1);
    cr_assert_float_eq(((float *)out[0].data)[0], expect, 1e-3);
out:
    goblin_buffer_free(out[0].data);
    goblin_buffer_free(out[1].data);
    goblin_exec_free(ex);
    goblin_buffer_free(buf);
    goblin_graph_free(h);
    goblin_graph_free(g);
    return e;
}

Test(alloc_fail, every_allocation_failure_is_clean) {
    gt_alloc_on();
    int failures = 0;
    long n;
    for (n = 0; n < 100000; n++) {
        gt_alloc_fail_from(n);
        goblin_err e = scenario();
        cr_assert_eq(gt_allocs.live, 0, "allocation %ld failed: %ld blocks leaked", n,
                     gt_allocs.live);
        if (e == GOBLIN_OK) break;
        cr_assert_eq(e, GOBLIN_ENOMEM, "allocation %ld failed: got %s", n, goblin_err_name(e));
        failures++;
    }
    cr_assert_gt(failures, 20, "the scenario allocates in many places");
    cr_log_info("failed each of the first %d allocations: all returned GOBLIN_ENOMEM, no leaks",
                failures);
    gt_alloc_fail_from(-1);
    gt_alloc_off();
}

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define TEST_ASAN 1
#endif
#if defined(__GLIBC__) && !defined(TEST_ASAN) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
#define TEST_GLIBC_MALLOC 1
#include <malloc.h>
#endif

/* goblin_tune_allocator_for_service: after it, a large block freed goes back to the
 * process's heap (glibc's own accounting says so), not to the kernel. Criterion runs
 * each test in a process of its own, so the setting stays in this test. */
Test(alloc_fail, service_allocator_keeps_large_blocks) {
#if defined(TEST_GLIBC_MALLOC)
    size_t big = (size_t)48 << 20;
    struct mallinfo2 before = mallinfo2();
    cr_assert_eq(goblin_tune_allocator_for_service(0), GOBLIN_OK);
    char *p = malloc(big);
    cr_assert_not_null(p);
    memset(p, 1, big);
    struct mallinfo2 held = mallinfo2();
    /* Not an mmap'd block (those are counted in hblkhd and unmapped on free). */
    cr_assert_eq(held.hblkhd, before.hblkhd, "a 48 MiB block was mmap'd: %zu -> %zu", before.hblkhd, held.hblkhd);
    cr_assert_geq(held.uordblks, before.uordblks + big);
    free(p);
    struct mallinfo2 after = mallinfo2();
    /* Kept in the heap as free memory, ready for the next message. */
    cr_assert_geq(after.fordblks, big, "freed 48 MiB, heap keeps %zu free", after.fordblks);
    cr_assert_geq(after.arena, big);
    char *q = malloc(big);
    cr_assert_not_null(q);
    cr_assert_eq(mallinfo2().arena, after.arena, "the second block did not reuse the first's memory");
    free(q);
#else
    /* ASan's allocator (or another C library): nothing to set, and it says so. */
    cr_assert_eq(goblin_tune_allocator_for_service(0), GOBLIN_ENOTSUP);
#endif
}
