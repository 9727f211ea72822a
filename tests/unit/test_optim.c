/* tests/unit/test_optim.c - optimizer math (libgoblin/optim.c) on hand-derived
 * values; tests/python/test_optim.py compares many steps against torch.optim.
 * These run without Python: one or two steps worked out by hand, the first AdamW
 * step's closed form, clipping by a 3-4-5 norm, the schedule's endpoints, and
 * argument errors. */
#include <criterion/criterion.h>
#include <math.h>
#include <goblin/goblin.h>

Test(optim, sgd_momentum_nesterov_by_hand) {
    goblin_sgd_params o;
    goblin_sgd_params_default(&o);
    o.lr = 0.5;
    o.momentum = 0.5;
    o.weight_decay = 0.25;
    double p[1] = {2}, g[1] = {1}, buf[1] = {0};
    goblin_sgd_state st = {buf, false};
    /* step 1: d = 1 + 0.25*2 = 1.5; buf = 1.5; p = 2 - 0.5*1.5 = 1.25 */
    cr_assert_eq(goblin_sgd_step(&o, GOBLIN_DTYPE_F64, 1, p, g, &st), GOBLIN_OK);
    cr_expect_eq(buf[0], 1.5);
    cr_expect_eq(p[0], 1.25);
    cr_expect(st.initialized);
    /* step 2: d = 1 + 0.3125 = 1.3125; buf = 0.75 + 1.3125 = 2.0625; p = 1.25 - 1.03125 */
    cr_assert_eq(goblin_sgd_step(&o, GOBLIN_DTYPE_F64, 1, p, g, &st), GOBLIN_OK);
    cr_expect_eq(buf[0], 2.0625);
    cr_expect_eq(p[0], 0.21875);
    /* nesterov, f32: d = 1 (no decay); buf = 1; d = 1 + 0.5 * 1 = 1.5; p = 2 - 0.75 */
    o.weight_decay = 0;
    o.nesterov = true;
    float pf[1] = {2}, gf[1] = {1}, bf[1] = {0};
    goblin_sgd_state sf = {bf, false};
    cr_assert_eq(goblin_sgd_step(&o, GOBLIN_DTYPE_F32, 1, pf, gf, &sf), GOBLIN_OK);
    cr_expect_eq(pf[0], 1.25f);
    /* maximize flips the gradient */
    o.nesterov = false;
    o.momentum = 0;
    o.maximize = true;
    double q[1] = {0};
    goblin_sgd_state s0 = {NULL, false};
    cr_assert_eq(goblin_sgd_step(&o, GOBLIN_DTYPE_F64, 1, q, g, &s0), GOBLIN_OK);
    cr_expect_eq(q[0], 0.5);
}

Test(optim, adamw_first_step_closed_form) {
    /* After one step m_hat = g and v_hat = g^2, so p -= lr * g / (|g| + eps): a step
     * of almost exactly lr per element (less where |g| is near eps). */
    goblin_adamw_params o;
    goblin_adamw_params_default(&o);
    o.lr = 0.1;
    o.weight_decay = 0.5;
    double p[3] = {1, -2, 3}, g[3] = {0.5, -4, 1e-3}, m[3] = {0}, v[3] = {0}, vm[3] = {0};
    goblin_adamw_state st = {0, m, v, vm};
    cr_assert_eq(goblin_adamw_step(&o, GOBLIN_DTYPE_F64, 3, p, g, &st), GOBLIN_OK);
    cr_expect_eq(st.step, 1);
    double p0[3] = {1, -2, 3};
    for (int i = 0; i < 3; i++) {
        double decayed = p0[i] * (1 - 0.1 * 0.5);
        double want = decayed - 0.1 * g[i] / (fabs(g[i]) + 1e-8);
        cr_expect(fabs(p[i] - want) <= 1e-12, "p[%d] = %.17g, want %.17g", i, p[i], want);
        cr_expect(fabs(m[i] - 0.1 * g[i]) <= 4e-15 * fabs(g[i]));
        cr_expect(fabs(v[i] - 0.001 * g[i] * g[i]) <= 4e-15 * g[i] * g[i]);
    }
    /* amsgrad keeps the running maximum of v */
    o.amsgrad = true;
    double g2[3] = {0, 0, 0};
    cr_assert_eq(goblin_adamw_step(&o, GOBLIN_DTYPE_F64, 3, p, g2, &st), GOBLIN_OK);
    for (int i = 0; i < 3; i++) cr_expect(vm[i] == v[i] && v[i] > 0);
}

Test(optim, clip_grad_norm_by_hand) {
    float a[2] = {3, 0}, b[1] = {4};
    void *gs[2] = {a, b};
    int64_t ns[2] = {2, 1};
    double total;
    cr_assert_eq(goblin_clip_grad_norm(GOBLIN_DTYPE_F32, 2, gs, ns, 1.0, 2.0, &total), GOBLIN_OK);
    cr_expect_eq(total, 5.0);
    float coef = 1.0f / (5.0f + 1e-6f);
    cr_expect_eq(a[0], 3 * coef);
    cr_expect_eq(b[0], 4 * coef);
    /* under the limit: unchanged; inf norm */
    double c[3] = {-7, 2, 1};
    void *gc[1] = {c};
    int64_t nc[1] = {3};
    cr_assert_eq(goblin_clip_grad_norm(GOBLIN_DTYPE_F64, 1, gc, nc, 100.0, INFINITY, &total), GOBLIN_OK);
    cr_expect_eq(total, 7.0);
    cr_expect_eq(c[0], -7.0);
    cr_expect_eq(goblin_clip_grad_norm(GOBLIN_DTYPE_F64, 1, gc, nc, 1.0, 1.0, &total), GOBLIN_EINVAL);
    cr_expect_eq(goblin_clip_grad_norm(GOBLIN_DTYPE_I32, 1, gc, nc, 1.0, 2.0, &total), GOBLIN_EDTYPE);
}

Test(optim, lr_schedule_endpoints) {
    goblin_lr_schedule s = {GOBLIN_LR_COSINE_WARMUP, 1.0, 0.1, 0.2, 4, 14};
    cr_expect_eq(goblin_lr_at(&s, 0), 0.2);
    cr_expect(fabs(goblin_lr_at(&s, 2) - 0.6) < 1e-15);
    cr_expect(fabs(goblin_lr_at(&s, 4) - 1.0) < 1e-15);
    cr_expect(fabs(goblin_lr_at(&s, 9) - 0.55) < 1e-15); /* halfway: (1 + 0.1) / 2 */
    cr_expect(fabs(goblin_lr_at(&s, 14) - 0.1) < 1e-15);
    cr_expect(fabs(goblin_lr_at(&s, 1000) - 0.1) < 1e-15);
    cr_expect(isnan(goblin_lr_at(&s, -1)));
    s.total_steps = 4;
    cr_expect(isnan(goblin_lr_at(&s, 0)));
    goblin_lr_schedule k = {GOBLIN_LR_CONSTANT, 0.25, 0, 0, 0, 0};
    cr_expect_eq(goblin_lr_at(&k, 77), 0.25);
}

Test(optim, argument_errors) {
    goblin_sgd_params o;
    goblin_sgd_params_default(&o);
    double p[2] = {0}, g[2] = {0};
    goblin_sgd_state st = {NULL, false};
    cr_expect_eq(goblin_sgd_step(NULL, GOBLIN_DTYPE_F64, 2, p, g, &st), GOBLIN_EINVAL);
    cr_expect_eq(goblin_sgd_step(&o, GOBLIN_DTYPE_F64, -1, p, g, &st), GOBLIN_EINVAL);
    cr_expect_eq(goblin_sgd_step(&o, GOBLIN_DTYPE_F16, 2, p, g, &st), GOBLIN_EDTYPE);
    o.momentum = 0.9; /* no buffer */
    cr_expect_eq(goblin_sgd_step(&o, GOBLIN_DTYPE_F64, 2, p, g, &st), GOBLIN_EINVAL);
    o.dampening = 0.1;
    o.nesterov = true; /* torch: nesterov needs zero dampening */
    double b[2];
    st.momentum_buffer = b;
    cr_expect_eq(goblin_sgd_step(&o, GOBLIN_DTYPE_F64, 2, p, g, &st), GOBLIN_EINVAL);
    cr_expect_eq(goblin_sgd_step(&o, GOBLIN_DTYPE_F64, 0, NULL, NULL, &st), GOBLIN_EINVAL);
    o.nesterov = false;
    cr_expect_eq(goblin_sgd_step(&o, GOBLIN_DTYPE_F64, 0, NULL, NULL, &st), GOBLIN_OK);
    goblin_adamw_params a;
    goblin_adamw_params_default(&a);
    goblin_adamw_state as = {0, NULL, NULL, NULL};
    cr_expect_eq(goblin_adamw_step(&a, GOBLIN_DTYPE_F64, 2, p, g, &as), GOBLIN_EINVAL);
    cr_expect_eq(as.step, 0);
    a.eps = -1;
    cr_expect_eq(goblin_adamw_step(&a, GOBLIN_DTYPE_F64, 0, NULL, NULL, &as), GOBLIN_EINVAL);
}
