/* libgoblin/io/npy_fd.h - .npy files over descriptors the caller opened (internal): for
 * callers that must decide themselves how a path is resolved (the gateway's data
 * directories: no symbolic links out, outputs created O_EXCL). */
#ifndef GOBLIN__IO_NPY_FD_H
#define GOBLIN__IO_NPY_FD_H

#include "goblin/npy.h"

/** goblin_npy_open over @p fd (consumed: closed whatever happens); @p path names the
 *  file in messages. */
goblin_err goblin__npy_open_fd(int fd, const char *path, bool writable, goblin_npy **out,
                               goblin_errbuf *err);
/** goblin_npy_create over @p fd (opened read-write; consumed): truncated and written. */
goblin_err goblin__npy_create_fd(int fd, const char *path, goblin_dtype dt, int32_t rank,
                                 const int64_t *shape, goblin_npy **out, goblin_errbuf *err);

#endif
