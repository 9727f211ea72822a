/* tools/common/tool_common.h - what goblin-node and goblin-worker share: log lines to
 * stderr, exit codes from goblin_err, and small argument parsers. Header-only
 * (static functions) so that each tool stays a thin pair of files. */
#ifndef GOBLIN_TOOL_COMMON_H
#define GOBLIN_TOOL_COMMON_H

#include <goblin/goblin.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* Exit codes (documented in --help). */
enum {
    TOOL_EXIT_OK = 0,
    TOOL_EXIT_FAILURE = 1,  /* anything not below */
    TOOL_EXIT_USAGE = 2,    /* bad command line or parameters (GOBLIN_EINVAL) */
    TOOL_EXIT_NETWORK = 3,  /* cannot listen/connect, peer gone (EIO, ECONNREFUSED, ETIMEDOUT, ECLOSED) */
    TOOL_EXIT_AUTH = 4,     /* refused: token, certificate, fingerprint (EAUTH, ECRYPTO) */
    TOOL_EXIT_VERSION = 5,  /* protocol or catalogue version mismatch (EVERSION) */
    TOOL_EXIT_NOMEM = 6,    /* out of memory */
    TOOL_EXIT_BUSY = 7,     /* a file already exists (EBUSY; `init` without --force) */
};

static inline int tool_exit_code(goblin_err e) {
    switch (e) {
    case GOBLIN_OK: return TOOL_EXIT_OK;
    case GOBLIN_EINVAL: return TOOL_EXIT_USAGE;
    case GOBLIN_EIO: case GOBLIN_ECONNREFUSED: case GOBLIN_ETIMEDOUT: case GOBLIN_ECLOSED:
        return TOOL_EXIT_NETWORK;
    case GOBLIN_EAUTH: case GOBLIN_ECRYPTO: return TOOL_EXIT_AUTH;
    case GOBLIN_EVERSION: return TOOL_EXIT_VERSION;
    case GOBLIN_ENOMEM: return TOOL_EXIT_NOMEM;
    case GOBLIN_EBUSY: return TOOL_EXIT_BUSY;
    default: return TOOL_EXIT_FAILURE;
    }
}

#define TOOL_EXIT_CODES_HELP                                                              \
    "Exit codes: 0 ok, 1 failure, 2 usage, 3 network (listen/connect), 4 authentication\n" \
    "(token, certificate, fingerprint), 5 version mismatch, 6 out of memory, 7 busy.\n"

/* The tool's name, set by main, for log lines. */
static const char *tool_name = "goblin";

/* A goblin_log_fn: "2026-01-02T03:04:05.678Z goblin-node INFO  message" on stderr. */
static inline void tool_log(void *user, goblin_log_level level, const char *line) {
    (void)user;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[32];
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    static const char *names[] = {"ERROR", "WARN ", "INFO ", "DEBUG"};
    fprintf(stderr, "%s.%03ldZ %s %s %s\n", when, ts.tv_nsec / 1000000L, tool_name,
            (unsigned)level < 4 ? names[level] : "?    ", line);
}

/* printf-style log through tool_log, if @p level <= @p max. */
static inline void tool_logf(goblin_log_level max, goblin_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline void tool_logf(goblin_log_level max, goblin_log_level level, const char *fmt, ...) {
    if (level > max) return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    tool_log(NULL, level, line);
}

static inline bool tool_parse_level(const char *s, goblin_log_level *out) {
    for (int i = 0; i < GOBLIN_LOG_LEVEL_COUNT; i++)
        if (strcasecmp(s, goblin_log_level_name((goblin_log_level)i)) == 0) {
            *out = (goblin_log_level)i;
            return true;
        }
    if (strcasecmp(s, "warning") == 0) {
        *out = GOBLIN_LOG_WARN;
        return true;
    }
    return false;
}

/* Decimal integer in [lo, hi]. */
static inline bool tool_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

/* Bytes with an optional K, M, G, T suffix (powers of 1024; "KiB" etc. also taken):
 * the library's goblin_size_parse, shared with the Python package. */
static inline bool tool_parse_bytes(const char *s, uint64_t *out) {
    return goblin_size_parse(s, out) == GOBLIN_OK;
}

/* Is @p url's host a loopback address (or an ipc:// / inproc:// URL)? Only such
 * addresses may be listened on in plain text without --insecure-plaintext. */
static inline bool tool_url_is_local(const char *url) { return goblin_url_is_local(url); }

static inline bool tool_url_is_plain_tcp(const char *url) {
    return strncmp(url, "tcp://", 6) == 0 || strncmp(url, "tcp4://", 7) == 0 ||
           strncmp(url, "tcp6://", 7) == 0;
}

static inline bool tool_url_is_tls(const char *url) { return strncmp(url, "tls+", 4) == 0; }

#endif
