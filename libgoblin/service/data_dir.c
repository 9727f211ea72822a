/* libgoblin/service/data_dir.c - resolving client paths inside the gateway's data
 * directories (data_dir.h). */
#include "data_dir.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/errf.h"

goblin_err goblin__data_dirs_init(goblin__data_dirs *d, const char *const *dirs, int32_t n,
                                  char *msg, size_t cap) {
    memset(d, 0, sizeof *d);
    if (n < 0 || n > GOBLIN__DATA_DIRS_MAX || (n && !dirs))
        return goblin__errf(msg, cap, GOBLIN_EINVAL, "0 to %d data directories", GOBLIN__DATA_DIRS_MAX);
    for (int32_t i = 0; i < n; i++) {
        char buf[PATH_MAX];
        struct stat st;
        if (!dirs[i] || !realpath(dirs[i], buf) || stat(buf, &st) != 0 || !S_ISDIR(st.st_mode)) {
            goblin__data_dirs_clear(d);
            return goblin__errf(msg, cap, GOBLIN_EINVAL, "data directory %s is not a directory",
                                dirs[i] ? dirs[i] : "(null)");
        }
        size_t l = strlen(buf);
        while (l > 1 && buf[l - 1] == '/') buf[--l] = 0;
        if (!(d->root[i] = goblin__strdup(buf))) {
            goblin__data_dirs_clear(d);
            return goblin__errf(msg, cap, GOBLIN_ENOMEM, "out of memory");
        }
        d->n = i + 1;
    }
    return GOBLIN_OK;
}

void goblin__data_dirs_clear(goblin__data_dirs *d) {
    for (int32_t i = 0; i < GOBLIN__DATA_DIRS_MAX; i++) goblin__free(d->root[i]);
    memset(d, 0, sizeof *d);
}

/* Is resolved path @p p inside a root (or, if @p may_be_root, a root itself)? */
static bool inside(const goblin__data_dirs *d, const char *p, bool may_be_root) {
    for (int32_t i = 0; i < d->n; i++) {
        const char *r = d->root[i];
        size_t l = strlen(r);
        if (l == 1 && r[0] == '/') return p[0] == '/' && (may_be_root || p[1]);
        if (strncmp(p, r, l) == 0 && (p[l] == '/' || (may_be_root && p[l] == 0))) return true;
    }
    return false;
}

/* Is the object behind descriptor @p fd inside a root? Read back from the kernel, so
 * it names what was opened, not what the path said before. */
static bool fd_inside(const goblin__data_dirs *d, int fd, bool may_be_root) {
    char link[64], real[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, real, sizeof real - 1);
    if (n <= 0) return false; /* no /proc: refuse rather than trust the path */
    real[n] = 0;
    return inside(d, real, may_be_root);
}

/* The path as the node sees it: relative ones start in the first root. */
static bool full_path(const goblin__data_dirs *d, const char *path, char *out, size_t cap) {
    int k = path[0] == '/' ? snprintf(out, cap, "%s", path)
                           : snprintf(out, cap, "%s/%s", d->root[0], path);
    return k > 0 && (size_t)k < cap;
}

static goblin_err not_found(char *msg, size_t cap, const char *what, const char *path) {
    return goblin__errf(msg, cap, GOBLIN_ENOTFOUND,
                        "%s: no readable file %.300s in the node's data directories", what, path);
}

goblin_err goblin__data_dir_open(const goblin__data_dirs *d, const char *what, const char *path,
                                 int *fd, char *msg, size_t cap) {
    if (!d->n) return goblin__errf(msg, cap, GOBLIN_ENOTSUP, "this node takes no file jobs");
    if (!path || !*path) return goblin__errf(msg, cap, GOBLIN_EINVAL, "%s: empty path", what);
    char full[PATH_MAX], real[PATH_MAX];
    if (!full_path(d, path, full, sizeof full) || !realpath(full, real) || !inside(d, real, false))
        return not_found(msg, cap, what, path);
    int f = open(real, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (f < 0) return not_found(msg, cap, what, path);
    struct stat st;
    if (!fd_inside(d, f, false) || fstat(f, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(f);
        return not_found(msg, cap, what, path);
    }
    *fd = f;
    return GOBLIN_OK;
}

goblin_err goblin__data_dir_create(const goblin__data_dirs *d, const char *what, const char *path,
                                   bool overwrite, int *fd, char *msg, size_t cap) {
    if (!d->n) return goblin__errf(msg, cap, GOBLIN_ENOTSUP, "this node takes no file jobs");
    if (!path || !*path) return goblin__errf(msg, cap, GOBLIN_EINVAL, "%s: empty path", what);
    char full[PATH_MAX], real[PATH_MAX];
    if (!full_path(d, path, full, sizeof full))
        return goblin__errf(msg, cap, GOBLIN_EINVAL, "%s: path too long", what);
    char *slash = strrchr(full, '/');
    const char *base = slash + 1; /* full always holds a '/' */
    if (!*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
        return goblin__errf(msg, cap, GOBLIN_EINVAL, "%s: %.300s does not name a file", what, path);
    *slash = 0;
    const char *dir = full[0] ? full : "/";
    if (!realpath(dir, real) || !inside(d, real, true))
        return goblin__errf(msg, cap, GOBLIN_ENOTFOUND,
                            "%s: no directory for %.300s in the node's data directories", what, path);
    int dfd = open(real, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0 || !fd_inside(d, dfd, true)) {
        if (dfd >= 0) close(dfd);
        return goblin__errf(msg, cap, GOBLIN_ENOTFOUND,
                            "%s: no directory for %.300s in the node's data directories", what, path);
    }
    int flags = O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | (overwrite ? 0 : O_EXCL);
    int f = openat(dfd, base, flags, 0644);
    int saved = errno;
    close(dfd);
    if (f < 0) {
        if (saved == EEXIST)
            return goblin__errf(msg, cap, GOBLIN_EBUSY,
                                "%s: %.300s exists (ask for overwrite to replace it)", what, path);
        if (saved == ELOOP)
            return goblin__errf(msg, cap, GOBLIN_EINVAL, "%s: %.300s is a symbolic link", what, path);
        return goblin__errf(msg, cap, GOBLIN_EIO, "%s: cannot create %.300s: %s", what, path,
                            strerror(saved));
    }
    struct stat st;
    if (fstat(f, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(f);
        return goblin__errf(msg, cap, GOBLIN_EINVAL, "%s: %.300s is not a regular file", what, path);
    }
    *fd = f;
    return GOBLIN_OK;
}
