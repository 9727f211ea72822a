/* libgoblin/worker/misbehave.c - fault injection (tests and demos only): the worker's and
 * the node's ops of goblin_test_control (testctrl.h), which hub/testctrl.c, the one
 * entry point, hands to goblin__worker_test_control here.
 *
 * A worker set to misbehave draws, per task, whether to misbehave (probability rate,
 * from a generator seeded by the test: the same seed, the same tasks) and then alters
 * its honest answer by the mode: wrong values, a scaled result, a NaN, an earlier or
 * the previous result replayed, a truncated result, no answer, a late answer or a
 * crash. The settings come from another thread (goblin_test_control) and are taken by
 * the loop thread at the start of a task (mb_next -> mb, under st_mu). */
#include "worker_impl.h"
#include "test_control.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "node/origin.h"

static const char *mb_names[GOBLIN_MISBEHAVE_COUNT] = {"none",     "wrong",  "scale", "nan",  "stale",
                                                       "swap",     "truncate", "silent", "slow", "crash",
                                                       "negate",   "products", "negate-rest", "one-element"};

static const char *misbehave_name(goblin_misbehave mode) {
    return (unsigned)mode < GOBLIN_MISBEHAVE_COUNT ? mb_names[mode] : NULL;
}

static goblin_err misbehave_parse(const char *s, goblin_misbehave *mode, double *rate) {
    if (!s || !mode || !rate) return GOBLIN_EINVAL;
    const char *colon = strchr(s, ':');
    size_t len = colon ? (size_t)(colon - s) : strlen(s);
    for (int i = 0; i < GOBLIN_MISBEHAVE_COUNT; i++) {
        if (strlen(mb_names[i]) != len || strncmp(s, mb_names[i], len) != 0) continue;
        double r = 1.0;
        if (colon) {
            char *end = NULL;
            r = strtod(colon + 1, &end);
            if (end == colon + 1 || *end || !(r >= 0.0 && r <= 1.0)) return GOBLIN_EINVAL;
        }
        *mode = (goblin_misbehave)i;
        *rate = r;
        return GOBLIN_OK;
    }
    return GOBLIN_EINVAL;
}

static uint64_t rng_next(goblin_worker *w) {
    uint64_t z = (w->rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double rng_u01(goblin_worker *w) { return (double)(rng_next(w) >> 11) * 0x1p-53; }

/* A kept set of honest outputs (for STALE / SWAP). */
void goblin__worker_kept_free(kept_set *k) {
    for (int32_t i = 0; i < k->n; i++) goblin__free(k->t[i].data);
    goblin__free(k->t);
    k->t = NULL;
    k->n = 0;
}

static void keep_outputs(kept_set *k, const goblin_tensor *o, int32_t n) {
    goblin_tensor *t = goblin__calloc((size_t)(n > 0 ? n : 1), sizeof *t);
    if (!t) return;
    for (int32_t i = 0; i < n; i++) {
        size_t bytes = (size_t)goblin_tensor_numel(&o[i]) * goblin_dtype_size(o[i].dtype);
        t[i] = o[i];
        t[i].data = goblin__memdup(o[i].data, bytes ? bytes : 1);
        if (!t[i].data) {
            for (int32_t q = 0; q < i; q++) goblin__free(t[q].data);
            goblin__free(t);
            return;
        }
    }
    goblin__worker_kept_free(k);
    k->t = t;
    k->n = n;
}


void goblin__worker_misbehave_init(goblin_worker *w) {
    memset(&w->mb, 0, sizeof w->mb);
    w->mb.slow_ms = 2000;
    w->mb_next = w->mb;
    w->mb_pending = w->mb_reseed = false;
    w->rng = 0x1234567ull; /* as if seeded with 0 */
}

/* Take what goblin_test_control set since the last task (loop thread). */
static void take_settings(goblin_worker *w) {
    pthread_mutex_lock(&w->st_mu);
    if (w->mb_pending) {
        w->mb = w->mb_next;
        if (w->mb_reseed) w->rng = w->mb.seed * 0x9E3779B97F4A7C15ull + 0x1234567ull;
        w->mb_pending = w->mb_reseed = false;
    }
    pthread_mutex_unlock(&w->st_mu);
}

goblin_misbehave goblin__worker_misbehave_draw(goblin_worker *w) {
    take_settings(w);
    goblin_misbehave mode = GOBLIN_MISBEHAVE_NONE;
    if (w->mb.mode != GOBLIN_MISBEHAVE_NONE && rng_u01(w) < w->mb.rate) mode = w->mb.mode;
    /* STALE and SWAP replay an earlier honest result: until there is one, answer honestly
     * (and keep it), so that even at rate 1.0 they replay from the second task on. */
    if ((mode == GOBLIN_MISBEHAVE_STALE && !w->first.n) || (mode == GOBLIN_MISBEHAVE_SWAP && !w->prev.n))
        mode = GOBLIN_MISBEHAVE_NONE;
    return mode;
}

void goblin__worker_crash(goblin_worker *w, uint64_t task_id) {
    BUMP(w, misbehaved);
    goblin__worker_log(w, GOBLIN_LOG_WARN, "misbehave: crashing mid-task %llu", (unsigned long long)task_id);
    if (w->mb.crash_hook) {
        w->mb.crash_hook(w->mb.crash_user);
    } else if (w->mb.crash_may_exit) {
        _exit(3);
    }
}

bool goblin__worker_misbehave_apply(goblin_worker *w, goblin_misbehave mode, uint64_t task_id,
                                    goblin_tensor *out, int32_t no, const uint8_t *product,
                                    goblin_tensor **send_t, int32_t *n_out) {
    goblin_tensor *o0 = no > 0 ? &out[0] : NULL;
    int64_t ne = o0 ? goblin_tensor_numel(o0) : 0;
    bool f32 = o0 && o0->dtype == GOBLIN_DTYPE_F32, f64 = o0 && o0->dtype == GOBLIN_DTYPE_F64;
    if (mode != GOBLIN_MISBEHAVE_NONE) BUMP(w, misbehaved);
    goblin_tensor trunc0;
    switch (mode) {
    case GOBLIN_MISBEHAVE_WRONG:
        for (int64_t i = 0; i < ne; i++) {
            double v = rng_u01(w) * 2.0 - 1.0;
            if (f32) ((float *)o0->data)[i] = (float)v;
            else if (f64) ((double *)o0->data)[i] = v;
            else ((uint8_t *)o0->data)[i * (int64_t)goblin_dtype_size(o0->dtype)] ^= 1;
        }
        break;
    case GOBLIN_MISBEHAVE_SCALE:
        for (int64_t i = 0; i < ne; i++) {
            if (f32) ((float *)o0->data)[i] *= 1.001f;
            else if (f64) ((double *)o0->data)[i] *= 1.001;
        }
        break;
    case GOBLIN_MISBEHAVE_NAN:
        if (ne > 0 && (f32 || f64)) {
            int64_t i = (int64_t)(rng_next(w) % (uint64_t)ne);
            if (f32) ((float *)o0->data)[i] = NAN;
            else ((double *)o0->data)[i] = NAN;
        }
        break;
    case GOBLIN_MISBEHAVE_STALE:
        if (w->first.n) {
            *send_t = w->first.t;
            *n_out = w->first.n;
        }
        break;
    case GOBLIN_MISBEHAVE_SWAP:
        if (w->prev.n) {
            *send_t = w->prev.t;
            *n_out = w->prev.n;
        }
        break;
    case GOBLIN_MISBEHAVE_TRUNCATE:
        if (!o0) break;
        trunc0 = *o0;
        if (trunc0.rank >= 1 && trunc0.shape[0] > 1) trunc0.shape[0]--;
        else if (trunc0.rank == 2 && trunc0.shape[1] > 1) trunc0.shape[1]--;
        else {
            *n_out = 0;
            break;
        }
        /* Send output 0 one row short (the rest of the outputs unchanged). */
        {
            goblin_tensor *tt = goblin__calloc((size_t)no, sizeof *tt);
            if (tt) {
                memcpy(tt, out, (size_t)no * sizeof *tt);
                tt[0] = trunc0;
                *send_t = tt;
            } else {
                *n_out = 0;
            }
        }
        break;
    case GOBLIN_MISBEHAVE_NEGATE: /* deterministic: no draw, so a pair agrees bit for bit */
        for (int32_t q = 0; q < no; q++) {
            int64_t nq = goblin_tensor_numel(&out[q]);
            for (int64_t i = 0; i < nq; i++) {
                if (out[q].dtype == GOBLIN_DTYPE_F32) ((float *)out[q].data)[i] = -((float *)out[q].data)[i];
                else if (out[q].dtype == GOBLIN_DTYPE_F64) ((double *)out[q].data)[i] = -((double *)out[q].data)[i];
            }
        }
        break;
    case GOBLIN_MISBEHAVE_PRODUCTS:
    case GOBLIN_MISBEHAVE_NEGATE_REST:
        for (int32_t q = 0; q < no; q++) {
            bool prod = product && product[q];
            if (prod != (mode == GOBLIN_MISBEHAVE_PRODUCTS)) continue;
            double f = mode == GOBLIN_MISBEHAVE_PRODUCTS ? 1.001 : -1.0;
            int64_t nq = goblin_tensor_numel(&out[q]);
            for (int64_t i = 0; i < nq; i++) {
                if (out[q].dtype == GOBLIN_DTYPE_F32) ((float *)out[q].data)[i] = (float)(f * ((float *)out[q].data)[i]);
                else if (out[q].dtype == GOBLIN_DTYPE_F64) ((double *)out[q].data)[i] *= f;
            }
        }
        break;
    case GOBLIN_MISBEHAVE_ONE_ELEMENT: /* one element of each heavy output, a little off */
        for (int32_t q = 0; q < no; q++) {
            int64_t nq = goblin_tensor_numel(&out[q]), i = nq / 2;
            if (!product || !product[q] || nq == 0) continue;
            if (out[q].dtype == GOBLIN_DTYPE_F32) ((float *)out[q].data)[i] = (float)(1.001 * ((float *)out[q].data)[i]);
            else if (out[q].dtype == GOBLIN_DTYPE_F64) ((double *)out[q].data)[i] *= 1.001;
        }
        break;
    case GOBLIN_MISBEHAVE_SILENT:
        goblin__worker_log(w, GOBLIN_LOG_DEBUG, "misbehave: silent on task %llu", (unsigned long long)task_id);
        return false;
    case GOBLIN_MISBEHAVE_SLOW:
        for (uint32_t waited = 0; waited < w->mb.slow_ms && !atomic_load(&w->stop); waited += 10)
            usleep(10000);
        break;
    default:
        break;
    }
    return true;
}

void goblin__worker_misbehave_keep(goblin_worker *w, goblin_misbehave mode, const goblin_tensor *out,
                                   int32_t no) {
    /* Keep honest outputs for STALE / SWAP (only when that mode is configured). */
    if (w->mb.mode == GOBLIN_MISBEHAVE_STALE && !w->first.n && mode == GOBLIN_MISBEHAVE_NONE)
        keep_outputs(&w->first, out, no);
    if (w->mb.mode == GOBLIN_MISBEHAVE_SWAP && mode == GOBLIN_MISBEHAVE_NONE)
        keep_outputs(&w->prev, out, no);
}

/* ---- goblin_test_control ------------------------------------------------------------ */

/* Apply worker op @p op with its arguments @p ap to @p w's next settings (under st_mu);
 * the loop takes them at its next task. */
static goblin_err worker_set(goblin_worker *w, int op, va_list ap) {
    if (!w) return GOBLIN_EINVAL;
    goblin_err e = GOBLIN_OK;
    pthread_mutex_lock(&w->st_mu);
    goblin__misbehave_cfg c = w->mb_pending ? w->mb_next : w->mb;
    bool reseed = false;
    switch (op) {
    case GOBLIN_TESTCTRL_WORKER_MISBEHAVE: {
        int mode = va_arg(ap, int);
        double rate = va_arg(ap, double);
        uint64_t seed = va_arg(ap, uint64_t);
        if (mode < 0 || mode >= GOBLIN_MISBEHAVE_COUNT || !(rate >= 0.0 && rate <= 1.0)) {
            e = GOBLIN_EINVAL;
            break;
        }
        c.mode = (goblin_misbehave)mode;
        c.rate = rate;
        c.seed = seed;
        reseed = true;
        break;
    }
    case GOBLIN_TESTCTRL_WORKER_SLOW_MS:
        c.slow_ms = va_arg(ap, unsigned);
        break;
    case GOBLIN_TESTCTRL_WORKER_CRASH:
        c.crash_hook = va_arg(ap, void (*)(void *));
        c.crash_user = va_arg(ap, void *);
        c.crash_may_exit = va_arg(ap, int) != 0;
        break;
    default:
        e = GOBLIN_EINVAL;
        break;
    }
    if (e == GOBLIN_OK) {
        w->mb_next = c;
        w->mb_reseed = w->mb_reseed || reseed;
        w->mb_pending = true;
    }
    pthread_mutex_unlock(&w->st_mu);
    return e;
}

goblin_err goblin__worker_test_control(int op, va_list ap) {
    goblin_err e = GOBLIN_EINVAL;
    switch (op) {
    case GOBLIN_TESTCTRL_WORKER_MISBEHAVE:
    case GOBLIN_TESTCTRL_WORKER_SLOW_MS:
    case GOBLIN_TESTCTRL_WORKER_CRASH: {
        goblin_worker *w = va_arg(ap, goblin_worker *);
        e = worker_set(w, op, ap);
        break;
    }
    case GOBLIN_TESTCTRL_WORKER_CATALOG_VERSION: {
        goblin_worker *w = va_arg(ap, goblin_worker *);
        unsigned v = va_arg(ap, unsigned);
        if (w) {
            atomic_store(&w->catalog_override, v);
            e = GOBLIN_OK;
        }
        break;
    }
    case GOBLIN_TESTCTRL_NODE_ORIGIN: {
        goblin_node *n = va_arg(ap, goblin_node *);
        const char *identity = va_arg(ap, const char *);
        uint64_t origin = va_arg(ap, uint64_t);
        e = goblin__node_test_origin(n, identity, origin);
        break;
    }
    case GOBLIN_TESTCTRL_MISBEHAVE_NAME: {
        int mode = va_arg(ap, int);
        const char **name = va_arg(ap, const char **);
        if (!name) break;
        *name = misbehave_name((goblin_misbehave)mode);
        e = *name ? GOBLIN_OK : GOBLIN_EINVAL;
        break;
    }
    case GOBLIN_TESTCTRL_MISBEHAVE_PARSE: {
        const char *text = va_arg(ap, const char *);
        goblin_misbehave *mode = va_arg(ap, goblin_misbehave *);
        double *rate = va_arg(ap, double *);
        e = misbehave_parse(text, mode, rate);
        break;
    }
    default:
        break;
    }
    return e;
}
