/* libgoblin/net/tls.c - node identities, fingerprints, join tokens and the nng TLS
 * configurations built from them (include/goblin/tls.h, libgoblin/tls_impl.h,
 * docs/security.md).
 *
 * Everything cryptographic is mbedTLS: 2.28 (Debian 12, what nng 1.5.2 links)
 * and 3.x (Debian 13) differ in a few signatures, bridged by the small wrappers
 * under "mbedTLS 2/3" below; nothing else here depends on the version.
 * Buffers that held a private key are wiped before they are freed. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <mbedtls/version.h>
#include <mbedtls/asn1write.h>
#include <mbedtls/ctr_drbg.h>
#include <mbedtls/ecp.h>
#include <mbedtls/entropy.h>
#include <mbedtls/error.h>
#include <mbedtls/net_sockets.h>
#include <mbedtls/oid.h>
#include <mbedtls/pem.h>
#include <mbedtls/pk.h>
#include <mbedtls/platform_util.h>
#include <mbedtls/sha256.h>
#include <mbedtls/ssl.h>
#include <mbedtls/x509_crt.h>
#if MBEDTLS_VERSION_NUMBER >= 0x03000000
#include <psa/crypto.h>
#else
#include <mbedtls/bignum.h>
#endif

#include "base/alloc.h"
#include "base/errf.h"
#include "graph/graph_impl.h"
#include "tls_impl.h"

/* Largest certificate, key or token file read (they are a few hundred bytes). */
#define MAX_FILE_BYTES ((size_t)1 << 20)
/* Extra DNS names a generated certificate may carry. */
#define MAX_EXTRA_DNS 16
#define PEM_CERT_BEGIN "-----BEGIN CERTIFICATE-----\n"
#define PEM_CERT_END "-----END CERTIFICATE-----\n"

/* ---- mbedTLS 2/3 ------------------------------------------------------------ */

static int sha256_two(const void *a, size_t na, const void *b, size_t nb, uint8_t out[32]) {
    mbedtls_sha256_context c;
    int rc;
    mbedtls_sha256_init(&c);
#if MBEDTLS_VERSION_NUMBER >= 0x03000000
    rc = mbedtls_sha256_starts(&c, 0);
    if (rc == 0 && na) rc = mbedtls_sha256_update(&c, a, na);
    if (rc == 0 && nb) rc = mbedtls_sha256_update(&c, b, nb);
    if (rc == 0) rc = mbedtls_sha256_finish(&c, out);
#else
    rc = mbedtls_sha256_starts_ret(&c, 0);
    if (rc == 0 && na) rc = mbedtls_sha256_update_ret(&c, a, na);
    if (rc == 0 && nb) rc = mbedtls_sha256_update_ret(&c, b, nb);
    if (rc == 0) rc = mbedtls_sha256_finish_ret(&c, out);
#endif
    mbedtls_sha256_free(&c);
    return rc;
}

typedef struct rng {
    mbedtls_entropy_context entropy;
    mbedtls_ctr_drbg_context drbg;
} rng;

/* 3.x needs PSA initialised for TLS 1.3 and PSA-backed keys; 2.28 does not. */
static int crypto_init(void) {
#if MBEDTLS_VERSION_NUMBER >= 0x03000000
    return psa_crypto_init() == PSA_SUCCESS ? 0 : -1;
#else
    return 0;
#endif
}

static int rng_init(rng *r) {
    static const unsigned char pers[] = "goblin-tls";
    mbedtls_entropy_init(&r->entropy);
    mbedtls_ctr_drbg_init(&r->drbg);
    if (crypto_init() != 0) return -1;
    return mbedtls_ctr_drbg_seed(&r->drbg, mbedtls_entropy_func, &r->entropy, pers,
                                 sizeof pers - 1);
}

static void rng_free(rng *r) {
    mbedtls_ctr_drbg_free(&r->drbg);
    mbedtls_entropy_free(&r->entropy);
}

static int pk_parse(mbedtls_pk_context *pk, const unsigned char *buf, size_t len, rng *r) {
#if MBEDTLS_VERSION_NUMBER >= 0x03000000
    return mbedtls_pk_parse_key(pk, buf, len, NULL, 0, mbedtls_ctr_drbg_random, &r->drbg);
#else
    (void)r;
    return mbedtls_pk_parse_key(pk, buf, len, NULL, 0);
#endif
}

static int pk_check_pair(const mbedtls_pk_context *pub, const mbedtls_pk_context *prv, rng *r) {
#if MBEDTLS_VERSION_NUMBER >= 0x03000000
    return mbedtls_pk_check_pair(pub, prv, mbedtls_ctr_drbg_random, &r->drbg);
#else
    (void)r;
    return mbedtls_pk_check_pair(pub, prv);
#endif
}

static int crt_set_serial(mbedtls_x509write_cert *crt, const unsigned char *bytes, size_t n) {
#if MBEDTLS_VERSION_NUMBER >= 0x03040000
    return mbedtls_x509write_crt_set_serial_raw(crt, (unsigned char *)bytes, n);
#else
    mbedtls_mpi s;
    int rc;
    mbedtls_mpi_init(&s);
    rc = mbedtls_mpi_read_binary(&s, bytes, n);
    if (rc == 0) rc = mbedtls_x509write_crt_set_serial(crt, &s);
    mbedtls_mpi_free(&s);
    return rc;
#endif
}

static goblin_err mbed_errf(char *msg, size_t cap, goblin_err e, int rc, const char *what) {
    char buf[160];
    mbedtls_strerror(rc, buf, sizeof buf);
    return goblin__errf(msg, cap, e, "%s: %s (mbedTLS -0x%04x)", what, buf,
                        (unsigned)(rc < 0 ? -rc : rc));
}

/* ---- small helpers ------------------------------------------------------------ */

static void to_hex(const uint8_t *b, size_t n, char *out) {
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[b[i] >> 4];
        out[2 * i + 1] = digits[b[i] & 15];
    }
    out[2 * n] = '\0';
}

static int hex_val(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Exactly 2n hex digits at s -> n bytes. */
static bool from_hex(const char *s, size_t n, uint8_t *out) {
    for (size_t i = 0; i < n; i++) {
        int hi = hex_val(s[2 * i]), lo = hi < 0 ? -1 : hex_val(s[2 * i + 1]);
        if (hi < 0 || lo < 0) return false;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return true;
}

static void wipe_free(void *p, size_t n) {
    if (!p) return;
    mbedtls_platform_zeroize(p, n);
    goblin__free(p);
}

/* Whole file into a new NUL-terminated buffer (*len excludes the NUL). */
static goblin_err read_file(const char *path, const char *what, uint8_t **buf, size_t *len,
                            char *msg, size_t cap) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return goblin__errf(msg, cap, GOBLIN_EIO, "cannot open %s %s: %s", what, path,
                            strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return goblin__errf(msg, cap, GOBLIN_EIO, "%s %s is not a regular file", what, path);
    }
    if ((uint64_t)st.st_size > MAX_FILE_BYTES) {
        close(fd);
        return goblin__errf(msg, cap, GOBLIN_ELIMIT, "%s %s is larger than %zu bytes", what,
                            path, MAX_FILE_BYTES);
    }
    size_t size = (size_t)st.st_size, got = 0;
    uint8_t *b = goblin__alloc(size + 1);
    if (!b) {
        close(fd);
        return goblin__errf(msg, cap, GOBLIN_ENOMEM, "out of memory reading %s", path);
    }
    while (got < size) {
        ssize_t n = read(fd, b + got, size - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            int e = errno;
            close(fd);
            wipe_free(b, size + 1);
            return goblin__errf(msg, cap, GOBLIN_EIO, "cannot read %s %s: %s", what, path,
                                n == 0 ? "file shrank while reading" : strerror(e));
        }
        got += (size_t)n;
    }
    close(fd);
    b[size] = 0;
    *buf = b;
    *len = size;
    return GOBLIN_OK;
}

static bool looks_pem(const uint8_t *buf, size_t len) {
    return len > 0 && memchr(buf, 0, len) == NULL && strstr((const char *)buf, "-----BEGIN ");
}

/* Certificates (PEM, one or more, or one DER) from buf (NUL at buf[len]). */
static goblin_err parse_certs(mbedtls_x509_crt *crt, const uint8_t *buf, size_t len,
                              const char *what, char *msg, size_t cap) {
    int rc;
    if (looks_pem(buf, len)) {
        if (!strstr((const char *)buf, "-----BEGIN CERTIFICATE-----"))
            return goblin__errf(msg, cap, GOBLIN_EFORMAT, "%s holds no PEM certificate", what);
        rc = mbedtls_x509_crt_parse(crt, buf, len + 1);
    } else {
        rc = mbedtls_x509_crt_parse_der(crt, buf, len);
    }
    if (rc < 0) return mbed_errf(msg, cap, GOBLIN_EFORMAT, rc, what);
    if (rc > 0)
        return goblin__errf(msg, cap, GOBLIN_EFORMAT, "%s: %d certificate(s) could not be parsed",
                            what, rc);
    return GOBLIN_OK;
}

static goblin_err fingerprint_der(const uint8_t *der, size_t len, uint8_t out[32], char *msg,
                                  size_t cap) {
    int rc = sha256_two(der, len, NULL, 0, out);
    return rc ? mbed_errf(msg, cap, GOBLIN_ECRYPTO, rc, "SHA-256") : GOBLIN_OK;
}

/* One DER certificate as a new NUL-terminated PEM string. */
static goblin_err der_to_pem(const uint8_t *der, size_t len, char **out, size_t *out_len,
                             char *msg, size_t cap) {
    size_t need = len / 3 * 4 + len / 32 + 128, olen = 0;
    char *pem = goblin__alloc(need);
    if (!pem) return goblin__errf(msg, cap, GOBLIN_ENOMEM, "out of memory");
    int rc = mbedtls_pem_write_buffer(PEM_CERT_BEGIN, PEM_CERT_END, der, len,
                                      (unsigned char *)pem, need, &olen);
    if (rc) {
        goblin__free(pem);
        return mbed_errf(msg, cap, GOBLIN_ECRYPTO, rc, "PEM encoding");
    }
    *out = pem;
    *out_len = strlen(pem);
    return GOBLIN_OK;
}

/* A parsed chain as one PEM string (what nng's ca_chain/own_cert take, whatever the
 * file's own encoding was). */
static goblin_err chain_to_pem(const mbedtls_x509_crt *crt, char **out, char *msg, size_t cap) {
    size_t total = 1;
    char *acc = NULL;
    for (const mbedtls_x509_crt *c = crt; c && c->raw.len; c = c->next) {
        char *one;
        size_t n;
        goblin_err e = der_to_pem(c->raw.p, c->raw.len, &one, &n, msg, cap);
        if (e) {
            goblin__free(acc);
            return e;
        }
        char *grown = goblin__alloc(total + n);
        if (!grown) {
            goblin__free(one);
            goblin__free(acc);
            return goblin__errf(msg, cap, GOBLIN_ENOMEM, "out of memory");
        }
        if (acc) memcpy(grown, acc, total - 1);
        memcpy(grown + total - 1, one, n + 1);
        total += n;
        goblin__free(acc);
        goblin__free(one);
        acc = grown;
    }
    if (!acc) return goblin__errf(msg, cap, GOBLIN_EFORMAT, "no certificate");
    *out = acc;
    return GOBLIN_OK;
}

/* Name to check the peer against: first DNS subject alternative name, else the CN.
 * Returns a new string or NULL (none, or out of memory: *oom says which). */
static char *cert_name(const mbedtls_x509_crt *crt, bool *oom) {
    const unsigned char *p = NULL;
    size_t n = 0;
    *oom = false;
    for (const mbedtls_x509_sequence *s = &crt->subject_alt_names; s && s->buf.p; s = s->next) {
        if (s->buf.tag == (MBEDTLS_ASN1_CONTEXT_SPECIFIC | MBEDTLS_X509_SAN_DNS_NAME) &&
            s->buf.len > 0) {
            p = s->buf.p;
            n = s->buf.len;
            break;
        }
    }
    if (!p) {
        for (const mbedtls_x509_name *a = &crt->subject; a; a = a->next) {
            if (a->oid.p && MBEDTLS_OID_CMP(MBEDTLS_OID_AT_CN, &a->oid) == 0 && a->val.len > 0) {
                p = a->val.p;
                n = a->val.len;
                break;
            }
        }
    }
    if (!p || memchr(p, 0, n)) return NULL;
    char *s = goblin__alloc(n + 1);
    if (!s) {
        *oom = true;
        return NULL;
    }
    memcpy(s, p, n);
    s[n] = 0;
    return s;
}

static bool self_issued(const mbedtls_x509_crt *c) {
    return c->issuer_raw.len == c->subject_raw.len &&
           memcmp(c->issuer_raw.p, c->subject_raw.p, c->issuer_raw.len) == 0;
}

/* ---- identities --------------------------------------------------------------- */

void goblin_tls_init_params_default(goblin_tls_init_params *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->force = false;
    p->valid_days = 3650;
}

static bool dns_name_ok(const char *s) {
    size_t n = s ? strlen(s) : 0;
    if (n < 1 || n > 253) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '-'))
            return false;
    }
    return true;
}

/* mkdir -p with mode 0700 for what it creates. */
static goblin_err make_dirs(const char *dir, char *msg, size_t cap) {
    size_t n = strlen(dir);
    char *p = goblin__alloc(n + 1);
    if (!p) return goblin__errf(msg, cap, GOBLIN_ENOMEM, "out of memory");
    memcpy(p, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (p[i] != '/' && p[i] != 0) continue;
        char saved = p[i];
        p[i] = 0;
        if (mkdir(p, 0700) != 0 && errno != EEXIST) {
            int e = errno;
            goblin_err r = goblin__errf(msg, cap, GOBLIN_EIO, "cannot create directory %s: %s",
                                        p, strerror(e));
            goblin__free(p);
            return r;
        }
        p[i] = saved;
    }
    goblin__free(p);
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return goblin__errf(msg, cap, GOBLIN_EIO, "%s is not a directory", dir);
    return GOBLIN_OK;
}

static bool write_all(int fd, const void *buf, size_t n) {
    const uint8_t *b = buf;
    while (n) {
        ssize_t w = write(fd, b, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        b += w;
        n -= (size_t)w;
    }
    return fsync(fd) == 0;
}

/* Write @p data to @p path with @p mode. Without force the file must not exist
 * (O_EXCL: no window for a race). With force it goes to a temporary name first and is
 * renamed over the old file, so readers never see a partial file. */
static goblin_err write_file(const char *path, const void *data, size_t n, mode_t mode,
                             bool force, char *msg, size_t cap) {
    char tmp[GOBLIN_TLS_PATH_MAX + 32];
    const char *target = path;
    if (force) {
        int k = snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
        if (k < 0 || (size_t)k >= sizeof tmp)
            return goblin__errf(msg, cap, GOBLIN_ELIMIT, "path too long: %s", path);
        unlink(tmp); /* a stale one from a crashed run of this pid */
        target = tmp;
    }
    int fd = open(target, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
    if (fd < 0) {
        if (errno == EEXIST && !force)
            return goblin__errf(msg, cap, GOBLIN_EBUSY,
                                "%s already exists; refusing to overwrite it (use force)", path);
        return goblin__errf(msg, cap, GOBLIN_EIO, "cannot create %s: %s", target,
                            strerror(errno));
    }
    /* open() applies the umask; the mode must be exactly this (0600 for the key). */
    bool ok = fchmod(fd, mode) == 0 && write_all(fd, data, n);
    int e = errno;
    if (close(fd) != 0) ok = false;
    if (ok && force && rename(tmp, path) != 0) {
        e = errno;
        ok = false;
    }
    if (!ok) {
        unlink(target);
        return goblin__errf(msg, cap, GOBLIN_EIO, "cannot write %s: %s", path, strerror(e));
    }
    return GOBLIN_OK;
}

/* SubjectAltName extension value: SEQUENCE OF dNSName [2] IA5String. asn1write fills
 * the buffer from its end backwards, so names are written last to first. */
static int write_san(unsigned char *buf, size_t size, const char *const *names, size_t n,
                     unsigned char **start, size_t *out_len) {
    unsigned char *p = buf + size;
    size_t len = 0;
    int ret;
    for (size_t i = n; i-- > 0;) {
        size_t k = strlen(names[i]);
        MBEDTLS_ASN1_CHK_ADD(len, mbedtls_asn1_write_raw_buffer(&p, buf,
                                                                (const unsigned char *)names[i], k));
        MBEDTLS_ASN1_CHK_ADD(len, mbedtls_asn1_write_len(&p, buf, k));
        MBEDTLS_ASN1_CHK_ADD(len, mbedtls_asn1_write_tag(&p, buf, MBEDTLS_ASN1_CONTEXT_SPECIFIC |
                                                                      MBEDTLS_X509_SAN_DNS_NAME));
    }
    MBEDTLS_ASN1_CHK_ADD(len, mbedtls_asn1_write_len(&p, buf, len));
    MBEDTLS_ASN1_CHK_ADD(len, mbedtls_asn1_write_tag(&p, buf, MBEDTLS_ASN1_CONSTRUCTED |
                                                                  MBEDTLS_ASN1_SEQUENCE));
    *start = p;
    *out_len = len;
    return 0;
}

static bool utc_stamp(time_t t, char out[16]) {
    struct tm tm;
    if (!gmtime_r(&t, &tm)) return false;
    return strftime(out, 16, "%Y%m%d%H%M%S", &tm) == 14;
}

/* A fresh key and self-signed certificate: key PEM (caller wipes), cert DER. */
static goblin_err generate(const goblin_tls_init_params *p, rng *r, char **key_pem_out,
                           uint8_t **der_out, size_t *der_len_out, char *msg, size_t cap) {
    enum { KEY_PEM_MAX = 1024, DER_MAX = 8192, SAN_MAX = 8192 };
    mbedtls_pk_context key;
    mbedtls_x509write_cert crt;
    unsigned char *der_buf = NULL, *san_buf = NULL;
    char *key_pem = NULL;
    goblin_err e = GOBLIN_OK;
    int rc;
    mbedtls_pk_init(&key);
    mbedtls_x509write_crt_init(&crt);

    key_pem = goblin__calloc(1, KEY_PEM_MAX);
    der_buf = goblin__alloc(DER_MAX);
    san_buf = goblin__alloc(SAN_MAX);
    if (!key_pem || !der_buf || !san_buf) {
        e = goblin__errf(msg, cap, GOBLIN_ENOMEM, "out of memory");
        goto out;
    }
    if ((rc = mbedtls_pk_setup(&key, mbedtls_pk_info_from_type(MBEDTLS_PK_ECKEY))) ||
        (rc = mbedtls_ecp_gen_key(MBEDTLS_ECP_DP_SECP256R1, mbedtls_pk_ec(key),
                                  mbedtls_ctr_drbg_random, &r->drbg))) {
        e = mbed_errf(msg, cap, GOBLIN_ECRYPTO, rc, "EC P-256 key generation");
        goto out;
    }
    if ((rc = mbedtls_pk_write_key_pem(&key, (unsigned char *)key_pem, KEY_PEM_MAX))) {
        e = mbed_errf(msg, cap, GOBLIN_ECRYPTO, rc, "writing the private key");
        goto out;
    }

    /* Serial: 16 random bytes, positive and without a leading zero byte (RFC 5280). */
    unsigned char serial[16];
    if ((rc = mbedtls_ctr_drbg_random(&r->drbg, serial, sizeof serial))) {
        e = mbed_errf(msg, cap, GOBLIN_ECRYPTO, rc, "random serial");
        goto out;
    }
    serial[0] = (unsigned char)((serial[0] & 0x7f) | 0x40);

    time_t now = time(NULL);
    char not_before[16], not_after[16];
    if (!utc_stamp(now - 3600, not_before) ||
        !utc_stamp(now + (time_t)p->valid_days * 86400, not_after)) {
        e = goblin__errf(msg, cap, GOBLIN_EINVAL, "cannot represent the validity period");
        goto out;
    }

    const char *names[2 + MAX_EXTRA_DNS] = {GOBLIN_TLS_COMMON_NAME, "localhost"};
    for (size_t i = 0; i < p->n_dns_names; i++) names[2 + i] = p->dns_names[i];
    unsigned char *san;
    size_t san_len;

    mbedtls_x509write_crt_set_version(&crt, MBEDTLS_X509_CRT_VERSION_3);
    mbedtls_x509write_crt_set_md_alg(&crt, MBEDTLS_MD_SHA256);
    mbedtls_x509write_crt_set_subject_key(&crt, &key);
    mbedtls_x509write_crt_set_issuer_key(&crt, &key);
    /* CA:TRUE with keyCertSign so the certificate can be its own trust anchor for any
     * TLS stack (OpenSSL insists on it; mbedTLS also trusts a self-signed leaf). */
    if ((rc = mbedtls_x509write_crt_set_subject_name(&crt, "CN=" GOBLIN_TLS_COMMON_NAME)) ||
        (rc = mbedtls_x509write_crt_set_issuer_name(&crt, "CN=" GOBLIN_TLS_COMMON_NAME)) ||
        (rc = crt_set_serial(&crt, serial, sizeof serial)) ||
        (rc = mbedtls_x509write_crt_set_validity(&crt, not_before, not_after)) ||
        (rc = mbedtls_x509write_crt_set_basic_constraints(&crt, 1, 0)) ||
        (rc = mbedtls_x509write_crt_set_key_usage(&crt, MBEDTLS_X509_KU_DIGITAL_SIGNATURE |
                                                            MBEDTLS_X509_KU_KEY_CERT_SIGN)) ||
        (rc = write_san(san_buf, SAN_MAX, names, 2 + p->n_dns_names, &san, &san_len)) ||
        (rc = mbedtls_x509write_crt_set_extension(
             &crt, MBEDTLS_OID_SUBJECT_ALT_NAME, MBEDTLS_OID_SIZE(MBEDTLS_OID_SUBJECT_ALT_NAME), 0,
             san, san_len))) {
        e = mbed_errf(msg, cap, GOBLIN_ECRYPTO, rc, "building the certificate");
        goto out;
    }
    rc = mbedtls_x509write_crt_der(&crt, der_buf, DER_MAX, mbedtls_ctr_drbg_random, &r->drbg);
    if (rc <= 0) {
        e = mbed_errf(msg, cap, GOBLIN_ECRYPTO, rc, "signing the certificate");
        goto out;
    }
    /* The DER sits at the end of der_buf; keep exactly those bytes. The PEM file is
     * encoded from these bytes (not signed again: ECDSA signatures may be randomised,
     * so a second signing would give a certificate with another fingerprint). */
    uint8_t *der = goblin__memdup(der_buf + DER_MAX - (size_t)rc, (size_t)rc);
    if (!der) {
        e = goblin__errf(msg, cap, GOBLIN_ENOMEM, "out of memory");
        goto out;
    }
    *der_out = der;
    *der_len_out = (size_t)rc;
    *key_pem_out = key_pem;
    key_pem = NULL;
out:
    wipe_free(key_pem, KEY_PEM_MAX);
    goblin__free(der_buf);
    goblin__free(san_buf);
    mbedtls_x509write_crt_free(&crt);
    mbedtls_pk_free(&key);
    return e;
}

static goblin_err join_path(char *out, const char *dir, const char *file, char *msg, size_t cap) {
    size_t n = strlen(dir);
    const char *sep = (n > 0 && dir[n - 1] == '/') ? "" : "/";
    int k = snprintf(out, GOBLIN_TLS_PATH_MAX, "%s%s%s", dir, sep, file);
    if (k < 0 || (size_t)k >= GOBLIN_TLS_PATH_MAX)
        return goblin__errf(msg, cap, GOBLIN_ELIMIT, "path too long: %s%s%s", dir, sep, file);
    return GOBLIN_OK;
}

goblin_err goblin_tls_init_dir(const char *dir, const goblin_tls_init_params *params,
                               goblin_tls_identity *out, goblin_errbuf *err) {
    GOBLIN__ERRBUF(err, msg, cap);
    goblin_tls_init_params defaults;
    if (!params) {
        goblin_tls_init_params_default(&defaults);
        params = &defaults;
    }
    if (!dir || !*dir || !out)
        return goblin__errf(msg, cap, GOBLIN_EINVAL, "directory and identity are required");
    if (params->valid_days < 1 || params->valid_days > 36500)
        return goblin__errf(msg, cap, GOBLIN_EINVAL, "valid_days %u is outside 1 .. 36500",
                            (unsigned)params->valid_days);
    if (params->n_dns_names > MAX_EXTRA_DNS || (params->n_dns_names && !params->dns_names))
        return goblin__errf(msg, cap, GOBLIN_EINVAL, "at most %d extra DNS names",
                            MAX_EXTRA_DNS);
    for (size_t i = 0; i < params->n_dns_names; i++)
        if (!dns_name_ok(params->dns_names[i]))
            return goblin__errf(msg, cap, GOBLIN_EINVAL,
                                "extra DNS name %zu is not 1 .. 253 characters of [A-Za-z0-9.-]",
                                i);

    /* Heap, not stack: two paths of GOBLIN_TLS_PATH_MAX each. */
    goblin_tls_identity *id = goblin__calloc(1, sizeof *id);
    if (!id) return goblin__errf(msg, cap, GOBLIN_ENOMEM, "out of memory");
    goblin_err e;
    if ((e = join_path(id->cert_path, dir, GOBLIN_TLS_CERT_FILE, msg, cap)) ||
        (e = join_path(id->key_path, dir, GOBLIN_TLS_KEY_FILE, msg, cap)))
        goto out_id;
    if (!params->force) {
        /* Checked before generating anything so the common mistake fails fast and
         * names the file; write_file's O_EXCL still closes the race. */
        const char *paths[2] = {id->key_path, id->cert_path};
        for (int i = 0; i < 2; i++) {
            struct stat st;
            if (lstat(paths[i], &st) == 0) {
                e = goblin__errf(msg, cap, GOBLIN_EBUSY,
                                 "%s already exists; refusing to overwrite it (use force)",
                                 paths[i]);
                goto out_id;
            }
            if (errno != ENOENT) {
                e = goblin__errf(msg, cap, GOBLIN_EIO, "cannot use %s: %s", paths[i],
                                 strerror(errno));
                goto out_id;
            }
        }
    }
    if ((e = make_dirs(dir, msg, cap))) goto out_id;

    rng r;
    int rc = rng_init(&r);
    if (rc) {
        rng_free(&r);
        e = mbed_errf(msg, cap, GOBLIN_ECRYPTO, rc, "seeding the random generator");
        goto out_id;
    }
    char *key_pem = NULL;
    uint8_t *der = NULL;
    size_t der_len = 0;
    e = generate(params, &r, &key_pem, &der, &der_len, msg, cap);
    rng_free(&r);
    if (e) goto out_id;

    char *cert_pem = NULL;
    size_t cert_pem_len = 0;
    uint8_t fp[32];
    if ((e = fingerprint_der(der, der_len, fp, msg, cap)) ||
        (e = der_to_pem(der, der_len, &cert_pem, &cert_pem_len, msg, cap)))
        goto out_gen;
    to_hex(fp, 32, id->fingerprint);

    size_t key_len = strlen(key_pem);
    /* Key first: a directory never holds a certificate without its key. */
    if ((e = write_file(id->key_path, key_pem, key_len, 0600, params->force, msg, cap)))
        goto out_gen;
    if ((e = write_file(id->cert_path, cert_pem, cert_pem_len, 0644, params->force, msg, cap))) {
        if (!params->force) unlink(id->key_path); /* ours: created just above */
        goto out_gen;
    }
    memcpy(out, id, sizeof *id);
out_gen:
    goblin__free(cert_pem);
    goblin__free(der);
    if (key_pem) wipe_free(key_pem, strlen(key_pem) + 1);
out_id:
    goblin__free(id);
    return e;
}

/* Key from a file (unencrypted PEM or DER) into pk. */
static goblin_err load_key(const char *path, mbedtls_pk_context *pk, rng *r, char *msg,
                           size_t cap) {
    uint8_t *buf;
    size_t len;
    goblin_err e = read_file(path, "private key", &buf, &len, msg, cap);
    if (e) return e;
    int rc = pk_parse(pk, buf, looks_pem(buf, len) ? len + 1 : len, r);
    wipe_free(buf, len + 1);
    if (rc == MBEDTLS_ERR_PK_PASSWORD_REQUIRED)
        return goblin__errf(msg, cap, GOBLIN_EFORMAT,
                            "private key %s is encrypted; goblin needs an unencrypted key", path);
    if (rc) {
        char what[64 + GOBLIN_TLS_PATH_MAX];
        snprintf(what, sizeof what, "private key %s", path);
        return mbed_errf(msg, cap, GOBLIN_EFORMAT, rc, what);
    }
    return GOBLIN_OK;
}

static goblin_err load_certs(const char *path, mbedtls_x509_crt *crt, char *msg, size_t cap) {
    uint8_t *buf;
    size_t len;
    goblin_err e = read_file(path, "certificate", &buf, &len, msg, cap);
    if (e) return e;
    char what[32 + GOBLIN_TLS_PATH_MAX];
    snprintf(what, sizeof what, "certificate %s", path);
    e = parse_certs(crt, buf, len, what, msg, cap);
    goblin__free(buf);
    return e;
}

/* Certificate chain and key from files, checked to belong together: the chain as PEM
 * and the key as PEM (wipe it), the leaf's fingerprint. Shared by identity loading
 * and the listener configuration. */
static goblin_err load_pair(const char *cert_file, const char *key_file, char **chain_pem,
                            char **key_pem, uint8_t fp[32], char *msg, size_t cap) {
    enum { KEY_PEM_MAX = 16384 };
    mbedtls_x509_crt crt;
    mbedtls_pk_context pk;
    rng r;
    goblin_err e;
    mbedtls_x509_crt_init(&crt);
    mbedtls_pk_init(&pk);
    int rc = rng_init(&r);
    if (rc) {
        e = mbed_errf(msg, cap, GOBLIN_ECRYPTO, rc, "seeding the random generator");
        goto out;
    }
    if ((e = load_certs(cert_file, &crt, msg, cap)) || (e = load_key(key_file, &pk, &r, msg, cap)))
        goto out;
    if (pk_check_pair(&crt.pk, &pk, &r) != 0) {
        e = goblin__errf(msg, cap, GOBLIN_EAUTH, "private key %s does not belong to certificate %s",
                         key_file, cert_file);
        goto out;
    }
    if ((e = fingerprint_der(crt.raw.p, crt.raw.len, fp, msg, cap))) goto out;
    if (chain_pem && (e = chain_to_pem(&crt, chain_pem, msg, cap))) goto out;
    if (key_pem) {
        char *k = goblin__calloc(1, KEY_PEM_MAX);
        if (!k) {
            e = goblin__errf(msg, cap, GOBLIN_ENOMEM, "out of memory");
        } else if ((rc = mbedtls_pk_write_key_pem(&pk, (unsigned char *)k, KEY_PEM_MAX))) {
            wipe_free(k, KEY_PEM_MAX);
            e = mbed_errf(msg, cap, GOBLIN_ECRYPTO, rc, "re-encoding the private key");
        } else {
            *key_pem = k;
        }
        if (e && chain_pem) {
            goblin__free(*chain_pem);
            *chain_pem = NULL;
        }
    }
out:
    rng_free(&r);
    mbedtls_pk_free(&pk);
    mbedtls_x509_crt_free(&crt);
    return e;
}

goblin_err goblin_tls_identity_load(const char *cert_file, const char *key_file,
                                    goblin_tls_identity *out, goblin_errbuf *err) {
    GOBLIN__ERRBUF(err, msg, cap);
    if (!cert_file || !key_file || !out)
        return goblin__errf(msg, cap, GOBLIN_EINVAL, "certificate, key and identity are required");
    if (strlen(cert_file) >= GOBLIN_TLS_PATH_MAX || strlen(key_file) >= GOBLIN_TLS_PATH_MAX)
        return goblin__errf(msg, cap, GOBLIN_ELIMIT, "path too long");
    uint8_t fp[32];
    goblin_err e = load_pair(cert_file, key_file, NULL, NULL, fp, msg, cap);
    if (e) return e;
    snprintf(out->cert_path, sizeof out->cert_path, "%s", cert_file);
    snprintf(out->key_path, sizeof out->key_path, "%s", key_file);
    to_hex(fp, 32, out->fingerprint);
    return GOBLIN_OK;
}

goblin_err goblin_tls_fingerprint_file(const char *path, char *hex_out, goblin_errbuf *err) {
    GOBLIN__ERRBUF(err, msg, cap);
    if (!path || !hex_out)
        return goblin__errf(msg, cap, GOBLIN_EINVAL, "path and output are required");
    mbedtls_x509_crt crt;
    mbedtls_x509_crt_init(&crt);
    uint8_t fp[32];
    goblin_err e = load_certs(path, &crt, msg, cap);
    if (!e) e = fingerprint_der(crt.raw.p, crt.raw.len, fp, msg, cap);
    mbedtls_x509_crt_free(&crt);
    if (!e) to_hex(fp, 32, hex_out);
    return e;
}

goblin_err goblin_tls_fingerprint_normalize(const char *text, char *hex_out) {
    if (!text || !hex_out) return GOBLIN_EINVAL;
    const char *s = text;
    while (*s == ' ' || *s == '\t') s++;
    if (strncasecmp(s, "sha256:", 7) == 0 || strncasecmp(s, "sha256=", 7) == 0) s += 7;
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r'))
        n--;
    uint8_t b[32];
    if (n == 64) {
        if (!from_hex(s, 32, b)) return GOBLIN_EINVAL;
    } else if (n == 95) { /* 32 pairs and 31 colons */
        for (size_t i = 0; i < 32; i++) {
            if (i < 31 && s[3 * i + 2] != ':') return GOBLIN_EINVAL;
            if (!from_hex(s + 3 * i, 1, b + i)) return GOBLIN_EINVAL;
        }
    } else {
        return GOBLIN_EINVAL;
    }
    to_hex(b, 32, hex_out);
    return GOBLIN_OK;
}

/* ---- tokens --------------------------------------------------------------------- */

static bool salt_ok(const char *s, size_t n) {
    if (n < 1 || n > GOBLIN_TOKEN_SALT_MAX) return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] <= ' ' || s[i] > '~' || s[i] == ':') return false;
    return true;
}

static goblin_err random_bytes(uint8_t *out, size_t n) {
    rng r;
    int rc = rng_init(&r);
    if (rc == 0) rc = mbedtls_ctr_drbg_random(&r.drbg, out, n);
    rng_free(&r);
    return rc ? GOBLIN_ECRYPTO : GOBLIN_OK;
}

goblin_err goblin_token_generate(char *out) {
    if (!out) return GOBLIN_EINVAL;
    uint8_t b[32];
    goblin_err e = random_bytes(b, sizeof b);
    if (!e) to_hex(b, sizeof b, out);
    mbedtls_platform_zeroize(b, sizeof b);
    return e;
}

static int token_digest(const char *salt, size_t salt_len, const char *token, size_t token_len,
                        uint8_t out[32]) {
    return sha256_two(salt, salt_len, token, token_len, out);
}

goblin_err goblin_token_hash(const char *token, const char *salt, char *hex_out) {
    if (!token || !salt || !hex_out) return GOBLIN_EINVAL;
    size_t tn = strnlen(token, GOBLIN_TOKEN_MAX_BYTES + 1), sn = strlen(salt);
    if (tn < 1 || tn > GOBLIN_TOKEN_MAX_BYTES || !salt_ok(salt, sn)) return GOBLIN_EINVAL;
    uint8_t d[32];
    if (token_digest(salt, sn, token, tn, d)) return GOBLIN_ECRYPTO;
    to_hex(d, 32, hex_out);
    return GOBLIN_OK;
}

goblin_err goblin_token_entry(const char *token, char *line_out) {
    if (!token || !line_out) return GOBLIN_EINVAL;
    uint8_t sb[16];
    char salt[33], hash[GOBLIN_TLS_FINGERPRINT_SIZE];
    goblin_err e = random_bytes(sb, sizeof sb);
    if (e) return e;
    to_hex(sb, sizeof sb, salt);
    if ((e = goblin_token_hash(token, salt, hash))) return e;
    snprintf(line_out, GOBLIN_TOKEN_ENTRY_SIZE, "%s:%s", salt, hash);
    return GOBLIN_OK;
}

goblin_err goblin__token_check_list(const char *list, const char *presented, char *msg, size_t cap) {
    if (!list || !presented)
        return goblin__errf(msg, cap, GOBLIN_EINVAL, "token list and token are required");
    size_t tn = strnlen(presented, GOBLIN_TOKEN_MAX_BYTES + 1);
    bool token_ok = tn >= 1 && tn <= GOBLIN_TOKEN_MAX_BYTES;
    unsigned matched = 0;
    size_t entries = 0;
    int line_no = 0;
    goblin_err e = GOBLIN_OK;
    for (const char *line = list; *line;) {
        const char *end = strchr(line, '\n');
        const char *next = end ? end + 1 : line + strlen(line);
        if (!end) end = next;
        line_no++;
        while (line < end && (*line == ' ' || *line == '\t')) line++;
        while (end > line && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r')) end--;
        if (line == end || *line == '#') {
            line = next;
            continue;
        }
        const char *colon = memchr(line, ':', (size_t)(end - line));
        uint8_t want[32], got[32];
        if (!colon || !salt_ok(line, (size_t)(colon - line)) || end - colon - 1 != 64 ||
            !from_hex(colon + 1, 32, want)) {
            /* The line's text may be a pasted token: never echo it. */
            e = goblin__errf(msg, cap, GOBLIN_EFORMAT,
                             "token list line %d is not \"salt:sha256-hex\"", line_no);
            break;
        }
        entries++;
        if (token_ok) {
            if (token_digest(line, (size_t)(colon - line), presented, tn, got)) {
                e = goblin__errf(msg, cap, GOBLIN_ECRYPTO, "SHA-256 failed");
                break;
            }
            /* Every byte of every entry, no early exit; turn "diff == 0" into a bit
             * without a branch. */
            unsigned diff = 0;
            for (int i = 0; i < 32; i++) diff |= (unsigned)(got[i] ^ want[i]);
            matched |= ((diff - 1u) >> 8) & 1u;
            mbedtls_platform_zeroize(got, sizeof got);
        }
        line = next;
    }
    if (e) return e;
    if (entries == 0)
        return goblin__errf(msg, cap, GOBLIN_ENOTFOUND, "the token list has no entries");
    if (!token_ok || !matched)
        return goblin__errf(msg, cap, GOBLIN_EAUTH, "the token presented is not accepted");
    return GOBLIN_OK;
}

goblin_err goblin_token_check_list(const char *list, const char *presented, goblin_errbuf *err) {
    GOBLIN__ERRBUF(err, msg, cap);
    return goblin__token_check_list(list, presented, msg, cap);
}

goblin_err goblin__token_check_file(const char *path, const char *presented, char *msg, size_t cap) {
    if (!path || !presented)
        return goblin__errf(msg, cap, GOBLIN_EINVAL, "token file and token are required");
    uint8_t *buf;
    size_t len;
    goblin_err e = read_file(path, "token file", &buf, &len, msg, cap);
    if (e) return e;
    if (memchr(buf, 0, len)) {
        goblin__free(buf);
        return goblin__errf(msg, cap, GOBLIN_EFORMAT, "token file %s contains a NUL byte", path);
    }
    e = goblin__token_check_list((const char *)buf, presented, msg, cap);
    if (e == GOBLIN_EFORMAT || e == GOBLIN_ENOTFOUND) {
        char inner[256];
        snprintf(inner, sizeof inner, "%s", msg && cap ? msg : "");
        goblin__errf(msg, cap, e, "%s: %s", path, inner);
    }
    wipe_free(buf, len + 1);
    return e;
}

goblin_err goblin_token_check_file(const char *path, const char *presented, goblin_errbuf *err) {
    GOBLIN__ERRBUF(err, msg, cap);
    return goblin__token_check_file(path, presented, msg, cap);
}

/* ---- nng configurations --------------------------------------------------------- */

goblin_err goblin__tls_nng_err(int rv) {
    switch (rv) {
    case 0: return GOBLIN_OK;
    case NNG_ENOMEM: return GOBLIN_ENOMEM;
    case NNG_EINVAL:
    case NNG_EADDRINVAL: return GOBLIN_EINVAL;
    case NNG_ETIMEDOUT: return GOBLIN_ETIMEDOUT;
    case NNG_ECONNREFUSED: return GOBLIN_ECONNREFUSED;
    case NNG_ECLOSED:
    case NNG_ECONNSHUT:
    case NNG_ECONNRESET: return GOBLIN_ECLOSED;
    case NNG_EPEERAUTH: return GOBLIN_EAUTH;
    case NNG_ECRYPTO: return GOBLIN_ECRYPTO;
    case NNG_ENOTSUP: return GOBLIN_ENOTSUP;
    case NNG_EBUSY: return GOBLIN_EBUSY;
    case NNG_ECANCELED: return GOBLIN_ECANCELED;
    case NNG_EPROTO: return GOBLIN_EPROTO;
    case NNG_ENOENT: return GOBLIN_ENOTFOUND;
    case NNG_EMSGSIZE: return GOBLIN_ELIMIT;
    default: return GOBLIN_EIO;
    }
}

static goblin_err nng_errf(char *msg, size_t cap, int rv, const char *what) {
    return goblin__errf(msg, cap, goblin__tls_nng_err(rv), "%s: %s", what, nng_strerror(rv));
}

goblin_err goblin__tls_server_config(const char *cert_file, const char *key_file,
                                     nng_tls_config **out, char *msg, size_t cap) {
    if (!cert_file || !key_file || !out)
        return goblin__errf(msg, cap, GOBLIN_EINVAL, "certificate and key files are required");
    char *chain = NULL, *key = NULL;
    uint8_t fp[32];
    goblin_err e = load_pair(cert_file, key_file, &chain, &key, fp, msg, cap);
    if (e) return e;
    nng_tls_config *c = NULL;
    int rv = nng_tls_config_alloc(&c, NNG_TLS_MODE_SERVER);
    if (rv) {
        e = nng_errf(msg, cap, rv, "TLS server configuration");
        c = NULL;
    } else if ((rv = nng_tls_config_own_cert(c, chain, key, NULL))) {
        e = nng_errf(msg, cap, rv, "loading the node certificate into nng");
    } else if ((rv = nng_tls_config_auth_mode(c, NNG_TLS_AUTH_MODE_NONE))) {
        /* Workers have no certificates; they present a join token instead. */
        e = nng_errf(msg, cap, rv, "TLS server auth mode");
    }
    goblin__free(chain);
    wipe_free(key, strlen(key) + 1);
    if (e) {
        if (c) nng_tls_config_free(c);
        return e;
    }
    *out = c;
    return GOBLIN_OK;
}

static bool is_ip_literal(const char *host) {
    unsigned char buf[16];
    return inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1;
}

typedef struct tls_url {
    char *host, *port;
    int family;
} tls_url;

static void tls_url_free(tls_url *u) {
    goblin__free(u->host);
    goblin__free(u->port);
}

static goblin_err tls_url_parse(const char *url, tls_url *out, char *msg, size_t cap) {
    nng_url *u = NULL;
    memset(out, 0, sizeof *out);
    if (!url) return goblin__errf(msg, cap, GOBLIN_EINVAL, "no URL");
    int rv = nng_url_parse(&u, url);
    if (rv) return goblin__errf(msg, cap, GOBLIN_EINVAL, "bad URL %s: %s", url, nng_strerror(rv));
    goblin_err e = GOBLIN_OK;
    int family = AF_UNSPEC;
    if (strcmp(u->u_scheme, "tls+tcp") == 0) family = AF_UNSPEC;
    else if (strcmp(u->u_scheme, "tls+tcp4") == 0) family = AF_INET;
    else if (strcmp(u->u_scheme, "tls+tcp6") == 0) family = AF_INET6;
    else e = goblin__errf(msg, cap, GOBLIN_EINVAL, "%s is not a tls+tcp:// URL", url);
    if (!e && (!u->u_hostname || !*u->u_hostname || !u->u_port || !*u->u_port))
        e = goblin__errf(msg, cap, GOBLIN_EINVAL, "%s needs a host and a port", url);
    if (!e) {
        out->host = goblin__strdup(u->u_hostname);
        out->port = goblin__strdup(u->u_port);
        out->family = family;
        if (!out->host || !out->port) {
            tls_url_free(out);
            e = goblin__errf(msg, cap, GOBLIN_ENOMEM, "out of memory");
        }
    }
    nng_url_free(u);
    return e;
}

goblin_err goblin__tls_client_config_ca(const char *ca_file, const char *server_name,
                                        const char *url, nng_tls_config **out, char *msg,
                                        size_t cap) {
    if (!ca_file || !out) return goblin__errf(msg, cap, GOBLIN_EINVAL, "CA file is required");
    mbedtls_x509_crt crt;
    mbedtls_x509_crt_init(&crt);
    char *chain = NULL, *name = NULL;
    nng_tls_config *c = NULL;
    goblin_err e = load_certs(ca_file, &crt, msg, cap);
    if (e) goto out;
    if ((e = chain_to_pem(&crt, &chain, msg, cap))) goto out;
    bool oom = false;
    if (server_name) {
        name = goblin__strdup(server_name);
        oom = !name;
    } else if (!crt.next && self_issued(&crt)) {
        name = cert_name(&crt, &oom);
    } else if (url) {
        tls_url u;
        if (tls_url_parse(url, &u, NULL, 0) == GOBLIN_OK) {
            if (!is_ip_literal(u.host)) {
                name = u.host;
                u.host = NULL;
            }
            tls_url_free(&u);
        }
    }
    if (oom) {
        e = goblin__errf(msg, cap, GOBLIN_ENOMEM, "out of memory");
        goto out;
    }
    if (!name) {
        e = goblin__errf(msg, cap, GOBLIN_EINVAL,
                         "cannot tell which name the node's certificate must carry (CA %s, URL "
                         "%s): give a server name",
                         ca_file, url ? url : "none");
        goto out;
    }
    int rv = nng_tls_config_alloc(&c, NNG_TLS_MODE_CLIENT);
    if (rv) {
        c = NULL;
        e = nng_errf(msg, cap, rv, "TLS client configuration");
    } else if ((rv = nng_tls_config_ca_chain(c, chain, NULL))) {
        e = nng_errf(msg, cap, rv, "loading the CA certificates into nng");
    } else if ((rv = nng_tls_config_auth_mode(c, NNG_TLS_AUTH_MODE_REQUIRED))) {
        e = nng_errf(msg, cap, rv, "TLS client auth mode");
    } else if ((rv = nng_tls_config_server_name(c, name))) {
        e = nng_errf(msg, cap, rv, "TLS server name");
    }
out:
    goblin__free(name);
    goblin__free(chain);
    mbedtls_x509_crt_free(&crt);
    if (e) {
        if (c) nng_tls_config_free(c);
        return e;
    }
    *out = c;
    return GOBLIN_OK;
}

/* -- the fingerprint probe: one unverified handshake over a plain socket -- */

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

typedef struct probe_io {
    int fd;
    int64_t deadline;
} probe_io;

/* Wait for @p events until the deadline: 1 ready, 0 timed out, -1 error. */
static int probe_wait(const probe_io *io, short events) {
    for (;;) {
        int64_t left = io->deadline - now_ms();
        if (left <= 0) return 0;
        struct pollfd pfd = {.fd = io->fd, .events = events};
        int n = poll(&pfd, 1, left > INT_MAX ? INT_MAX : (int)left);
        if (n < 0 && errno == EINTR) continue;
        return n < 0 ? -1 : n > 0;
    }
}

static int probe_send(void *ctx, const unsigned char *buf, size_t len) {
    probe_io *io = ctx;
    if (len > INT_MAX) len = INT_MAX;
    for (;;) {
        ssize_t n = send(io->fd, buf, len, MSG_NOSIGNAL);
        if (n >= 0) return (int)n;
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return MBEDTLS_ERR_NET_SEND_FAILED;
        int w = probe_wait(io, POLLOUT);
        if (w == 0) return MBEDTLS_ERR_SSL_TIMEOUT;
        if (w < 0) return MBEDTLS_ERR_NET_SEND_FAILED;
    }
}

static int probe_recv(void *ctx, unsigned char *buf, size_t len) {
    probe_io *io = ctx;
    if (len > INT_MAX) len = INT_MAX;
    for (;;) {
        ssize_t n = recv(io->fd, buf, len, 0);
        if (n >= 0) return (int)n; /* 0: the peer closed; mbedTLS reports EOF */
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return MBEDTLS_ERR_NET_RECV_FAILED;
        int w = probe_wait(io, POLLIN);
        if (w == 0) return MBEDTLS_ERR_SSL_TIMEOUT;
        if (w < 0) return MBEDTLS_ERR_NET_RECV_FAILED;
    }
}

/* Non-blocking TCP connect to the first address of host:port that answers. */
static goblin_err probe_connect(const tls_url *u, const char *url, int64_t deadline, int *fd_out,
                                char *msg, size_t cap) {
    struct addrinfo hints = {.ai_family = u->family, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(u->host, u->port, &hints, &res);
    if (rc)
        return goblin__errf(msg, cap, GOBLIN_EIO, "cannot resolve %s: %s", url, gai_strerror(rc));
    int last = ECONNREFUSED;
    bool timed_out = false;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            last = errno;
            continue;
        }
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
            *fd_out = fd;
            freeaddrinfo(res);
            return GOBLIN_OK;
        }
        if (errno == EINPROGRESS) {
            probe_io io = {fd, deadline};
            int w = probe_wait(&io, POLLOUT);
            int err = 0;
            socklen_t elen = sizeof err;
            if (w > 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) == 0 && err == 0) {
                *fd_out = fd;
                freeaddrinfo(res);
                return GOBLIN_OK;
            }
            if (w == 0) timed_out = true;
            last = w > 0 ? err : errno;
        } else {
            last = errno;
        }
        close(fd);
        if (timed_out) break;
    }
    freeaddrinfo(res);
    if (timed_out)
        return goblin__errf(msg, cap, GOBLIN_ETIMEDOUT, "connecting to %s timed out", url);
    return goblin__errf(msg, cap, last == ECONNREFUSED ? GOBLIN_ECONNREFUSED : GOBLIN_EIO,
                        "cannot connect to %s: %s", url, strerror(last));
}

goblin_err goblin__tls_fetch_peer_cert(const char *url, int timeout_ms, uint8_t **der_out,
                                       size_t *der_len, char *msg, size_t cap) {
    if (!url || !der_out || !der_len)
        return goblin__errf(msg, cap, GOBLIN_EINVAL, "URL and outputs are required");
    tls_url u;
    goblin_err e = tls_url_parse(url, &u, msg, cap);
    if (e) return e;
    int64_t deadline = now_ms() + (timeout_ms > 0 ? timeout_ms : GOBLIN__TLS_PROBE_TIMEOUT_MS);
    int fd = -1;
    if ((e = probe_connect(&u, url, deadline, &fd, msg, cap))) {
        tls_url_free(&u);
        return e;
    }
    tls_url_free(&u);

    mbedtls_ssl_context ssl;
    mbedtls_ssl_config conf;
    rng r;
    mbedtls_ssl_init(&ssl);
    mbedtls_ssl_config_init(&conf);
    probe_io io = {fd, deadline};
    int rc = rng_init(&r);
    if (rc) {
        e = mbed_errf(msg, cap, GOBLIN_ECRYPTO, rc, "seeding the random generator");
        goto out;
    }
    if ((rc = mbedtls_ssl_config_defaults(&conf, MBEDTLS_SSL_IS_CLIENT, MBEDTLS_SSL_TRANSPORT_STREAM,
                                          MBEDTLS_SSL_PRESET_DEFAULT))) {
        e = mbed_errf(msg, cap, GOBLIN_ECRYPTO, rc, "TLS configuration");
        goto out;
    }
    /* No verification here on purpose: this handshake only reads the certificate; the
     * caller compares its fingerprint with the pin and the real connection verifies
     * against exactly that certificate. */
    mbedtls_ssl_conf_authmode(&conf, MBEDTLS_SSL_VERIFY_NONE);
    mbedtls_ssl_conf_rng(&conf, mbedtls_ctr_drbg_random, &r.drbg);
    if ((rc = mbedtls_ssl_setup(&ssl, &conf))) {
        e = mbed_errf(msg, cap, GOBLIN_ECRYPTO, rc, "TLS setup");
        goto out;
    }
    mbedtls_ssl_set_bio(&ssl, &io, probe_send, probe_recv, NULL);
    while ((rc = mbedtls_ssl_handshake(&ssl)) != 0) {
        if (rc == MBEDTLS_ERR_SSL_WANT_READ || rc == MBEDTLS_ERR_SSL_WANT_WRITE) continue;
        char what[64 + 256];
        snprintf(what, sizeof what, "TLS handshake with %s", url);
        e = mbed_errf(msg, cap, rc == MBEDTLS_ERR_SSL_TIMEOUT ? GOBLIN_ETIMEDOUT : GOBLIN_ECRYPTO,
                      rc, what);
        goto out;
    }
    const mbedtls_x509_crt *peer = mbedtls_ssl_get_peer_cert(&ssl);
    if (!peer || !peer->raw.len) {
        e = goblin__errf(msg, cap, GOBLIN_EAUTH, "%s presented no certificate", url);
        goto out;
    }
    uint8_t *der = goblin__memdup(peer->raw.p, peer->raw.len);
    if (!der) {
        e = goblin__errf(msg, cap, GOBLIN_ENOMEM, "out of memory");
        goto out;
    }
    *der_out = der;
    *der_len = peer->raw.len;
    (void)mbedtls_ssl_close_notify(&ssl);
out:
    mbedtls_ssl_free(&ssl);
    mbedtls_ssl_config_free(&conf);
    rng_free(&r);
    close(fd);
    return e;
}

goblin_err goblin__tls_client_config_pinned_der(const uint8_t *der, size_t der_len,
                                                const char *fingerprint,
                                                nng_tls_config **out, char *msg, size_t cap) {
    if (!der || !der_len || !fingerprint || !out)
        return goblin__errf(msg, cap, GOBLIN_EINVAL, "certificate and fingerprint are required");
    char want[GOBLIN_TLS_FINGERPRINT_SIZE], got[GOBLIN_TLS_FINGERPRINT_SIZE];
    if (goblin_tls_fingerprint_normalize(fingerprint, want) != GOBLIN_OK)
        return goblin__errf(msg, cap, GOBLIN_EINVAL,
                            "pinned fingerprint is not a SHA-256 in hex (64 digits, ':' allowed)");
    uint8_t fp[32];
    goblin_err e = fingerprint_der(der, der_len, fp, msg, cap);
    if (e) return e;
    to_hex(fp, 32, got);
    /* Both values are public: no need for a constant-time comparison. */
    if (strcmp(want, got) != 0)
        return goblin__errf(msg, cap, GOBLIN_EAUTH,
                            "certificate fingerprint mismatch: pinned %s, node presented %s", want,
                            got);

    mbedtls_x509_crt crt;
    mbedtls_x509_crt_init(&crt);
    char *pem = NULL, *name = NULL;
    size_t pem_len;
    nng_tls_config *c = NULL;
    bool oom = false;
    int rc = mbedtls_x509_crt_parse_der(&crt, der, der_len);
    if (rc) {
        e = mbed_errf(msg, cap, GOBLIN_EFORMAT, rc, "the node's certificate");
        goto out;
    }
    if ((e = der_to_pem(der, der_len, &pem, &pem_len, msg, cap))) goto out;
    name = cert_name(&crt, &oom);
    if (oom) {
        e = goblin__errf(msg, cap, GOBLIN_ENOMEM, "out of memory");
        goto out;
    }
    int rv = nng_tls_config_alloc(&c, NNG_TLS_MODE_CLIENT);
    if (rv) {
        c = NULL;
        e = nng_errf(msg, cap, rv, "TLS client configuration");
    } else if ((rv = nng_tls_config_ca_chain(c, pem, NULL))) {
        e = nng_errf(msg, cap, rv, "loading the pinned certificate into nng");
    } else if ((rv = nng_tls_config_auth_mode(c, NNG_TLS_AUTH_MODE_REQUIRED))) {
        e = nng_errf(msg, cap, rv, "TLS client auth mode");
    } else if (name && (rv = nng_tls_config_server_name(c, name))) {
        /* Without a name the trust anchor alone still pins the node's key. */
        e = nng_errf(msg, cap, rv, "TLS server name");
    }
out:
    goblin__free(name);
    goblin__free(pem);
    mbedtls_x509_crt_free(&crt);
    if (e) {
        if (c) nng_tls_config_free(c);
        return e;
    }
    *out = c;
    return GOBLIN_OK;
}

goblin_err goblin__tls_client_config_pinned(const char *url, const char *fingerprint,
                                            int timeout_ms, nng_tls_config **out, char *msg,
                                            size_t cap) {
    if (!url || !fingerprint || !out)
        return goblin__errf(msg, cap, GOBLIN_EINVAL, "URL and fingerprint are required");
    char norm[GOBLIN_TLS_FINGERPRINT_SIZE];
    if (goblin_tls_fingerprint_normalize(fingerprint, norm) != GOBLIN_OK)
        return goblin__errf(msg, cap, GOBLIN_EINVAL,
                            "pinned fingerprint is not a SHA-256 in hex (64 digits, ':' allowed)");
    uint8_t *der = NULL;
    size_t len = 0;
    goblin_err e = goblin__tls_fetch_peer_cert(url, timeout_ms, &der, &len, msg, cap);
    if (e) return e;
    char inner[512];
    e = goblin__tls_client_config_pinned_der(der, len, norm, out, inner, sizeof inner);
    goblin__free(der);
    if (e) return goblin__errf(msg, cap, e, "%s: %s", url, inner);
    return GOBLIN_OK;
}

goblin_err goblin__tls_dialer_setup(nng_dialer d, const char *url,
                                    const goblin__tls_client_opts *o, char *msg, size_t cap) {
    if (!url || !o) return goblin__errf(msg, cap, GOBLIN_EINVAL, "URL and options are required");
    if (!o->ca_file == !o->fingerprint)
        return goblin__errf(msg, cap, GOBLIN_EINVAL,
                            "TLS to %s needs exactly one of a CA file and a pinned fingerprint",
                            url);
    nng_tls_config *c = NULL;
    goblin_err e = o->fingerprint
                       ? goblin__tls_client_config_pinned(url, o->fingerprint, o->timeout_ms, &c,
                                                          msg, cap)
                       : goblin__tls_client_config_ca(o->ca_file, o->server_name, url, &c, msg,
                                                      cap);
    if (e) return e;
    int rv = nng_dialer_set_ptr(d, NNG_OPT_TLS_CONFIG, c);
    nng_tls_config_free(c); /* the dialer holds its own reference */
    return rv ? nng_errf(msg, cap, rv, "setting the TLS configuration on the dialer") : GOBLIN_OK;
}

goblin_err goblin__tls_listener_setup(nng_listener l, const char *cert_file,
                                      const char *key_file, char *msg, size_t cap) {
    nng_tls_config *c = NULL;
    goblin_err e = goblin__tls_server_config(cert_file, key_file, &c, msg, cap);
    if (e) return e;
    int rv = nng_listener_set_ptr(l, NNG_OPT_TLS_CONFIG, c);
    nng_tls_config_free(c);
    return rv ? nng_errf(msg, cap, rv, "setting the TLS configuration on the listener")
              : GOBLIN_OK;
}
