/* goblin/npy.h - NumPy .npy files, memory-mapped.
 *
 * The node computes matmul jobs whose operands and result are .npy files on its own
 * disk: goblin_npy_open maps an existing file (read-only or read-write) and
 * goblin_npy_create makes a new one of a given shape and maps it, so a product larger
 * than RAM is written tile by tile through the page cache.
 *
 * Supported: format versions 1.0, 2.0 and 3.0; dtypes '<f4' and '<f8' (also '=' or
 * '|' byte order on this little-endian library); C order; rank 0 .. GOBLIN_MAX_RANK.
 * The header is parsed as hostile bytes: bounded length, a strict Python-literal
 * dict with exactly the keys 'descr', 'fortran_order' and 'shape', overflow-checked
 * shape, and a file size that matches the header exactly.
 *
 * Thread safety: distinct objects are independent; one object's tensor may be read
 * (and, if writable, written) from several threads, as plain memory. */
#ifndef GOBLIN_NPY_H
#define GOBLIN_NPY_H

#include "api.h"
#include "dtype.h"
#include "error.h"
#include "tensor.h"

GOBLIN_BEGIN_DECLS

/** Longest .npy header accepted (bytes, magic and padding included). */
#define GOBLIN_NPY_MAX_HEADER 65536

typedef struct goblin_npy goblin_npy;

/** Parse the header at @p buf (@p len bytes, borrowed; the file's first bytes, at most
 *  GOBLIN_NPY_MAX_HEADER are read). On success fills *dt, *rank, shape[0 .. rank-1]
 *  (@p shape holds GOBLIN_MAX_RANK) and *data_offset. GOBLIN_EFORMAT (not .npy, bad
 *  dict, truncated), GOBLIN_EDTYPE (a dtype other than f32/f64), GOBLIN_ENOTSUP
 *  (Fortran order, big-endian), GOBLIN_ELIMIT (rank or element count too large),
 *  GOBLIN_EINVAL. @p err (may be NULL) says why. */
GOBLIN_API goblin_err goblin_npy_header_parse(const uint8_t *buf, size_t len, goblin_dtype *dt,
                                              int32_t *rank, int64_t *shape,
                                              size_t *data_offset, goblin_errbuf *err);

/** Map the existing file @p path (borrowed). @p writable: map it shared read-write.
 *  *out set on success. Errors of goblin_npy_header_parse, plus GOBLIN_EIO (open, stat,
 *  mmap) and GOBLIN_EFORMAT (file size differs from what the header says). */
GOBLIN_API goblin_err goblin_npy_open(const char *path, bool writable, goblin_npy **out,
                                      goblin_errbuf *err);

/** Create (or truncate) @p path as a .npy of @p dt (f32/f64), @p rank, @p shape (all
 *  borrowed), zero-filled (sparse), and map it read-write. *out set on success.
 *  GOBLIN_EINVAL, GOBLIN_EDTYPE, GOBLIN_ELIMIT, GOBLIN_EIO, GOBLIN_ENOMEM. */
GOBLIN_API goblin_err goblin_npy_create(const char *path, goblin_dtype dt, int32_t rank,
                                        const int64_t *shape, goblin_npy **out,
                                        goblin_errbuf *err);

/** The mapped array as a contiguous tensor (owned by @p f; valid until goblin_npy_close).
 *  Its data is NULL when the array is empty. */
GOBLIN_API goblin_tensor *goblin_npy_tensor(goblin_npy *f);

/** Flush a writable mapping to the file (msync). GOBLIN_EIO. */
GOBLIN_API goblin_err goblin_npy_sync(goblin_npy *f);

/** Unmap and close (a writable mapping is synced first). NULL is a no-op. */
GOBLIN_API void goblin_npy_close(goblin_npy *f);

/** Write @p t (f32/f64, any strides, borrowed) to @p path as a new .npy file.
 *  GOBLIN_EINVAL, GOBLIN_EDTYPE, GOBLIN_EIO, GOBLIN_ENOMEM. */
GOBLIN_API goblin_err goblin_npy_save(const char *path, const goblin_tensor *t, goblin_errbuf *err);

GOBLIN_END_DECLS

#endif
