/* libgoblin/service/data_dir.h - the directories a gateway's file jobs may touch
 * (internal). Paths from clients are hostile: each is resolved (symbolic links and ".."
 * followed) and must end inside one of the roots, and the file actually opened is
 * checked again through /proc/self/fd, so a link swapped in between the check and the
 * open cannot lead out. A path that is missing, unreadable or outside the roots gets
 * one and the same answer, so replies reveal nothing about the rest of the disk. */
#ifndef GOBLIN__SERVICE_DATA_DIR_H
#define GOBLIN__SERVICE_DATA_DIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "goblin/error.h"

#define GOBLIN__DATA_DIRS_MAX 8

typedef struct goblin__data_dirs {
    char *root[GOBLIN__DATA_DIRS_MAX]; /* resolved (realpath), no trailing '/' */
    int32_t n;
} goblin__data_dirs;

/** Resolve @p dirs (each must be an existing directory). GOBLIN_EINVAL, GOBLIN_ENOMEM. */
goblin_err goblin__data_dirs_init(goblin__data_dirs *d, const char *const *dirs, int32_t n,
                                  char *msg, size_t cap);
void goblin__data_dirs_clear(goblin__data_dirs *d);
/** Open @p path (relative paths are taken from the first root) read-only into *fd.
 *  GOBLIN_ENOTFOUND (missing, unreadable or outside: one message), GOBLIN_EINVAL. */
goblin_err goblin__data_dir_open(const goblin__data_dirs *d, const char *what, const char *path,
                                 int *fd, char *msg, size_t cap);
/** Create @p path read-write into *fd: a new file (O_EXCL) unless @p overwrite, never
 *  through a symbolic link, its directory inside a root. GOBLIN_ENOTFOUND (the
 *  directory is missing or outside), GOBLIN_EBUSY (exists and not @p overwrite),
 *  GOBLIN_EINVAL (not a file name), GOBLIN_EIO. */
goblin_err goblin__data_dir_create(const goblin__data_dirs *d, const char *what, const char *path,
                                   bool overwrite, int *fd, char *msg, size_t cap);

#endif
