/* libgoblin/train/checkpoint.c - trainer checkpoints (opt-in): parameters, optimizer state,
 * the round counter and a hash of the model, written to a temporary file, synced, renamed
 * and CRC-sealed; loaded only into a trainer of the same model and optimizer settings. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "base/crc32.h"
#include "train_impl.h"

/* ---- checkpoints ------------------------------------------------------------------------ */

/* Layout (little-endian):
 *   "GOBLTRN1" | u32 format 1 | u64 model hash | u32 n_params | u32 param dtype
 *   | u32 optimizer | sgd: f64 lr momentum dampening weight_decay, u8 nesterov maximize
 *   | adamw: f64 lr beta1 beta2 eps weight_decay, u8 amsgrad maximize
 *   | schedule: u32 kind, f64 base_lr eta_min warmup_start_factor, i64 warmup total
 *   | f64 clip_norm | i64 rounds
 *   | per parameter: u32 rank, i64 shape[rank], its elements
 *   | per parameter: SGD: u8 initialized, momentum buffer if initialized and momentum != 0;
 *                    AdamW: i64 step, exp_avg, exp_avg_sq, max_exp_avg_sq if amsgrad
 *   | u32 crc32 of everything before */

static const char CK_MAGIC[8] = {'G', 'O', 'B', 'L', 'T', 'R', 'N', '1'};


typedef struct ck_buf {
    uint8_t *p;
    size_t len, cap;
    bool oom;
} ck_buf;

static void ck_put(ck_buf *b, const void *src, size_t n) {
    if (b->oom) return;
    if (b->len + n > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 4096;
        while (nc < b->len + n) nc *= 2;
        uint8_t *np = goblin__alloc(nc);
        if (!np) {
            b->oom = true;
            return;
        }
        if (b->len) memcpy(np, b->p, b->len);
        goblin__free(b->p);
        b->p = np;
        b->cap = nc;
    }
    /* values are stored in the host's order; the format is little-endian and the
     * library only builds on little-endian hosts (static check below) */
    memcpy(b->p + b->len, src, n);
    b->len += n;
}
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "checkpoints assume a little-endian host");

#define PUT(b, v)                          \
    do {                                   \
        __typeof__(v) v_ = (v);            \
        ck_put((b), &v_, sizeof v_);       \
    } while (0)

static void put_hyper(ck_buf *b, const goblin_trainer_params *p) {
    PUT(b, (uint32_t)p->optimizer);
    PUT(b, p->sgd.lr);
    PUT(b, p->sgd.momentum);
    PUT(b, p->sgd.dampening);
    PUT(b, p->sgd.weight_decay);
    PUT(b, (uint8_t)p->sgd.nesterov);
    PUT(b, (uint8_t)p->sgd.maximize);
    PUT(b, p->adamw.lr);
    PUT(b, p->adamw.beta1);
    PUT(b, p->adamw.beta2);
    PUT(b, p->adamw.eps);
    PUT(b, p->adamw.weight_decay);
    PUT(b, (uint8_t)p->adamw.amsgrad);
    PUT(b, (uint8_t)p->adamw.maximize);
    PUT(b, (uint32_t)p->schedule.kind);
    PUT(b, p->schedule.base_lr);
    PUT(b, p->schedule.eta_min);
    PUT(b, p->schedule.warmup_start_factor);
    PUT(b, p->schedule.warmup_steps);
    PUT(b, p->schedule.total_steps);
    PUT(b, p->clip_norm);
}

goblin_err goblin_trainer_save(goblin_trainer *t, const char *path) {
    if (!t) return GOBLIN_EINVAL;
    t->err[0] = 0;
    if (!path || !*path) return goblin__train_err(t, GOBLIN_EINVAL, "no path");
    ck_buf b = {0};
    ck_put(&b, CK_MAGIC, sizeof CK_MAGIC);
    PUT(&b, (uint32_t)1);
    PUT(&b, t->model_hash);
    PUT(&b, (uint32_t)t->m.n_params);
    PUT(&b, (uint32_t)t->pdt);
    put_hyper(&b, &t->p);
    PUT(&b, t->rounds);
    size_t es = goblin_dtype_size(t->pdt);
    for (int32_t i = 0; i < t->m.n_params; i++) {
        const goblin_tensor *p = &t->params[i];
        PUT(&b, (uint32_t)p->rank);
        for (int32_t k = 0; k < p->rank; k++) PUT(&b, p->shape[k]);
        ck_put(&b, p->data, (size_t)goblin_tensor_numel(p) * es);
    }
    for (int32_t i = 0; i < t->m.n_params; i++) {
        size_t n = (size_t)goblin_tensor_numel(&t->params[i]) * es;
        if (t->sgd) {
            bool has = t->sgd[i].initialized && t->p.sgd.momentum != 0;
            PUT(&b, (uint8_t)t->sgd[i].initialized);
            if (has) ck_put(&b, t->sgd[i].momentum_buffer, n);
        } else {
            PUT(&b, t->adam[i].step);
            ck_put(&b, t->adam[i].exp_avg, n);
            ck_put(&b, t->adam[i].exp_avg_sq, n);
            if (t->p.adamw.amsgrad) ck_put(&b, t->adam[i].max_exp_avg_sq, n);
        }
    }
    PUT(&b, goblin__crc32(0, b.p, b.len));
    if (b.oom) {
        goblin__free(b.p);
        return goblin__train_err(t, GOBLIN_ENOMEM, "out of memory");
    }
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid()) >= (int)sizeof tmp) {
        goblin__free(b.p);
        return goblin__train_err(t, GOBLIN_EINVAL, "path too long");
    }
    goblin_err e = GOBLIN_OK;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        e = goblin__train_err(t, GOBLIN_EIO, "cannot create %s: %s", tmp, strerror(errno));
        goto out;
    }
    size_t off = 0;
    while (off < b.len) {
        ssize_t w = write(fd, b.p + off, b.len - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            e = goblin__train_err(t, GOBLIN_EIO, "writing %s: %s", tmp, strerror(errno));
            break;
        }
        off += (size_t)w;
    }
    if (!e && fsync(fd) != 0) e = goblin__train_err(t, GOBLIN_EIO, "syncing %s: %s", tmp, strerror(errno));
    if (close(fd) != 0 && !e) e = goblin__train_err(t, GOBLIN_EIO, "closing %s: %s", tmp, strerror(errno));
    if (!e && rename(tmp, path) != 0)
        e = goblin__train_err(t, GOBLIN_EIO, "renaming %s to %s: %s", tmp, path, strerror(errno));
    if (e) unlink(tmp);
out:
    goblin__free(b.p);
    return e;
}

typedef struct ck_rd {
    const uint8_t *p;
    size_t len, off;
    bool bad;
} ck_rd;

static void ck_get(ck_rd *r, void *dst, size_t n) {
    if (r->bad || r->len - r->off < n) {
        r->bad = true;
        memset(dst, 0, n);
        return;
    }
    memcpy(dst, r->p + r->off, n);
    r->off += n;
}

#define GET(r, v) ck_get((r), &(v), sizeof(v))

goblin_err goblin_trainer_load(goblin_trainer *t, const char *path) {
    if (!t) return GOBLIN_EINVAL;
    t->err[0] = 0;
    if (!path) return goblin__train_err(t, GOBLIN_EINVAL, "no path");
    FILE *f = fopen(path, "rb");
    if (!f) return goblin__train_err(t, GOBLIN_EIO, "cannot open %s: %s", path, strerror(errno));
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;
    goblin_err e = GOBLIN_OK;
    for (;;) {
        if (len == cap) {
            size_t nc = cap ? cap * 2 : 65536;
            uint8_t *nb = goblin__alloc(nc);
            if (!nb) {
                e = goblin__train_err(t, GOBLIN_ENOMEM, "out of memory");
                break;
            }
            if (len) memcpy(nb, buf, len);
            goblin__free(buf);
            buf = nb;
            cap = nc;
        }
        size_t r = fread(buf + len, 1, cap - len, f);
        len += r;
        if (r == 0) {
            if (ferror(f)) e = goblin__train_err(t, GOBLIN_EIO, "reading %s failed", path);
            break;
        }
    }
    fclose(f);
    goblin_trainer_params hp;
    uint8_t **pdata = NULL;
    goblin_sgd_state *sgd = NULL;
    goblin_adamw_state *adam = NULL;
    int32_t np = t->m.n_params;
    int64_t rounds = 0;
    if (e) goto out;
    if (len < sizeof CK_MAGIC + 8 || memcmp(buf, CK_MAGIC, sizeof CK_MAGIC) != 0) {
        e = goblin__train_err(t, GOBLIN_EFORMAT, "%s is not a goblin trainer checkpoint", path);
        goto out;
    }
    uint32_t crc;
    memcpy(&crc, buf + len - 4, 4);
    if (crc != goblin__crc32(0, buf, len - 4)) {
        e = goblin__train_err(t, GOBLIN_EFORMAT, "%s is corrupt (checksum mismatch)", path);
        goto out;
    }
    ck_rd r = {buf, len - 4, sizeof CK_MAGIC, false};
    uint32_t fmt, n_params, pdt, opt;
    uint64_t hash;
    GET(&r, fmt);
    GET(&r, hash);
    GET(&r, n_params);
    GET(&r, pdt);
    if (r.bad || fmt != 1) {
        e = goblin__train_err(t, GOBLIN_EFORMAT, "%s: unknown checkpoint format %u", path, fmt);
        goto out;
    }
    if (hash != t->model_hash || n_params != (uint32_t)np || pdt != (uint32_t)t->pdt) {
        e = goblin__train_err(t, GOBLIN_EINVAL, "%s is a checkpoint of another model", path);
        goto out;
    }
    memset(&hp, 0, sizeof hp);
    uint8_t b1, b2, b3, b4;
    uint32_t sk;
    GET(&r, opt);
    GET(&r, hp.sgd.lr);
    GET(&r, hp.sgd.momentum);
    GET(&r, hp.sgd.dampening);
    GET(&r, hp.sgd.weight_decay);
    GET(&r, b1);
    GET(&r, b2);
    GET(&r, hp.adamw.lr);
    GET(&r, hp.adamw.beta1);
    GET(&r, hp.adamw.beta2);
    GET(&r, hp.adamw.eps);
    GET(&r, hp.adamw.weight_decay);
    GET(&r, b3);
    GET(&r, b4);
    GET(&r, sk);
    GET(&r, hp.schedule.base_lr);
    GET(&r, hp.schedule.eta_min);
    GET(&r, hp.schedule.warmup_start_factor);
    GET(&r, hp.schedule.warmup_steps);
    GET(&r, hp.schedule.total_steps);
    GET(&r, hp.clip_norm);
    GET(&r, rounds);
    if (r.bad || rounds < 0) {
        e = goblin__train_err(t, GOBLIN_EFORMAT, "%s: truncated header", path);
        goto out;
    }
    const goblin_trainer_params *cp = &t->p;
    if (opt != (uint32_t)cp->optimizer) {
        e = goblin__train_err(t, GOBLIN_EINVAL, "%s was written by another optimizer (%s, this trainer uses %s)",
                 path, opt == GOBLIN_OPTIMIZER_SGD ? "SGD" : opt == GOBLIN_OPTIMIZER_ADAMW ? "AdamW" : "unknown",
                 cp->optimizer == GOBLIN_OPTIMIZER_SGD ? "SGD" : "AdamW");
        goto out;
    }
#define SAME(a, b) (memcmp(&(a), &(b), sizeof(a)) == 0)
    const char *diff = NULL;
    if (cp->optimizer == GOBLIN_OPTIMIZER_SGD) {
        if (!SAME(hp.sgd.lr, cp->sgd.lr)) diff = "sgd.lr";
        else if (!SAME(hp.sgd.momentum, cp->sgd.momentum)) diff = "sgd.momentum";
        else if (!SAME(hp.sgd.dampening, cp->sgd.dampening)) diff = "sgd.dampening";
        else if (!SAME(hp.sgd.weight_decay, cp->sgd.weight_decay)) diff = "sgd.weight_decay";
        else if (b1 != (uint8_t)cp->sgd.nesterov) diff = "sgd.nesterov";
        else if (b2 != (uint8_t)cp->sgd.maximize) diff = "sgd.maximize";
    } else {
        if (!SAME(hp.adamw.lr, cp->adamw.lr)) diff = "adamw.lr";
        else if (!SAME(hp.adamw.beta1, cp->adamw.beta1)) diff = "adamw.beta1";
        else if (!SAME(hp.adamw.beta2, cp->adamw.beta2)) diff = "adamw.beta2";
        else if (!SAME(hp.adamw.eps, cp->adamw.eps)) diff = "adamw.eps";
        else if (!SAME(hp.adamw.weight_decay, cp->adamw.weight_decay)) diff = "adamw.weight_decay";
        else if (b3 != (uint8_t)cp->adamw.amsgrad) diff = "adamw.amsgrad";
        else if (b4 != (uint8_t)cp->adamw.maximize) diff = "adamw.maximize";
    }
    if (!diff && sk != (uint32_t)cp->schedule.kind) diff = "schedule.kind";
    if (!diff && cp->schedule.kind != GOBLIN_LR_CONSTANT &&
        !(SAME(hp.schedule.base_lr, cp->schedule.base_lr) && SAME(hp.schedule.eta_min, cp->schedule.eta_min) &&
          SAME(hp.schedule.warmup_start_factor, cp->schedule.warmup_start_factor) &&
          hp.schedule.warmup_steps == cp->schedule.warmup_steps &&
          hp.schedule.total_steps == cp->schedule.total_steps))
        diff = "schedule";
    if (!diff && !SAME(hp.clip_norm, cp->clip_norm)) diff = "clip_norm";
#undef SAME
    if (diff) {
        e = goblin__train_err(t, GOBLIN_EINVAL, "%s was written with another optimizer setting (%s differs)", path, diff);
        goto out;
    }
    size_t es = goblin_dtype_size(t->pdt);
    pdata = goblin__calloc((size_t)np, sizeof *pdata);
    if (!pdata) {
        e = goblin__train_err(t, GOBLIN_ENOMEM, "out of memory");
        goto out;
    }
    for (int32_t i = 0; i < np; i++) {
        const goblin_tensor *p = &t->params[i];
        uint32_t rank;
        GET(&r, rank);
        bool same = !r.bad && rank == (uint32_t)p->rank;
        for (int32_t k = 0; same && k < p->rank; k++) {
            int64_t d;
            GET(&r, d);
            same = !r.bad && d == p->shape[k];
        }
        if (r.bad) break;
        if (!same) {
            e = goblin__train_err(t, GOBLIN_EINVAL, "%s: parameter %d has another shape (another model)", path, (int)i);
            goto out;
        }
        size_t n = (size_t)goblin_tensor_numel(p) * es;
        if (r.len - r.off < n) {
            r.bad = true;
            break;
        }
        pdata[i] = (uint8_t *)r.p + r.off;
        r.off += n;
    }
    if (!r.bad && goblin__train_state_new(t, &sgd, &adam)) {
        e = goblin__train_err(t, GOBLIN_ENOMEM, "out of memory");
        goto out;
    }
    for (int32_t i = 0; i < np && !r.bad; i++) {
        size_t n = (size_t)goblin_tensor_numel(&t->params[i]) * es;
        if (sgd) {
            uint8_t init;
            GET(&r, init);
            if (init > 1) r.bad = true;
            sgd[i].initialized = init;
            if (init && t->p.sgd.momentum != 0) ck_get(&r, sgd[i].momentum_buffer, n);
        } else {
            GET(&r, adam[i].step);
            if (adam[i].step < 0) r.bad = true;
            ck_get(&r, adam[i].exp_avg, n);
            ck_get(&r, adam[i].exp_avg_sq, n);
            if (t->p.adamw.amsgrad) ck_get(&r, adam[i].max_exp_avg_sq, n);
        }
    }
    if (r.bad || r.off != r.len) {
        e = goblin__train_err(t, GOBLIN_EFORMAT, "%s: truncated or malformed body", path);
        goto out;
    }
    /* commit */
    for (int32_t i = 0; i < np; i++)
        memcpy(t->params[i].data, pdata[i], (size_t)goblin_tensor_numel(&t->params[i]) * es);
    {
        goblin_sgd_state *os = t->sgd;
        goblin_adamw_state *oa = t->adam;
        t->sgd = sgd;
        t->adam = adam;
        sgd = os;
        adam = oa;
    }
    t->rounds = rounds;
    t->version++;
out:
    if (sgd || adam) { /* free whichever state is not in use */
        goblin_sgd_state *ks = t->sgd;
        goblin_adamw_state *ka = t->adam;
        t->sgd = sgd;
        t->adam = adam;
        goblin__train_state_free(t);
        t->sgd = ks;
        t->adam = ka;
    }
    goblin__free(pdata);
    goblin__free(buf);
    return e;
}
