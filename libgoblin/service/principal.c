/* libgoblin/service/principal.c - researcher credentials (goblin/principal.h): the
 * credentials file, adding, revoking and listing principals, and checking a presented
 * credential in constant time. A secret is never written anywhere but the caller's
 * buffer, and never appears in a message. */
#include <goblin/principal.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/errf.h"
#include "goblin/tls.h"
#include "principal_impl.h"

#define PREFIX "gbr1_"
#define PREFIX_LEN 5
#define ID_HEX 16
#define SECRET_HEX 64
#define SALT_HEX 32
#define MAX_FILE_BYTES ((size_t)64 << 20)

const char *goblin_role_name(goblin_role r) {
    switch (r) {
    case GOBLIN_ROLE_RESEARCHER: return "researcher";
    case GOBLIN_ROLE_ADMIN: return "admin";
    default: return NULL;
    }
}

goblin_err goblin_role_from_name(const char *name, goblin_role *out) {
    if (!name || !out) return GOBLIN_EINVAL;
    for (int r = 0; r < GOBLIN_ROLE_COUNT; r++)
        if (strcmp(name, goblin_role_name((goblin_role)r)) == 0) {
            *out = (goblin_role)r;
            return GOBLIN_OK;
        }
    return GOBLIN_EINVAL;
}

static bool is_hex(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
    return true;
}

static bool email_ok(const char *e) {
    size_t n = strlen(e), at = 0;
    if (n < 3 || n > GOBLIN_EMAIL_MAX) return false;
    for (size_t i = 0; i < n; i++) {
        if (e[i] <= ' ' || e[i] > '~') return false;
        if (e[i] == '@') at++;
    }
    return at == 1 && e[0] != '@' && e[n - 1] != '@';
}

/* ---- the file ------------------------------------------------------------------ */

/* The whole file into a new NUL-terminated buffer; a missing file is empty (*buf NULL). */
static goblin_err read_all(int fd, const char *path, char **buf, size_t *len, char *msg,
                           size_t cap) {
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        return goblin__errf(msg, cap, GOBLIN_EIO, "%s is not a regular file", path);
    if ((uint64_t)st.st_size > MAX_FILE_BYTES)
        return goblin__errf(msg, cap, GOBLIN_ELIMIT, "%s is over %zu bytes", path, MAX_FILE_BYTES);
    char *b = goblin__alloc((size_t)st.st_size + 1);
    if (!b) return goblin__errf(msg, cap, GOBLIN_ENOMEM, "out of memory");
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t r = pread(fd, b + got, (size_t)st.st_size - got, (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            goblin__free(b);
            return goblin__errf(msg, cap, GOBLIN_EIO, "cannot read %s: %s", path, strerror(errno));
        }
        if (r == 0) break;
        got += (size_t)r;
    }
    b[got] = 0;
    *buf = b;
    *len = got;
    return GOBLIN_OK;
}

/* Parse one line (NUL-terminated, no newline) into *p; false if malformed. */
static bool parse_line(char *line, goblin__principal *p) {
    char *f[4];
    int n = 0;
    for (char *s = line; *s && n < 5;) {
        while (*s == ' ' || *s == '\t') s++;
        if (!*s) break;
        if (n == 4) return false; /* a fifth field */
        f[n++] = s;
        while (*s && *s != ' ' && *s != '\t') s++;
        if (*s) *s++ = 0;
    }
    if (n != 4) return false;
    if (strlen(f[0]) != ID_HEX || !is_hex(f[0], ID_HEX)) return false;
    if (goblin_role_from_name(f[1], &p->info.role)) return false;
    if (!email_ok(f[2])) return false;
    char *colon = strchr(f[3], ':');
    if (!colon || colon - f[3] != SALT_HEX || !is_hex(f[3], SALT_HEX) ||
        strlen(colon + 1) != 64 || !is_hex(colon + 1, 64))
        return false;
    memcpy(p->info.id, f[0], ID_HEX + 1);
    snprintf(p->info.email, sizeof p->info.email, "%s", f[2]);
    memcpy(p->salt, f[3], SALT_HEX);
    p->salt[SALT_HEX] = 0;
    memcpy(p->hash, colon + 1, 65);
    return true;
}

/* Every entry of @p text (modified: lines are cut) into a new array. */
static goblin_err parse_all(char *text, const char *path, goblin__principal **out, int32_t *n_out,
                            char *msg, size_t cap) {
    int32_t n = 0, cap_e = 0;
    goblin__principal *e = NULL;
    int line_no = 0;
    for (char *s = text; s && *s;) {
        char *nl = strchr(s, '\n');
        if (nl) *nl = 0;
        line_no++;
        size_t l = strlen(s);
        while (l && (s[l - 1] == '\r' || s[l - 1] == ' ' || s[l - 1] == '\t')) s[--l] = 0;
        char *t = s;
        while (*t == ' ' || *t == '\t') t++;
        if (*t && *t != '#') {
            if (n == GOBLIN_PRINCIPALS_MAX) {
                goblin__free(e);
                return goblin__errf(msg, cap, GOBLIN_ELIMIT, "%s holds over %d principals", path,
                                    GOBLIN_PRINCIPALS_MAX);
            }
            if (n == cap_e) {
                int32_t nc = cap_e ? 2 * cap_e : 16;
                goblin__principal *ne = goblin__alloc((size_t)nc * sizeof *ne);
                if (!ne) {
                    goblin__free(e);
                    return goblin__errf(msg, cap, GOBLIN_ENOMEM, "out of memory");
                }
                if (n) memcpy(ne, e, (size_t)n * sizeof *ne);
                goblin__free(e);
                e = ne;
                cap_e = nc;
            }
            if (!parse_line(t, &e[n])) {
                goblin__free(e);
                return goblin__errf(msg, cap, GOBLIN_EFORMAT,
                                    "%s line %d is not \"id role email salt:hash\"", path, line_no);
            }
            for (int32_t i = 0; i < n; i++)
                if (strcmp(e[i].info.id, e[n].info.id) == 0 ||
                    strcasecmp(e[i].info.email, e[n].info.email) == 0) {
                    goblin__free(e);
                    return goblin__errf(msg, cap, GOBLIN_EFORMAT,
                                        "%s line %d repeats an id or an email", path, line_no);
                }
            n++;
        }
        s = nl ? nl + 1 : NULL;
    }
    *out = e;
    *n_out = n;
    return GOBLIN_OK;
}

/* Open (creating if @p create) and lock the file; fd in *fd. */
static goblin_err open_locked_try(const char *path, bool create, int lock, int *fd, int *tries,
                                  char *msg, size_t cap) {
    int f = open(path, (create ? O_RDWR | O_CREAT : O_RDONLY) | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (f < 0) {
        if (!create && errno == ENOENT) {
            *fd = -1;
            return GOBLIN_OK;
        }
        return goblin__errf(msg, cap, GOBLIN_EIO, "cannot open %s: %s", path, strerror(errno));
    }
    while (flock(f, lock) != 0)
        if (errno != EINTR) {
            int s = errno;
            close(f);
            return goblin__errf(msg, cap, GOBLIN_EIO, "cannot lock %s: %s", path, strerror(s));
        }
    /* A writer replaces the file by renaming a new one over it: if that happened while
     * we waited for the lock, we hold the lock of the old file; open the new one. */
    struct stat a, b;
    if (fstat(f, &a) == 0 && stat(path, &b) == 0 && (a.st_ino != b.st_ino || a.st_dev != b.st_dev)) {
        close(f);
        if (++*tries > 100)
            return goblin__errf(msg, cap, GOBLIN_EIO, "%s keeps changing under its lock", path);
        return open_locked_try(path, create, lock, fd, tries, msg, cap);
    }
    *fd = f;
    return GOBLIN_OK;
}

static goblin_err open_locked(const char *path, bool create, int lock, int *fd, char *msg,
                              size_t cap) {
    int tries = 0;
    return open_locked_try(path, create, lock, fd, &tries, msg, cap);
}

static goblin_err load_fd(int fd, const char *path, goblin__principal **e, int32_t *n, char *msg,
                          size_t cap) {
    *e = NULL;
    *n = 0;
    if (fd < 0) return GOBLIN_OK;
    char *text;
    size_t len;
    goblin_err err = read_all(fd, path, &text, &len, msg, cap);
    if (err) return err;
    err = parse_all(text, path, e, n, msg, cap);
    goblin__free(text);
    return err;
}

/* Write @p e[0..n) to @p path atomically (a temporary file renamed over it). */
static goblin_err write_all(const char *path, const goblin__principal *e, int32_t n, char *msg,
                            size_t cap) {
    size_t pl = strlen(path);
    char *tmp = goblin__alloc(pl + 16);
    if (!tmp) return goblin__errf(msg, cap, GOBLIN_ENOMEM, "out of memory");
    snprintf(tmp, pl + 16, "%s.tmp%06d", path, (int)(getpid() % 1000000));
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        goblin_err r = goblin__errf(msg, cap, GOBLIN_EIO, "cannot create %s: %s", tmp, strerror(errno));
        goblin__free(tmp);
        return r;
    }
    FILE *f = fdopen(fd, "w");
    bool ok = f != NULL;
    if (ok) {
        ok = fprintf(f, "# GPU Goblin credentials: id role email salt:hash (goblin/principal.h)\n") > 0;
        for (int32_t i = 0; ok && i < n; i++)
            ok = fprintf(f, "%s %s %s %s:%s\n", e[i].info.id, goblin_role_name(e[i].info.role),
                         e[i].info.email, e[i].salt, e[i].hash) > 0;
        ok = fflush(f) == 0 && ok;
        ok = fsync(fileno(f)) == 0 && ok;
        ok = fclose(f) == 0 && ok;
    } else {
        close(fd);
    }
    if (!ok || rename(tmp, path) != 0) {
        int s = errno;
        unlink(tmp);
        goblin_err r = goblin__errf(msg, cap, GOBLIN_EIO, "cannot write %s: %s", path, strerror(s));
        goblin__free(tmp);
        return r;
    }
    goblin__free(tmp);
    return GOBLIN_OK;
}

/* ---- public calls ----------------------------------------------------------------- */

goblin_err goblin_principal_add(const char *file, const char *email, goblin_role role,
                                char *credential_out, goblin_principal_info *info_out,
                                goblin_errbuf *err) {
    GOBLIN__ERRBUF(err, msg, cap);
    if (!file || !email || !credential_out)
        return goblin__errf(msg, cap, GOBLIN_EINVAL, "NULL argument");
    if (!goblin_role_name(role)) return goblin__errf(msg, cap, GOBLIN_EINVAL, "unknown role %d", role);
    if (!email_ok(email))
        return goblin__errf(msg, cap, GOBLIN_EINVAL,
                            "not an email address: 3 to %d printable characters with one '@'",
                            GOBLIN_EMAIL_MAX);
    int fd;
    goblin_err e = open_locked(file, true, LOCK_EX, &fd, msg, cap);
    if (e) return e;
    goblin__principal *tab;
    int32_t n;
    if ((e = load_fd(fd, file, &tab, &n, msg, cap))) {
        close(fd);
        return e;
    }
    for (int32_t i = 0; i < n; i++)
        if (strcasecmp(tab[i].info.email, email) == 0) {
            goblin__errf(msg, cap, GOBLIN_EBUSY, "%s is already a principal (id %s): revoke it "
                         "first to make a new credential", email, tab[i].info.id);
            goblin__free(tab);
            close(fd);
            return GOBLIN_EBUSY;
        }
    if (n == GOBLIN_PRINCIPALS_MAX) {
        goblin__free(tab);
        close(fd);
        return goblin__errf(msg, cap, GOBLIN_ELIMIT, "%s is full", file);
    }
    goblin__principal *nt = goblin__alloc(((size_t)n + 1) * sizeof *nt);
    if (!nt) {
        goblin__free(tab);
        close(fd);
        return goblin__errf(msg, cap, GOBLIN_ENOMEM, "out of memory");
    }
    if (n) memcpy(nt, tab, (size_t)n * sizeof *nt);
    goblin__free(tab);
    goblin__principal *p = &nt[n];
    memset(p, 0, sizeof *p);
    char id_hex[GOBLIN_TOKEN_SIZE], salt_hex[GOBLIN_TOKEN_SIZE], secret[GOBLIN_TOKEN_SIZE];
    bool unique;
    do { /* ids are random; a repeat (chance 2^-64 per pair) draws again */
        if ((e = goblin_token_generate(id_hex))) break;
        id_hex[ID_HEX] = 0;
        unique = true;
        for (int32_t i = 0; i < n; i++) unique = unique && strcmp(nt[i].info.id, id_hex) != 0;
    } while (!unique);
    if (!e) e = goblin_token_generate(salt_hex);
    if (!e) e = goblin_token_generate(secret);
    if (!e) {
        salt_hex[SALT_HEX] = 0;
        memcpy(p->info.id, id_hex, ID_HEX + 1);
        p->info.role = role;
        snprintf(p->info.email, sizeof p->info.email, "%s", email);
        memcpy(p->salt, salt_hex, SALT_HEX + 1);
        e = goblin_token_hash(secret, p->salt, p->hash);
    }
    if (e) {
        memset(secret, 0, sizeof secret);
        goblin__free(nt);
        close(fd);
        return goblin__errf(msg, cap, GOBLIN_ECRYPTO, "cannot draw random numbers");
    }
    e = write_all(file, nt, n + 1, msg, cap);
    if (!e) {
        snprintf(credential_out, GOBLIN_CREDENTIAL_SIZE, PREFIX "%s_%s", p->info.id, secret);
        if (info_out) *info_out = p->info;
    }
    memset(secret, 0, sizeof secret);
    goblin__free(nt);
    close(fd);
    return e;
}

goblin_err goblin_principal_revoke(const char *file, const char *who, goblin_errbuf *err) {
    GOBLIN__ERRBUF(err, msg, cap);
    if (!file || !who || !*who) return goblin__errf(msg, cap, GOBLIN_EINVAL, "NULL argument");
    int fd;
    goblin_err e = open_locked(file, false, LOCK_EX, &fd, msg, cap);
    if (e) return e;
    if (fd < 0) return goblin__errf(msg, cap, GOBLIN_ENOTFOUND, "%s does not exist", file);
    goblin__principal *tab;
    int32_t n;
    if ((e = load_fd(fd, file, &tab, &n, msg, cap))) {
        close(fd);
        return e;
    }
    int32_t k = -1;
    for (int32_t i = 0; i < n; i++)
        if (strcasecmp(tab[i].info.email, who) == 0 || strcmp(tab[i].info.id, who) == 0) k = i;
    if (k < 0) e = goblin__errf(msg, cap, GOBLIN_ENOTFOUND, "no principal %s in %s", who, file);
    else {
        memmove(&tab[k], &tab[k + 1], (size_t)(n - k - 1) * sizeof *tab);
        e = write_all(file, tab, n - 1, msg, cap);
    }
    goblin__free(tab);
    close(fd);
    return e;
}

goblin_err goblin_principal_list(const char *file, goblin_principal_info *out, int32_t cap_out,
                                 int32_t *n_out, goblin_errbuf *err) {
    GOBLIN__ERRBUF(err, msg, cap);
    if (!file || cap_out < 0 || (cap_out && !out))
        return goblin__errf(msg, cap, GOBLIN_EINVAL, "bad arguments");
    int fd;
    goblin_err e = open_locked(file, false, LOCK_SH, &fd, msg, cap);
    if (e) return e;
    goblin__principal *tab;
    int32_t n;
    e = load_fd(fd, file, &tab, &n, msg, cap);
    if (fd >= 0) close(fd);
    if (e) return e;
    for (int32_t i = 0; i < n && i < cap_out; i++) out[i] = tab[i].info;
    if (n_out) *n_out = n;
    goblin__free(tab);
    return GOBLIN_OK;
}

goblin_err goblin_principal_check(const char *file, const char *credential,
                                  goblin_principal_info *out, goblin_errbuf *err) {
    GOBLIN__ERRBUF(err, msg, cap);
    if (!file || !credential) return goblin__errf(msg, cap, GOBLIN_EINVAL, "NULL argument");
    goblin__principal_table t = {0};
    t.path = (char *)file;
    goblin_err e = goblin__principals_refresh(&t, msg, cap);
    if (!e) {
        e = goblin__principals_authenticate(&t, (const uint8_t *)credential, strlen(credential), out);
        if (e) goblin__errf(msg, cap, e, "the credential is not valid on this node");
    }
    goblin__free(t.e);
    return e;
}

/* ---- the table a gateway holds -------------------------------------------------------- */

goblin_err goblin__principals_refresh(goblin__principal_table *t, char *msg, size_t cap) {
    struct stat st;
    if (stat(t->path, &st) != 0) {
        if (errno != ENOENT)
            return goblin__errf(msg, cap, GOBLIN_EIO, "cannot read %s: %s", t->path, strerror(errno));
        goblin__free(t->e);
        t->e = NULL;
        t->n = 0;
        t->loaded = true;
        t->ino = 0;
        return GOBLIN_OK;
    }
    int64_t mt = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    int64_t ct = (int64_t)st.st_ctim.tv_sec * 1000000000 + st.st_ctim.tv_nsec;
    if (t->loaded && t->dev == (uint64_t)st.st_dev && t->ino == (uint64_t)st.st_ino &&
        t->size == (uint64_t)st.st_size && t->mtime_ns == mt && t->ctime_ns == ct)
        return GOBLIN_OK;
    int fd;
    goblin_err e = open_locked(t->path, false, LOCK_SH, &fd, msg, cap);
    if (e) return e;
    goblin__principal *tab;
    int32_t n;
    if (fd >= 0 && fstat(fd, &st) != 0) {
        close(fd);
        return goblin__errf(msg, cap, GOBLIN_EIO, "cannot read %s", t->path);
    }
    e = load_fd(fd, t->path, &tab, &n, msg, cap);
    if (fd >= 0) close(fd);
    if (e) return e;
    goblin__free(t->e);
    t->e = tab;
    t->n = n;
    t->loaded = true;
    t->dev = (uint64_t)st.st_dev;
    t->ino = fd >= 0 ? (uint64_t)st.st_ino : 0;
    t->size = (uint64_t)st.st_size;
    t->mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    t->ctime_ns = (int64_t)st.st_ctim.tv_sec * 1000000000 + st.st_ctim.tv_nsec;
    return GOBLIN_OK;
}

const goblin__principal *goblin__principals_find(const goblin__principal_table *t, const char *id) {
    for (int32_t i = 0; i < t->n; i++)
        if (strcmp(t->e[i].info.id, id) == 0) return &t->e[i];
    return NULL;
}

goblin_err goblin__principals_authenticate(const goblin__principal_table *t, const uint8_t *cred,
                                           size_t len, goblin_principal_info *out) {
    /* gbr1_<16 hex id>_<64 hex secret> */
    if (len != GOBLIN_CREDENTIAL_SIZE - 1 || memcmp(cred, PREFIX, PREFIX_LEN) != 0 ||
        cred[PREFIX_LEN + ID_HEX] != '_')
        return GOBLIN_EAUTH;
    char id[ID_HEX + 1], secret[SECRET_HEX + 1];
    memcpy(id, cred + PREFIX_LEN, ID_HEX);
    id[ID_HEX] = 0;
    memcpy(secret, cred + PREFIX_LEN + ID_HEX + 1, SECRET_HEX);
    secret[SECRET_HEX] = 0;
    goblin_err e = GOBLIN_EAUTH;
    const goblin__principal *p = is_hex(id, ID_HEX) ? goblin__principals_find(t, id) : NULL;
    char h[GOBLIN_TLS_FINGERPRINT_SIZE];
    if (p && is_hex(secret, SECRET_HEX) && goblin_token_hash(secret, p->salt, h) == GOBLIN_OK) {
        uint8_t diff = 0;
        for (int i = 0; i < 64; i++) diff |= (uint8_t)(h[i] ^ p->hash[i]);
        if (diff == 0) {
            if (out) *out = p->info;
            e = GOBLIN_OK;
        }
    }
    memset(secret, 0, sizeof secret);
    return e;
}

void goblin__principals_clear(goblin__principal_table *t) {
    if (!t) return;
    goblin__free(t->e);
    goblin__free(t->path);
    memset(t, 0, sizeof *t);
}
