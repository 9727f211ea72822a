/* libgoblin/proto/wire.h - the message framing between nodes, workers and clients.
 *
 * Pure encode/decode of one message to and from a byte buffer; no sockets.
 * The transport (nng) carries whole messages; a stream transport can frame them
 * with goblin__wire_header_decode, which says how long the body is. Since protocol
 * 1.1 one nng message may carry a batch of messages (goblin__wire_batch_next).
 *
 * Every message is a 24-byte header followed by a body (all little-endian):
 *
 *   "GBLW"  u16 protocol version  u8 type  u8 flags  u64 request id  u64 body length
 *
 * The layout of each body is in docs/wire-protocol.md. The encoding is canonical:
 * a buffer the decoder accepts re-encodes to exactly the same bytes.
 *
 * The decoder treats every byte as hostile: each read is bounds-checked, every
 * count and length is checked against the limits and against the bytes actually
 * left before anything is allocated, and a decode allocates at most once, after the
 * whole message has been validated. Messages carry numbers, shapes and opaque
 * bytes only: no names of any kind.
 *
 * Thread safety: all functions are reentrant; a decoded message may be read from
 * several threads at once. */
#ifndef GOBLIN__PROTO_WIRE_H
#define GOBLIN__PROTO_WIRE_H

#include "goblin/api.h"
#include "goblin/error.h"
#include "goblin/graph.h"
#include "goblin/tensor.h"
#include "goblin/version.h"

/** Protocol version of this library; peers must speak exactly this one. (Protocol 1.1,
 *  batches, is negotiated in HELLO / HELLO_ACK and does not change this number.) */
#define GOBLIN_WIRE_VERSION GOBLIN_PROTOCOL_VERSION
/** Size of the fixed header that starts every message. */
#define GOBLIN_WIRE_HEADER_SIZE 24

/* Hard caps: the encoder never produces more, and decode limits are clamped to them. */
#define GOBLIN_WIRE_MAX_MESSAGE_BYTES ((uint64_t)1 << 32) /* header + body */
#define GOBLIN_WIRE_MAX_TENSORS 1024                      /* per TASK or RESULT */
#define GOBLIN_WIRE_MAX_TOKEN_BYTES 256                   /* HELLO join token */
#define GOBLIN_WIRE_MAX_TEXT_BYTES 512                    /* REFUSE / ERROR message */
#define GOBLIN_WIRE_MAX_SLOTS 4096                        /* LEASE_REQUEST */
#define GOBLIN_WIRE_MAX_THREADS 65536                     /* HELLO */
#define GOBLIN_WIRE_NONCE_BYTES 32                        /* CHALLENGE */
#define GOBLIN_WIRE_MAX_KEY_BYTES 256                     /* PROOF public key */
#define GOBLIN_WIRE_MAX_SIG_BYTES 256                     /* PROOF signature */
#define GOBLIN_WIRE_TICKET_BYTES 32                       /* INTRODUCE */
#define GOBLIN_WIRE_MAX_URL_BYTES 256                     /* INTRODUCE */

/** Header flags (protocol 1.1). Each is valid on the message types named; the decoder
 *  rejects any other flag (GOBLIN_EPROTO), as version 1.0 decoders reject every flag. */
/** HELLO_ACK only: the node takes batches (goblin__wire_batch_next) and sends TASKs in
 *  batches. A node sets it only for a worker whose HELLO offered GOBLIN_WIRE_CAP_BATCH. */
#define GOBLIN_WIRE_FLAG_BATCH 0x01u

/** HELLO capability bits, carried in the high byte of `backends` (bits 24..31: no
 *  backend kind will ever use them). A 1.0 node keeps backend bits it does not know,
 *  so a worker offering a capability still joins an old node, which ignores it. */
#define GOBLIN_WIRE_CAP_MASK 0xff000000u
/** The worker takes batches of TASKs and, if the node's HELLO_ACK has
 *  GOBLIN_WIRE_FLAG_BATCH, answers them in batches. */
#define GOBLIN_WIRE_CAP_BATCH 0x80000000u
/** The worker follows an INTRODUCE (a hub's direct introduction to a lab node). */
#define GOBLIN_WIRE_CAP_INTRO 0x40000000u

/** Messages in a batch start at offsets that are multiples of this. */
#define GOBLIN_WIRE_BATCH_ALIGN 8

/** This library's version as one number for HELLO: major << 16 | minor << 8 | patch. */
#define GOBLIN_WIRE_SOFTWARE_VERSION                                                     \
    (((uint32_t)GOBLIN_VERSION_MAJOR << 16) | ((uint32_t)GOBLIN_VERSION_MINOR << 8) |    \
     (uint32_t)GOBLIN_VERSION_PATCH)

/** Message types. Values are on the wire: explicit and append-only. */
typedef enum goblin__wire_type {
    GOBLIN_WIRE_TYPE_HELLO = 1,         /* worker -> node: who I am, what I can do */
    GOBLIN_WIRE_TYPE_HELLO_ACK = 2,     /* node -> worker: accepted */
    GOBLIN_WIRE_TYPE_REFUSE = 3,        /* node -> worker: not accepted (then close) */
    GOBLIN_WIRE_TYPE_LEASE_REQUEST = 4, /* worker -> node: send me up to N tasks */
    GOBLIN_WIRE_TYPE_TASK = 5,          /* node -> worker: one leased task */
    GOBLIN_WIRE_TYPE_RESULT = 6,        /* worker -> node: a task's outputs */
    GOBLIN_WIRE_TYPE_ABANDON = 7,       /* either way: this lease is given up */
    GOBLIN_WIRE_TYPE_HEARTBEAT = 8,     /* either way: still alive */
    GOBLIN_WIRE_TYPE_ERROR = 9,         /* either way: a request or task failed */
    GOBLIN_WIRE_TYPE_CHALLENGE = 10,    /* node -> worker: prove your identity (protocol 2) */
    GOBLIN_WIRE_TYPE_PROOF = 11,        /* worker -> node: public key and signature */
    GOBLIN_WIRE_TYPE_INTRODUCE = 12,    /* hub -> worker: dial this lab node yourself */
    GOBLIN_WIRE_TYPE_COUNT
} goblin__wire_type;

/** Name of a message type ("TASK"), or NULL if unknown. */
const char *goblin__wire_type_name(goblin__wire_type type);

/** The fixed header, as goblin__wire_header_decode reports it. */
typedef struct goblin__wire_header {
    uint16_t version;
    uint8_t type;       /* a goblin__wire_type, possibly unknown */
    uint8_t flags;      /* GOBLIN_WIRE_FLAG_* (protocol 1.1); 0 unless one applies */
    uint64_t request_id;
    uint64_t body_len;
} goblin__wire_header;

/* Message bodies. In a decoded message every pointer points into memory the
 * message owns (or, with GOBLIN_WIRE_DECODE_ZERO_COPY, into the decoded buffer).
 * For encoding every pointer is borrowed for the duration of the call. */

/** HELLO: sent first by a worker. */
typedef struct goblin__wire_hello {
    uint32_t catalog_version;  /* goblin_catalog_version() */
    uint32_t software_version; /* GOBLIN_WIRE_SOFTWARE_VERSION; informational */
    uint32_t backends;         /* bit (1 << goblin_backend_kind) per backend, plus
                                  GOBLIN_WIRE_CAP_* bits; not 0. Unknown bits are
                                  kept: a newer worker may have more */
    uint32_t threads;          /* 1 .. GOBLIN_WIRE_MAX_THREADS */
    uint64_t memory_bytes;     /* memory budget for tasks */
    uint32_t token_len;        /* 0 .. GOBLIN_WIRE_MAX_TOKEN_BYTES */
    const uint8_t *token;      /* opaque join token; NULL when token_len is 0 */
} goblin__wire_hello;

/** HELLO_ACK: the node accepted the worker. */
typedef struct goblin__wire_hello_ack {
    uint32_t catalog_version;   /* the node's; equal to the worker's */
    uint32_t software_version;
    uint64_t session_id;        /* the node's name for this worker in its logs */
    uint32_t heartbeat_ms;      /* send a HEARTBEAT at least this often; 0 = never */
    uint64_t max_message_bytes; /* the node receives no larger message;
                                   GOBLIN_WIRE_HEADER_SIZE .. GOBLIN_WIRE_MAX_MESSAGE_BYTES */
} goblin__wire_hello_ack;

/** REFUSE and ERROR carry a goblin_err and a short message for logs. The message
 *  is printable ASCII (0x20..0x7e) only, at most GOBLIN_WIRE_MAX_TEXT_BYTES: the
 *  encoder replaces other bytes with '?' and truncates; the decoder rejects them
 *  (a peer must not be able to write control characters into our logs). */
typedef struct goblin__wire_refuse {
    goblin_err reason;   /* 1 .. 65535; codes this library does not know are kept */
    const char *message; /* NUL-terminated; NULL encodes as "" */
} goblin__wire_refuse;

typedef struct goblin__wire_error {
    goblin_err code;     /* 1 .. 65535 */
    uint64_t task_id;    /* the task that failed, 0 if the error is not about a task */
    const char *message; /* as for REFUSE */
} goblin__wire_error;

/** CHALLENGE: the node's answer to a HELLO it may accept: a fresh secret nonce. */
typedef struct goblin__wire_challenge {
    uint8_t nonce[GOBLIN_WIRE_NONCE_BYTES];
} goblin__wire_challenge;

/** PROOF: the worker's public key (opaque here: DER SubjectPublicKeyInfo; the node
 *  checks its form) and its signature of the proof digest (net/worker_key.h: the nonce,
 *  the HELLO's bytes, the key). */
typedef struct goblin__wire_proof {
    uint32_t key_len; /* 1 .. GOBLIN_WIRE_MAX_KEY_BYTES */
    const uint8_t *key;
    uint32_t sig_len; /* 1 .. GOBLIN_WIRE_MAX_SIG_BYTES */
    const uint8_t *sig;
} goblin__wire_proof;

/** INTRODUCE: a hub's answer, instead of HELLO_ACK, to a worker whose HELLO offered
 *  GOBLIN_WIRE_CAP_INTRO and whose PROOF the hub checked: dial the lab node at @p url
 *  (tls+tcp:// with the certificate whose SHA-256 is @p fingerprint, or tcp:// on a
 *  loopback address with an all-zero fingerprint) and present @p ticket as the HELLO's
 *  token; the hub's connection ends. */
typedef struct goblin__wire_introduce {
    uint8_t ticket[GOBLIN_WIRE_TICKET_BYTES];
    uint8_t fingerprint[32];
    const char *url; /* NUL-terminated, 1 .. GOBLIN_WIRE_MAX_URL_BYTES bytes of 0x21..0x7e */
} goblin__wire_introduce;

/** LEASE_REQUEST: the worker can take @p slots more tasks. */
typedef struct goblin__wire_lease_request {
    uint32_t slots; /* 1 .. GOBLIN_WIRE_MAX_SLOTS */
} goblin__wire_lease_request;

/** TASK: a serialized graph (goblin_graph_serialize; opaque here: the receiver
 *  decodes it with goblin_graph_deserialize) and its input tensors in order.
 *  Tensors are contiguous; their data pointers are read-only in a decoded message. */
typedef struct goblin__wire_task {
    uint64_t task_id;
    uint32_t lease_ms;     /* the lease lasts this long from receipt; >= 1. A duration,
                              not a time: workers' clocks are not synchronized */
    uint64_t graph_len;    /* >= 1 */
    const uint8_t *graph;
    int32_t n_inputs;      /* 0 .. GOBLIN_WIRE_MAX_TENSORS */
    goblin_tensor *inputs; /* encoding: must be contiguous, data non-NULL unless empty */
} goblin__wire_task;

/** RESULT: the outputs of a task, in the graph's output order. */
typedef struct goblin__wire_result {
    uint64_t task_id;
    int32_t n_outputs;      /* 0 .. GOBLIN_WIRE_MAX_TENSORS */
    goblin_tensor *outputs; /* as TASK inputs */
} goblin__wire_result;

/** ABANDON: the lease on @p task_id is given up (the node reissues it). */
typedef struct goblin__wire_abandon {
    uint64_t task_id;
} goblin__wire_abandon;

/** HEARTBEAT: the sender is alive and runs @p active_tasks tasks. */
typedef struct goblin__wire_heartbeat {
    uint32_t active_tasks;
} goblin__wire_heartbeat;

/** One message: the header fields and the body that @p type selects. */
typedef struct goblin__wire_msg {
    goblin__wire_type type;
    uint16_t version;    /* GOBLIN_WIRE_VERSION (the encoder always writes its own) */
    uint8_t flags;       /* header flags, GOBLIN_WIRE_FLAG_*: 0 unless the type allows
                            one (the encoder refuses others with GOBLIN_EINVAL) */
    uint64_t request_id; /* chosen by the sender of a request; replies echo it */
    union {
        goblin__wire_hello hello;
        goblin__wire_hello_ack hello_ack;
        goblin__wire_refuse refuse;
        goblin__wire_lease_request lease_request;
        goblin__wire_task task;
        goblin__wire_result result;
        goblin__wire_abandon abandon;
        goblin__wire_heartbeat heartbeat;
        goblin__wire_error error;
        goblin__wire_challenge challenge;
        goblin__wire_proof proof;
        goblin__wire_introduce introduce;
    } body;
} goblin__wire_msg;

/** Zero @p m and set its type and version; for HELLO and HELLO_ACK also the
 *  catalogue and software versions of this library. GOBLIN_EINVAL if @p m is NULL
 *  or @p type unknown. */
goblin_err goblin__wire_msg_init(goblin__wire_msg *m, goblin__wire_type type);

/** Exact encoded size of @p m in *out_len. Validates @p m as goblin__wire_encode does. */
goblin_err goblin__wire_encoded_size(const goblin__wire_msg *m, size_t *out_len);

/** Encode @p m (borrowed) into a new buffer (*out_buf, release with
 *  goblin_buffer_free). GOBLIN_EINVAL for a field out of its documented range
 *  (unknown type or dtype, bad rank or dims, non-contiguous tensor, NULL data),
 *  GOBLIN_ELIMIT if over a hard cap, GOBLIN_ENOMEM. Outputs are set only on success. */
goblin_err goblin__wire_encode(const goblin__wire_msg *m, uint8_t **out_buf,
                                         size_t *out_len);

/** Encode @p m into @p buf (caller's, @p cap bytes), e.g. the body of an nng message
 *  sized with goblin__wire_encoded_size. GOBLIN_ELIMIT if it does not fit; otherwise as
 *  goblin__wire_encode. */
goblin_err goblin__wire_encode_into(const goblin__wire_msg *m, uint8_t *buf,
                                              size_t cap, size_t *out_len);

/** Limits the decoder enforces; fill with goblin__wire_limits_default(), then tighten
 *  (values above the hard caps are clamped to them). Set nng's NNG_OPT_RECVMAXSZ to
 *  max_message_bytes so oversized messages are dropped before they are received. */
typedef struct goblin__wire_limits {
    uint64_t max_message_bytes; /* header + body; default GOBLIN_WIRE_MAX_MESSAGE_BYTES */
    uint32_t max_tensors;       /* per message; default GOBLIN_WIRE_MAX_TENSORS */
    uint64_t max_tensor_bytes;  /* all tensor data of one message together */
    int64_t max_numel;          /* per tensor; default GOBLIN_MAX_NUMEL */
    uint64_t max_graph_bytes;   /* TASK graph blob; default GOBLIN_WIRE_MAX_MESSAGE_BYTES */
} goblin__wire_limits;

void goblin__wire_limits_default(goblin__wire_limits *l);

/** Decode flags. */
enum {
    /** Let tensor data and the TASK graph point into the decoded buffer instead of
     *  copying them, where the data is aligned for its dtype (it always is when the
     *  buffer is 8-byte aligned: the format pads tensor data to 8-byte offsets). The
     *  buffer must then stay alive and unchanged until goblin__wire_msg_free. */
    GOBLIN_WIRE_DECODE_ZERO_COPY = 1
};

/** Decode and validate the header at @p buf (@p len bytes, borrowed; only the first
 *  GOBLIN_WIRE_HEADER_SIZE are read), for stream framing and to learn a bad message's
 *  request id. Fills *out whenever a whole header with the right magic is there, even
 *  when it then fails: GOBLIN_EVERSION (protocol version differs; @p err_msg names
 *  both), GOBLIN_EPROTO (unknown type or flags), GOBLIN_ELIMIT (body longer than
 *  @p limits allow; NULL = defaults). GOBLIN_EFORMAT for short input or a bad magic.
 *  @p err_msg (if not NULL, @p err_cap bytes) says why. */
goblin_err goblin__wire_header_decode(const uint8_t *buf, size_t len,
                                                const goblin__wire_limits *limits,
                                                goblin__wire_header *out, char *err_msg,
                                                size_t err_cap);

/** Decode one whole message (@p len bytes at @p buf, borrowed unless ZERO_COPY) into a
 *  new message (*out; release with goblin__wire_msg_free). Errors: GOBLIN_EFORMAT
 *  (truncated, trailing bytes, non-zero padding, bad field), GOBLIN_EPROTO (unknown
 *  type or flags), GOBLIN_EVERSION (protocol version, or a HELLO / HELLO_ACK whose
 *  catalogue version differs from goblin_catalog_version(); @p err_msg names both
 *  numbers), GOBLIN_ELIMIT (over @p limits; NULL = defaults), GOBLIN_ENOMEM,
 *  GOBLIN_EINVAL (NULL @p out or unknown @p flags). On failure *out is untouched and
 *  @p err_msg (if not NULL, @p err_cap bytes) says why and at which byte offset. */
goblin_err goblin__wire_decode(const uint8_t *buf, size_t len,
                                         const goblin__wire_limits *limits, uint32_t flags,
                                         goblin__wire_msg **out, char *err_msg, size_t err_cap);

/** Walk a batch (protocol 1.1): one transport message holding one or more whole
 *  messages, each starting at an offset that is a multiple of GOBLIN_WIRE_BATCH_ALIGN
 *  (1..7 zero bytes follow a message whose length is not, unless it is the last). A
 *  single message is a batch of one. Call with *off = 0, then as long as *off < len:
 *
 *      size_t off = 0, ml;
 *      do {
 *          size_t at = off;
 *          if (goblin__wire_batch_next(buf, len, &off, lim, &ml, err, cap)) break; // bad
 *          goblin__wire_decode(buf + at, ml, lim, ...);
 *      } while (off < len);
 *
 *  On success *msg_len is the length of the message at the old *off (its header was
 *  checked as goblin__wire_header_decode does, its body is all there) and *off moves
 *  past it and its padding. GOBLIN_EFORMAT for a truncated message or header, non-zero
 *  padding, padding or bytes after the last message, or an empty @p buf;
 *  GOBLIN_EVERSION / GOBLIN_EPROTO / GOBLIN_ELIMIT from the header; GOBLIN_EINVAL for
 *  NULL pointers or an *off that is past @p len or not aligned. On failure *off is
 *  unchanged and @p err_msg says why and at which byte of the batch. */
goblin_err goblin__wire_batch_next(const uint8_t *buf, size_t len, size_t *off,
                                             const goblin__wire_limits *limits, size_t *msg_len,
                                             char *err_msg, size_t err_cap);

/** Free a message from goblin__wire_decode; NULL is a no-op. */
void goblin__wire_msg_free(goblin__wire_msg *m);

#endif
