/* libgoblin/io/npy.c - .npy header parsing (hostile bytes) and memory-mapped arrays. */
#include "goblin/npy.h"
#include "npy_fd.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/errf.h"

struct goblin_npy {
    goblin_tensor t;
    void *map;
    size_t map_len;
    bool writable;
};

/* A cursor over the header dict text. */
typedef struct cur {
    const char *s;
    size_t n, i;
} cur;

static void skip_ws(cur *c) {
    while (c->i < c->n && (c->s[c->i] == ' ' || c->s[c->i] == '\t')) c->i++;
}

static bool eat(cur *c, char ch) {
    skip_ws(c);
    if (c->i < c->n && c->s[c->i] == ch) {
        c->i++;
        return true;
    }
    return false;
}

/* A quoted Python string without escapes, at most cap-1 characters. */
static bool parse_str(cur *c, char *out, size_t cap) {
    skip_ws(c);
    if (c->i >= c->n || (c->s[c->i] != '\'' && c->s[c->i] != '"')) return false;
    char q = c->s[c->i++];
    size_t k = 0;
    while (c->i < c->n && c->s[c->i] != q) {
        char ch = c->s[c->i++];
        if (ch == '\\' || (unsigned char)ch < 0x20 || (unsigned char)ch > 0x7e) return false;
        if (k + 1 >= cap) return false;
        out[k++] = ch;
    }
    if (c->i >= c->n) return false;
    c->i++;
    out[k] = 0;
    return true;
}

static bool parse_word(cur *c, const char *w) {
    skip_ws(c);
    size_t l = strlen(w);
    if (c->n - c->i < l || memcmp(c->s + c->i, w, l) != 0) return false;
    c->i += l;
    return true;
}

/* Non-negative decimal integer (Python may write a trailing 'L' in old files). */
static bool parse_dim(cur *c, int64_t *out) {
    skip_ws(c);
    int64_t v = 0;
    size_t start = c->i;
    while (c->i < c->n && c->s[c->i] >= '0' && c->s[c->i] <= '9') {
        int d = c->s[c->i++] - '0';
        if (v > (INT64_MAX - d) / 10) return false;
        v = v * 10 + d;
    }
    if (c->i == start || c->i - start > 19) return false;
    if (c->i < c->n && c->s[c->i] == 'L') c->i++;
    *out = v;
    return true;
}

goblin_err goblin_npy_header_parse(const uint8_t *buf, size_t len, goblin_dtype *dt,
                                   int32_t *rank, int64_t *shape, size_t *data_offset,
                                   goblin_errbuf *err) {
    GOBLIN__ERRBUF(err, msg, cap);
    if (!buf || !dt || !rank || !shape || !data_offset)
        return goblin__errf(msg, cap, GOBLIN_EINVAL, "NULL argument");
    if (len < 10 || memcmp(buf, "\x93NUMPY", 6) != 0)
        return goblin__errf(msg, cap, GOBLIN_EFORMAT, "not a .npy file (bad magic or too short)");
    uint8_t major = buf[6];
    size_t hlen, pre;
    if (major == 1) {
        hlen = (size_t)buf[8] | ((size_t)buf[9] << 8);
        pre = 10;
    } else if (major == 2 || major == 3) {
        if (len < 12) return goblin__errf(msg, cap, GOBLIN_EFORMAT, "truncated .npy preamble");
        hlen = (size_t)buf[8] | ((size_t)buf[9] << 8) | ((size_t)buf[10] << 16) |
               ((size_t)buf[11] << 24);
        pre = 12;
    } else {
        return goblin__errf(msg, cap, GOBLIN_EFORMAT, ".npy format version %u is not supported",
                            (unsigned)major);
    }
    if (hlen > GOBLIN_NPY_MAX_HEADER - pre)
        return goblin__errf(msg, cap, GOBLIN_EFORMAT, ".npy header of %zu bytes is too long", hlen);
    if (len < pre + hlen)
        return goblin__errf(msg, cap, GOBLIN_EFORMAT, "truncated .npy header (%zu of %zu bytes)",
                            len - pre, hlen);
    cur c = {(const char *)buf + pre, hlen, 0};
    /* The dict ends with '\n' and may be padded with spaces before it. */
    if (hlen == 0 || c.s[hlen - 1] != '\n')
        return goblin__errf(msg, cap, GOBLIN_EFORMAT, ".npy header does not end with a newline");
    c.n = hlen - 1;
    if (!eat(&c, '{')) return goblin__errf(msg, cap, GOBLIN_EFORMAT, ".npy header is not a dict");
    bool have_descr = false, have_fo = false, have_shape = false, fortran = false;
    char descr[16] = {0};
    int32_t r = 0;
    int64_t shp[GOBLIN_MAX_RANK] = {0};
    for (;;) {
        if (eat(&c, '}')) break;
        char key[32];
        if (!parse_str(&c, key, sizeof key) || !eat(&c, ':'))
            return goblin__errf(msg, cap, GOBLIN_EFORMAT, "bad key in .npy header at byte %zu",
                                pre + c.i);
        if (strcmp(key, "descr") == 0 && !have_descr) {
            if (!parse_str(&c, descr, sizeof descr))
                return goblin__errf(msg, cap, GOBLIN_EFORMAT, "bad 'descr' in .npy header");
            have_descr = true;
        } else if (strcmp(key, "fortran_order") == 0 && !have_fo) {
            if (parse_word(&c, "True")) fortran = true;
            else if (parse_word(&c, "False")) fortran = false;
            else return goblin__errf(msg, cap, GOBLIN_EFORMAT,
                                     "bad 'fortran_order' in .npy header");
            have_fo = true;
        } else if (strcmp(key, "shape") == 0 && !have_shape) {
            if (!eat(&c, '('))
                return goblin__errf(msg, cap, GOBLIN_EFORMAT, "bad 'shape' in .npy header");
            for (;;) {
                if (eat(&c, ')')) break;
                if (r >= GOBLIN_MAX_RANK)
                    return goblin__errf(msg, cap, GOBLIN_ELIMIT, ".npy rank above %d",
                                        GOBLIN_MAX_RANK);
                if (!parse_dim(&c, &shp[r]))
                    return goblin__errf(msg, cap, GOBLIN_EFORMAT, "bad dimension in .npy shape");
                r++;
                if (eat(&c, ',')) continue;
                if (eat(&c, ')')) break;
                return goblin__errf(msg, cap, GOBLIN_EFORMAT, "bad 'shape' tuple in .npy header");
            }
            have_shape = true;
        } else {
            return goblin__errf(msg, cap, GOBLIN_EFORMAT,
                                "unexpected or repeated key '%s' in .npy header",
                                key);
        }
        if (eat(&c, ',')) continue;
        if (eat(&c, '}')) break;
        return goblin__errf(msg, cap, GOBLIN_EFORMAT, "bad .npy header dict at byte %zu",
                            pre + c.i);
    }
    skip_ws(&c);
    if (c.i != c.n)
        return goblin__errf(msg, cap, GOBLIN_EFORMAT, "trailing bytes after .npy header dict");
    if (!have_descr || !have_fo || !have_shape)
        return goblin__errf(msg, cap, GOBLIN_EFORMAT,
                            ".npy header lacks descr, fortran_order or shape");
    goblin_dtype d;
    if ((descr[0] == '<' || descr[0] == '=' || descr[0] == '|') && strcmp(descr + 1, "f4") == 0)
        d = GOBLIN_DTYPE_F32;
    else if ((descr[0] == '<' || descr[0] == '=' || descr[0] == '|') && strcmp(descr + 1, "f8") == 0)
        d = GOBLIN_DTYPE_F64;
    else if (descr[0] == '>' && (strcmp(descr + 1, "f4") == 0 || strcmp(descr + 1, "f8") == 0))
        return goblin__errf(msg, cap, GOBLIN_ENOTSUP, "big-endian .npy data is not supported");
    else
        return goblin__errf(msg, cap, GOBLIN_EDTYPE,
                            ".npy dtype '%s' is not supported (f4, f8 only)",
                            descr);
    if (fortran)
        return goblin__errf(msg, cap, GOBLIN_ENOTSUP,
                            "Fortran-order .npy is not supported (save with np.ascontiguousarray)");
    int64_t numel = 1;
    for (int32_t i = 0; i < r; i++)
        if (!goblin__mul_i64(numel, shp[i], &numel) || numel > INT64_MAX / 8)
            return goblin__errf(msg, cap, GOBLIN_ELIMIT, ".npy element count overflows");
    *dt = d;
    *rank = r;
    for (int32_t i = 0; i < r; i++) shape[i] = shp[i];
    *data_offset = pre + hlen;
    return GOBLIN_OK;
}

static goblin_err header_build(goblin_dtype dt, int32_t rank, const int64_t *shape, char *out,
                               size_t cap, size_t *out_len) {
    char dict[512];
    int k = snprintf(dict, sizeof dict, "{'descr': '<%s', 'fortran_order': False, 'shape': (",
                     dt == GOBLIN_DTYPE_F32 ? "f4" : "f8");
    /* Python's tuple repr: "(7,)", "(2, 3)", "()". */
    for (int32_t i = 0; i < rank; i++)
        k += snprintf(dict + k, sizeof dict - (size_t)k, "%s%lld%s", i ? ", " : "",
                      (long long)shape[i], rank == 1 ? "," : "");
    k += snprintf(dict + k, sizeof dict - (size_t)k, "), }");
    /* Pad with spaces so that the data starts at a multiple of 64 bytes (NumPy's rule). */
    size_t total = 10 + (size_t)k + 1;
    size_t padded = (total + 63) / 64 * 64;
    if (padded > cap || padded - 10 > 65535) return GOBLIN_ELIMIT;
    memcpy(out, "\x93NUMPY\x01\x00", 8);
    size_t hl = padded - 10;
    out[8] = (char)(hl & 0xff);
    out[9] = (char)(hl >> 8);
    memcpy(out + 10, dict, (size_t)k);
    memset(out + 10 + k, ' ', padded - total);
    out[padded - 1] = '\n';
    *out_len = padded;
    return GOBLIN_OK;
}

static goblin_err map_file(int fd, size_t size, bool writable, void **out) {
    if (size == 0) {
        *out = NULL;
        return GOBLIN_OK;
    }
    void *p = mmap(NULL, size, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return GOBLIN_EIO;
    *out = p;
    return GOBLIN_OK;
}

static goblin_err npy_finish(void *map, size_t map_len, bool writable, goblin_dtype dt,
                             int32_t rank, const int64_t *shape, size_t off, goblin_npy **out) {
    goblin_npy *f = goblin__calloc(1, sizeof *f);
    if (!f) return GOBLIN_ENOMEM;
    f->map = map;
    f->map_len = map_len;
    f->writable = writable;
    int64_t numel = 1;
    for (int32_t i = 0; i < rank; i++) numel *= shape[i];
    goblin_tensor_init(&f->t, dt, rank, shape, numel ? (uint8_t *)map + off : NULL);
    *out = f;
    return GOBLIN_OK;
}

goblin_err goblin_npy_open(const char *path, bool writable, goblin_npy **out, goblin_errbuf *err) {
    GOBLIN__ERRBUF(err, msg, cap);
    if (!path || !out) return goblin__errf(msg, cap, GOBLIN_EINVAL, "NULL argument");
    int fd = open(path, writable ? O_RDWR | O_CLOEXEC : O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return goblin__errf(msg, cap, GOBLIN_EIO, "cannot open %s: %s", path, strerror(errno));
    return goblin__npy_open_fd(fd, path, writable, out, err);
}

goblin_err goblin__npy_open_fd(int fd, const char *path, bool writable, goblin_npy **out,
                               goblin_errbuf *err) {
    GOBLIN__ERRBUF(err, msg, cap);
    if (fd < 0 || !path || !out) {
        if (fd >= 0) close(fd);
        return goblin__errf(msg, cap, GOBLIN_EINVAL, "bad arguments");
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return goblin__errf(msg, cap, GOBLIN_EIO, "%s is not a regular file", path);
    }
    uint8_t head[GOBLIN_NPY_MAX_HEADER];
    size_t got = 0;
    while (got < sizeof head) {
        ssize_t r = pread(fd, head + got, sizeof head - got, (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            close(fd);
            return goblin__errf(msg, cap, GOBLIN_EIO, "cannot read %s: %s", path, strerror(errno));
        }
        if (r == 0) break;
        got += (size_t)r;
    }
    goblin_dtype dt;
    int32_t rank;
    int64_t shape[GOBLIN_MAX_RANK];
    size_t off;
    goblin_err e = goblin_npy_header_parse(head, got, &dt, &rank, shape, &off, err);
    if (e) {
        close(fd);
        return e;
    }
    int64_t numel = 1;
    for (int32_t i = 0; i < rank; i++) numel *= shape[i];
    uint64_t need = (uint64_t)off + (uint64_t)numel * goblin_dtype_size(dt);
    if ((uint64_t)st.st_size != need) {
        close(fd);
        return goblin__errf(msg, cap, GOBLIN_EFORMAT,
                            "%s holds %lld bytes but its header says %llu",
                            path, (long long)st.st_size, (unsigned long long)need);
    }
    void *map = NULL;
    e = map_file(fd, (size_t)need, writable, &map);
    int saved = errno;
    close(fd);
    if (e) return goblin__errf(msg, cap, e, "cannot map %s: %s", path, strerror(saved));
    e = npy_finish(map, (size_t)need, writable, dt, rank, shape, off, out);
    if (e) {
        if (map) munmap(map, (size_t)need);
        return goblin__errf(msg, cap, e, "out of memory");
    }
    return GOBLIN_OK;
}

goblin_err goblin_npy_create(const char *path, goblin_dtype dt, int32_t rank,
                             const int64_t *shape, goblin_npy **out, goblin_errbuf *err) {
    GOBLIN__ERRBUF(err, msg, cap);
    if (!path || !out || rank < 0 || rank > GOBLIN_MAX_RANK || (rank > 0 && !shape))
        return goblin__errf(msg, cap, GOBLIN_EINVAL, "bad arguments");
    if (dt != GOBLIN_DTYPE_F32 && dt != GOBLIN_DTYPE_F64)
        return goblin__errf(msg, cap, GOBLIN_EDTYPE, ".npy output must be f32 or f64");
    int64_t numel = 1;
    for (int32_t i = 0; i < rank; i++) {
        if (shape[i] < 0) return goblin__errf(msg, cap, GOBLIN_EINVAL, "negative dimension");
        if (!goblin__mul_i64(numel, shape[i], &numel) || numel > INT64_MAX / 16)
            return goblin__errf(msg, cap, GOBLIN_ELIMIT, "element count overflows");
    }
    char head[1024];
    size_t hl;
    if (header_build(dt, rank, shape, head, sizeof head, &hl))
        return goblin__errf(msg, cap, GOBLIN_ELIMIT, "header too long");
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return goblin__errf(msg, cap, GOBLIN_EIO, "cannot create %s: %s", path, strerror(errno));
    return goblin__npy_create_fd(fd, path, dt, rank, shape, out, err);
}

goblin_err goblin__npy_create_fd(int fd, const char *path, goblin_dtype dt, int32_t rank,
                                 const int64_t *shape, goblin_npy **out, goblin_errbuf *err) {
    GOBLIN__ERRBUF(err, msg, cap);
    if (fd < 0 || !path || !out || rank < 0 || rank > GOBLIN_MAX_RANK || (rank > 0 && !shape)) {
        if (fd >= 0) close(fd);
        return goblin__errf(msg, cap, GOBLIN_EINVAL, "bad arguments");
    }
    if (dt != GOBLIN_DTYPE_F32 && dt != GOBLIN_DTYPE_F64) {
        close(fd);
        return goblin__errf(msg, cap, GOBLIN_EDTYPE, ".npy output must be f32 or f64");
    }
    int64_t numel = 1;
    for (int32_t i = 0; i < rank; i++) {
        if (shape[i] < 0 || !goblin__mul_i64(numel, shape[i], &numel) || numel > INT64_MAX / 16) {
            close(fd);
            return goblin__errf(msg, cap, GOBLIN_ELIMIT, "bad shape");
        }
    }
    char head[1024];
    size_t hl;
    if (header_build(dt, rank, shape, head, sizeof head, &hl)) {
        close(fd);
        return goblin__errf(msg, cap, GOBLIN_ELIMIT, "header too long");
    }
    uint64_t need = hl + (uint64_t)numel * goblin_dtype_size(dt);
    if (ftruncate(fd, 0) != 0) {
        int s = errno;
        close(fd);
        return goblin__errf(msg, cap, GOBLIN_EIO, "cannot truncate %s: %s", path, strerror(s));
    }
    size_t w = 0;
    while (w < hl) {
        ssize_t r = pwrite(fd, head + w, hl - w, (off_t)w);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            int s = errno;
            close(fd);
            return goblin__errf(msg, cap, GOBLIN_EIO, "cannot write %s: %s", path, strerror(s));
        }
        w += (size_t)r;
    }
    if (ftruncate(fd, (off_t)need) != 0) {
        int s = errno;
        close(fd);
        return goblin__errf(msg, cap, GOBLIN_EIO, "cannot size %s: %s", path, strerror(s));
    }
    void *map = NULL;
    goblin_err e = map_file(fd, (size_t)need, true, &map);
    int saved = errno;
    close(fd);
    if (e) return goblin__errf(msg, cap, e, "cannot map %s: %s", path, strerror(saved));
    e = npy_finish(map, (size_t)need, true, dt, rank, shape, hl, out);
    if (e) {
        if (map) munmap(map, (size_t)need);
        return goblin__errf(msg, cap, e, "out of memory");
    }
    return GOBLIN_OK;
}

goblin_tensor *goblin_npy_tensor(goblin_npy *f) { return f ? &f->t : NULL; }

goblin_err goblin_npy_sync(goblin_npy *f) {
    if (!f) return GOBLIN_EINVAL;
    if (f->writable && f->map && msync(f->map, f->map_len, MS_SYNC) != 0) return GOBLIN_EIO;
    return GOBLIN_OK;
}

void goblin_npy_close(goblin_npy *f) {
    if (!f) return;
    if (f->map) {
        if (f->writable) msync(f->map, f->map_len, MS_SYNC);
        munmap(f->map, f->map_len);
    }
    goblin__free(f);
}

/* Copy a strided tensor element by element into contiguous memory (rank <= 8). */
static void copy_contig(const goblin_tensor *t, uint8_t *dst, size_t es) {
    int64_t numel = goblin_tensor_numel(t);
    int64_t idx[GOBLIN_MAX_RANK] = {0};
    for (int64_t n = 0; n < numel; n++) {
        int64_t off = 0;
        for (int32_t d = 0; d < t->rank; d++) off += idx[d] * t->strides[d];
        memcpy(dst + (size_t)n * es, (const uint8_t *)t->data + off * (int64_t)es, es);
        for (int32_t d = t->rank - 1; d >= 0; d--) {
            if (++idx[d] < t->shape[d]) break;
            idx[d] = 0;
        }
    }
}

goblin_err goblin_npy_save(const char *path, const goblin_tensor *t, goblin_errbuf *err) {
    GOBLIN__ERRBUF(err, msg, cap);
    if (!path || !t) return goblin__errf(msg, cap, GOBLIN_EINVAL, "NULL argument");
    if (t->rank < 0 || t->rank > GOBLIN_MAX_RANK) return goblin__errf(msg, cap, GOBLIN_EINVAL, "bad rank");
    goblin_npy *f;
    goblin_err e = goblin_npy_create(path, t->dtype, t->rank, t->shape, &f, err);
    if (e) return e;
    int64_t numel = goblin_tensor_numel(t);
    if (numel > 0) {
        if (!t->data) {
            goblin_npy_close(f);
            return goblin__errf(msg, cap, GOBLIN_EINVAL, "tensor data is NULL");
        }
        size_t es = goblin_dtype_size(t->dtype);
        if (goblin_tensor_is_contiguous(t))
            memcpy(f->t.data, t->data, (size_t)numel * es);
        else
            copy_contig(t, f->t.data, es);
    }
    e = goblin_npy_sync(f);
    goblin_npy_close(f);
    return e ? goblin__errf(msg, cap, e, "cannot sync %s", path) : GOBLIN_OK;
}
