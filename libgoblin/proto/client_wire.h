/* libgoblin/proto/client_wire.h - the client <-> node-gateway protocol (pure encode/decode).
 *
 * Every message: a 24-byte header then a body, little-endian:
 *   "GBLC"  u16 version (GOBLIN__CW_VERSION)  u8 type  u8 flags(0)  u64 request id  u64 body length
 * Bodies (offsets from the body start; tensors and strings padded to 8 bytes):
 *   SUBMIT_MATMUL        u64 task_memory_bytes, i64 min_tasks, tensor A, tensor B
 *   SUBMIT_MATMUL_FILES  u32 len_a, len_b, len_c, u32 flags (bit 0: overwrite C),
 *                        u64 task_memory_bytes, i64 min_tasks, then the three paths (no NUL)
 *                        (job parameters: 0 = the gateway's setting; min_tasks 0 ..
 *                        GOBLIN__CW_MAX_MIN_TASKS, task_memory_bytes 0 or
 *                        GOBLIN__CW_MIN_TASK_MEMORY .. GOBLIN__CW_MAX_TASK_MEMORY, also in
 *                        SUBMIT_GRAPH)
 *   SUBMIT_GRAPH         u32 n_inputs, u32 n_outputs, u8 verify, u8 have (bit 0 split, bit 1
 *                        combine, bit 2 cache ids), u16 spot_rows, u8 0 x4, f64 min_replication,
 *                        f64 trust_halflife, i64 chunk_rows, u64 task_memory_bytes,
 *                        i64 min_tasks, u64 graph_len, graph (pad 8), [u8 split[n_inputs]
 *                        (pad 8)], [u8 combine[n_outputs] (pad 8)], [u64 cache_ids[n_inputs]],
 *                        tensor[n_inputs]
 *   STATUS/CANCEL/FETCH/RELEASE  job id
 *   STATS                (empty)
 *   PING                 (empty): answered OK, before AUTH too (a client's heartbeat)
 *   AUTH                 u32 len (1 .. GOBLIN__CW_MAX_TOKEN), u32 0, credential bytes (pad 8)
 *   PART                 u64 total, u64 offset, u32 len, u32 flags, bytes (pad 8): a piece of
 *                        one request larger than GOBLIN__CW_PART_MAX (its whole encoding, header
 *                        included), in order; each is answered OK but the last, whose answer is
 *                        the request's. The request id is the whole request's. flags bit 0
 *                        (GOBLIN__CW_PART_NOACK, version 4): no OK for this part; only a
 *                        refusal is answered (once: the request's later parts are then dropped
 *                        unanswered), so a client streams its parts without a round trip each.
 *   SUBMITTED            job id, i64 total tasks
 *   JOB_STATUS           job id, u8 status, u8 0 x3, i32 error, i64 done, i64 total, u32 len,
 *                        u32 0, text
 *   RESULT               job id, u8 has_tensor, u8 0 x7, [tensor]
 *   OUTPUTS              job id, u32 n, u32 0, tensor[n]      (FETCH of a graph job)
 *   STATS_REPLY          u32 n_counters, u32 n_workers, i64 counters[n], workers[n] (152 bytes
 *                        each: counters, identity as 32 bytes, owner NUL-padded to 64)
 *   ERROR                i32 code, u32 len, text
 *   OK                   job id (zero when the request named no job)
 * job id: 16 bytes (goblin_job_id: 128 random bits chosen by the gateway).
 * tensor: u8 dtype, u8 rank, u16 0, u32 0, i64 shape[rank], data (numel * size), pad to 8.
 * The decoder treats every byte as hostile: each read is bounds-checked, lengths are
 * checked against the limits and the bytes left, padding must be zero, trailing bytes
 * are an error, text is printable ASCII. Decoded tensors point into the buffer. */
#ifndef GOBLIN__CLIENT_WIRE_H
#define GOBLIN__CLIENT_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "goblin/client.h"
#include "goblin/error.h"
#include "goblin/node.h"
#include "goblin/tensor.h"
#include "wire.h"

#define GOBLIN__CW_VERSION 4 /* 3: matmul submits carry job parameters; 4: PART flags */
/* Bounds of a remote job's parameters: a client may not make the node plan (and hold
 * the state of) more tasks than this, nor give a budget no task fits or no worker has. */
#define GOBLIN__CW_MAX_MIN_TASKS ((int64_t)1 << 20)
#define GOBLIN__CW_MIN_TASK_MEMORY ((uint64_t)1024)
#define GOBLIN__CW_MAX_TASK_MEMORY ((uint64_t)1 << 48)
#define GOBLIN__CW_ID_BYTES 16
#define GOBLIN__CW_FILE_OVERWRITE 1u /* SUBMIT_MATMUL_FILES: C may already exist */
#define GOBLIN__CW_FILE_FLAGS GOBLIN__CW_FILE_OVERWRITE
#define GOBLIN__CW_HEADER_SIZE 24
#define GOBLIN__CW_MAX_PATH 4096
#define GOBLIN__CW_MAX_TEXT 512
#define GOBLIN__CW_MAX_WORKERS 65536
#define GOBLIN__CW_MAX_COUNTERS 256
#define GOBLIN__CW_WORKER_RECORD 152 /* counters (56), identity (32 bytes), owner (64, NUL-padded) */
#define GOBLIN__CW_MAX_IO GOBLIN_GRAPH_JOB_MAX_IO /* tensors of one graph job, each way */
#define GOBLIN__CW_GRAPH_FIXED 64                 /* SUBMIT_GRAPH bytes before the graph */
#define GOBLIN__CW_MAX_TOKEN GOBLIN_WIRE_MAX_TOKEN_BYTES /* AUTH token bytes */
/* Requests over this many bytes travel as PARTs, so that a gateway never lets one
 * message of more than GOBLIN__CW_WIRE_MAX bytes into memory before it knows who sent it
 * (nng buffers a whole message before the gateway sees it). */
#define GOBLIN__CW_PART_MAX ((size_t)1 << 20)
#define GOBLIN__CW_WIRE_MAX (GOBLIN__CW_PART_MAX + 256)
#define GOBLIN__CW_PART_NOACK 1u /* PART flags: answered only if refused */
#define GOBLIN__CW_PART_FLAGS GOBLIN__CW_PART_NOACK
/* A PART message's bytes before its data: the header and the four fields. */
#define GOBLIN__CW_PART_HEAD (GOBLIN__CW_HEADER_SIZE + 24)

typedef enum goblin__cw_type {
    GOBLIN__CW_SUBMIT_MATMUL = 1,
    GOBLIN__CW_SUBMIT_MATMUL_FILES = 2,
    GOBLIN__CW_STATUS = 3,
    GOBLIN__CW_CANCEL = 4,
    GOBLIN__CW_FETCH = 5,
    GOBLIN__CW_RELEASE = 6,
    GOBLIN__CW_STATS = 7,
    GOBLIN__CW_SUBMIT_GRAPH = 8,
    GOBLIN__CW_AUTH = 9,
    GOBLIN__CW_PART = 10,
    GOBLIN__CW_PING = 11,
    GOBLIN__CW_SUBMITTED = 64,
    GOBLIN__CW_JOB_STATUS = 65,
    GOBLIN__CW_RESULT = 66,
    GOBLIN__CW_STATS_REPLY = 67,
    GOBLIN__CW_ERROR = 68,
    GOBLIN__CW_OK = 69,
    GOBLIN__CW_OUTPUTS = 70,
} goblin__cw_type;

/* One message. Encoding borrows every pointer; decoding points tensors into the
 * decoded buffer and copies paths and text into the struct. */
typedef struct goblin__cw_msg {
    uint8_t type;
    uint64_t request_id;
    goblin_job_id job_id;
    goblin_tensor tensors[2]; /* SUBMIT_MATMUL: A, B; RESULT: [0] if has_tensor */
    /* the job parameters of SUBMIT_MATMUL, SUBMIT_MATMUL_FILES and SUBMIT_GRAPH */
    int64_t min_tasks;
    uint64_t task_memory_bytes;
    bool has_tensor;
    char paths[3][GOBLIN__CW_MAX_PATH + 1]; /* SUBMIT_MATMUL_FILES */
    uint32_t file_flags;      /* SUBMIT_MATMUL_FILES: GOBLIN__CW_FILE_* */
    uint8_t status;           /* JOB_STATUS: a goblin_job_status */
    int32_t code;             /* JOB_STATUS error / ERROR code */
    int64_t done, total;      /* JOB_STATUS; SUBMITTED uses total */
    char text[GOBLIN__CW_MAX_TEXT + 1];
    /* STATS_REPLY */
    goblin_node_stats stats;
    uint32_t n_workers;
    goblin_node_worker_stats *workers; /* decode: allocated (goblin__cw_msg_clear) */
    /* SUBMIT_GRAPH (and OUTPUTS: job_id, n_io, io). Encoding borrows the arrays, and
     * the SUBMIT_GRAPH inputs may have any strides (packed while encoding); decoding
     * allocates io, split, combine and cache_ids in one block (goblin__cw_msg_clear)
     * and points graph and the tensors' data into the buffer. */
    const uint8_t *graph;
    uint64_t graph_len;
    uint32_t n_io;            /* inputs (SUBMIT_GRAPH) or outputs (OUTPUTS) */
    uint32_t n_outputs;       /* SUBMIT_GRAPH: the graph's output count (combine's length) */
    goblin_tensor *io;
    uint8_t *split;           /* NULL or n_io goblin_split values */
    uint8_t *combine;         /* NULL or n_outputs goblin_combine values */
    uint64_t *cache_ids;      /* NULL or n_io */
    uint8_t verify;           /* a goblin_verify */
    uint16_t spot_rows;
    double min_replication, trust_halflife;
    int64_t chunk_rows;
    void *owned;              /* decode: the block behind io/split/combine/cache_ids */
    /* PART: decoding points part_data into the buffer */
    uint64_t part_total, part_offset;
    uint32_t part_len;
    uint32_t part_flags;      /* GOBLIN__CW_PART_* */
    const uint8_t *part_data;
    /* AUTH (copied both ways) */
    uint32_t token_len;
    uint8_t token[GOBLIN__CW_MAX_TOKEN];
} goblin__cw_msg;

typedef struct goblin__cw_limits {
    uint64_t max_message_bytes; /* header + body */
    int64_t max_numel;          /* per tensor */
} goblin__cw_limits;

/* Name of a type for logs ("SUBMIT_MATMUL") or NULL. */
const char *goblin__cw_type_name(uint8_t type);
/* Exact encoded size; GOBLIN_EINVAL for a field out of range (non-contiguous tensor
 * where one must be contiguous, bad dtype, path empty/too long, text too long, a graph
 * job's counts, enums or parameters out of range). */
goblin_err goblin__cw_encoded_size(const goblin__cw_msg *m, size_t *out);
/* Encode into @p buf (@p cap bytes). */
goblin_err goblin__cw_encode_into(const goblin__cw_msg *m, uint8_t *buf, size_t cap, size_t *out_len);
/* Decode @p buf (borrowed, and referenced by tensors in @p out afterwards) into @p out.
 * GOBLIN_EFORMAT, GOBLIN_EPROTO (unknown type/flags), GOBLIN_EVERSION, GOBLIN_ELIMIT,
 * GOBLIN_ENOMEM; @p msg says why and where. On failure @p out holds nothing to free. */
goblin_err goblin__cw_decode(const uint8_t *buf, size_t len, const goblin__cw_limits *lim,
                             goblin__cw_msg *out, char *msg, size_t cap);
/* A request's encoding as pieces, in order, for sending it in PARTs without a copy of
 * the whole: bytes of its own (the header and small fields, written into @p own) and the
 * tensors' data, borrowed. SUBMIT_MATMUL only (GOBLIN_ENOTSUP for another type);
 * *n_pieces <= GOBLIN__CW_PIECES_MAX; *total: the encoded size. The pieces are exactly
 * what goblin__cw_encode_into writes. */
#define GOBLIN__CW_PIECES_MAX 5
#define GOBLIN__CW_PIECES_OWN 256
typedef struct goblin__cw_piece {
    const uint8_t *p;
    size_t n;
} goblin__cw_piece;
goblin_err goblin__cw_encode_pieces(const goblin__cw_msg *m, uint8_t own[GOBLIN__CW_PIECES_OWN],
                                    goblin__cw_piece *pieces, int *n_pieces, size_t *total);
/* The GOBLIN__CW_PART_HEAD bytes of a PART of request @p rid carrying @p len bytes at
 * @p offset of @p total (the data and its zero padding to 8 follow, the sender's). */
void goblin__cw_put_part_head(uint8_t *buf, uint64_t rid, uint64_t total, uint64_t offset, uint32_t len,
                              uint32_t flags);
/* The size of such a PART message. */
size_t goblin__cw_part_size(uint32_t len);
/* Free what decode allocated (workers, the graph job arrays); the struct is then reusable. */
void goblin__cw_msg_clear(goblin__cw_msg *m);

#endif
