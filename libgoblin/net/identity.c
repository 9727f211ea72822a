/* libgoblin/net/identity.c - node identities (goblin/tls.h): generating a key and a
 * self-signed certificate into a directory, loading and checking a certificate and
 * key pair, fingerprints; and the certificate helpers the TLS configurations use
 * (identity.h). docs/security.md has the model. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <goblin/tls.h>
#include <mbedtls/asn1write.h>
#include <mbedtls/ecp.h>
#include <mbedtls/oid.h>
#include <mbedtls/pem.h>
#include <mbedtls/pk.h>
#include <mbedtls/platform_util.h>
#include <mbedtls/x509_crt.h>

#include "base/alloc.h"
#include "base/errf.h"
#include "crypto.h"
#include "identity.h"

/* Extra DNS names a generated certificate may carry. */
#define MAX_EXTRA_DNS 16
#define PEM_CERT_BEGIN "-----BEGIN CERTIFICATE-----\n"
#define PEM_CERT_END "-----END CERTIFICATE-----\n"


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
    if (rc < 0) return goblin__tls_mbed_errf(msg, cap, GOBLIN_EFORMAT, rc, what);
    if (rc > 0)
        return goblin__errf(msg, cap, GOBLIN_EFORMAT, "%s: %d certificate(s) could not be parsed",
                            what, rc);
    return GOBLIN_OK;
}

goblin_err goblin__tls_fingerprint_der(const uint8_t *der, size_t len, uint8_t out[32], char *msg,
                                       size_t cap) {
    int rc = goblin__tls_sha256_two(der, len, NULL, 0, out);
    return rc ? goblin__tls_mbed_errf(msg, cap, GOBLIN_ECRYPTO, rc, "SHA-256") : GOBLIN_OK;
}

/* One DER certificate as a new NUL-terminated PEM string. */
goblin_err goblin__tls_der_to_pem(const uint8_t *der, size_t len, char **out, size_t *out_len,
                                  char *msg, size_t cap) {
    size_t need = len / 3 * 4 + len / 32 + 128, olen = 0;
    char *pem = goblin__alloc(need);
    if (!pem) return goblin__errf(msg, cap, GOBLIN_ENOMEM, "out of memory");
    int rc = mbedtls_pem_write_buffer(PEM_CERT_BEGIN, PEM_CERT_END, der, len,
                                      (unsigned char *)pem, need, &olen);
    if (rc) {
        goblin__free(pem);
        return goblin__tls_mbed_errf(msg, cap, GOBLIN_ECRYPTO, rc, "PEM encoding");
    }
    *out = pem;
    *out_len = strlen(pem);
    return GOBLIN_OK;
}

/* A parsed chain as one PEM string (what nng's ca_chain/own_cert take, whatever the
 * file's own encoding was). */
goblin_err goblin__tls_chain_to_pem(const mbedtls_x509_crt *crt, char **out, char *msg,
                                    size_t cap) {
    size_t total = 1;
    char *acc = NULL;
    for (const mbedtls_x509_crt *c = crt; c && c->raw.len; c = c->next) {
        char *one;
        size_t n;
        goblin_err e = goblin__tls_der_to_pem(c->raw.p, c->raw.len, &one, &n, msg, cap);
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
char *goblin__tls_cert_name(const mbedtls_x509_crt *crt, bool *oom) {
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

bool goblin__tls_self_issued(const mbedtls_x509_crt *c) {
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
goblin_err goblin__tls_make_dirs(const char *dir, char *msg, size_t cap) {
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
goblin_err goblin__tls_write_file(const char *path, const void *data, size_t n, mode_t mode,
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
static goblin_err generate(const goblin_tls_init_params *p, goblin__tls_rng *r, char **key_pem_out,
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
        e = goblin__tls_mbed_errf(msg, cap, GOBLIN_ECRYPTO, rc, "EC P-256 key generation");
        goto out;
    }
    if ((rc = mbedtls_pk_write_key_pem(&key, (unsigned char *)key_pem, KEY_PEM_MAX))) {
        e = goblin__tls_mbed_errf(msg, cap, GOBLIN_ECRYPTO, rc, "writing the private key");
        goto out;
    }

    /* Serial: 16 random bytes, positive and without a leading zero byte (RFC 5280). */
    unsigned char serial[16];
    if ((rc = mbedtls_ctr_drbg_random(&r->drbg, serial, sizeof serial))) {
        e = goblin__tls_mbed_errf(msg, cap, GOBLIN_ECRYPTO, rc, "random serial");
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
        (rc = goblin__tls_crt_set_serial(&crt, serial, sizeof serial)) ||
        (rc = mbedtls_x509write_crt_set_validity(&crt, not_before, not_after)) ||
        (rc = mbedtls_x509write_crt_set_basic_constraints(&crt, 1, 0)) ||
        (rc = mbedtls_x509write_crt_set_key_usage(&crt, MBEDTLS_X509_KU_DIGITAL_SIGNATURE |
                                                            MBEDTLS_X509_KU_KEY_CERT_SIGN)) ||
        (rc = write_san(san_buf, SAN_MAX, names, 2 + p->n_dns_names, &san, &san_len)) ||
        (rc = mbedtls_x509write_crt_set_extension(
             &crt, MBEDTLS_OID_SUBJECT_ALT_NAME, MBEDTLS_OID_SIZE(MBEDTLS_OID_SUBJECT_ALT_NAME), 0,
             san, san_len))) {
        e = goblin__tls_mbed_errf(msg, cap, GOBLIN_ECRYPTO, rc, "building the certificate");
        goto out;
    }
    rc = mbedtls_x509write_crt_der(&crt, der_buf, DER_MAX, mbedtls_ctr_drbg_random, &r->drbg);
    if (rc <= 0) {
        e = goblin__tls_mbed_errf(msg, cap, GOBLIN_ECRYPTO, rc, "signing the certificate");
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
    goblin__tls_wipe_free(key_pem, KEY_PEM_MAX);
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
    if ((e = goblin__tls_make_dirs(dir, msg, cap))) goto out_id;

    goblin__tls_rng r;
    int rc = goblin__tls_rng_init(&r);
    if (rc) {
        goblin__tls_rng_free(&r);
        e = goblin__tls_mbed_errf(msg, cap, GOBLIN_ECRYPTO, rc, "seeding the random generator");
        goto out_id;
    }
    char *key_pem = NULL;
    uint8_t *der = NULL;
    size_t der_len = 0;
    e = generate(params, &r, &key_pem, &der, &der_len, msg, cap);
    goblin__tls_rng_free(&r);
    if (e) goto out_id;

    char *cert_pem = NULL;
    size_t cert_pem_len = 0;
    uint8_t fp[32];
    if ((e = goblin__tls_fingerprint_der(der, der_len, fp, msg, cap)) ||
        (e = goblin__tls_der_to_pem(der, der_len, &cert_pem, &cert_pem_len, msg, cap)))
        goto out_gen;
    goblin__tls_to_hex(fp, 32, id->fingerprint);

    size_t key_len = strlen(key_pem);
    /* Key first: a directory never holds a certificate without its key. */
    if ((e = goblin__tls_write_file(id->key_path, key_pem, key_len, 0600, params->force, msg, cap)))
        goto out_gen;
    if ((e = goblin__tls_write_file(id->cert_path, cert_pem, cert_pem_len, 0644, params->force, msg, cap))) {
        if (!params->force) unlink(id->key_path); /* ours: created just above */
        goto out_gen;
    }
    memcpy(out, id, sizeof *id);
out_gen:
    goblin__free(cert_pem);
    goblin__free(der);
    if (key_pem) goblin__tls_wipe_free(key_pem, strlen(key_pem) + 1);
out_id:
    goblin__free(id);
    return e;
}

/* Key from a file (unencrypted PEM or DER) into pk. */
static goblin_err load_key(const char *path, mbedtls_pk_context *pk, goblin__tls_rng *r, char *msg,
                           size_t cap) {
    uint8_t *buf;
    size_t len;
    goblin_err e = goblin__tls_read_file(path, "private key", &buf, &len, msg, cap);
    if (e) return e;
    int rc = goblin__tls_pk_parse(pk, buf, looks_pem(buf, len) ? len + 1 : len, r);
    goblin__tls_wipe_free(buf, len + 1);
    if (rc == MBEDTLS_ERR_PK_PASSWORD_REQUIRED)
        return goblin__errf(msg, cap, GOBLIN_EFORMAT,
                            "private key %s is encrypted; goblin needs an unencrypted key", path);
    if (rc) {
        char what[64 + GOBLIN_TLS_PATH_MAX];
        snprintf(what, sizeof what, "private key %s", path);
        return goblin__tls_mbed_errf(msg, cap, GOBLIN_EFORMAT, rc, what);
    }
    return GOBLIN_OK;
}

goblin_err goblin__tls_load_certs(const char *path, mbedtls_x509_crt *crt, char *msg, size_t cap) {
    uint8_t *buf;
    size_t len;
    goblin_err e = goblin__tls_read_file(path, "certificate", &buf, &len, msg, cap);
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
goblin_err goblin__tls_load_pair(const char *cert_file, const char *key_file, char **chain_pem,
                                 char **key_pem, uint8_t fp[32], char *msg, size_t cap) {
    enum { KEY_PEM_MAX = 16384 };
    mbedtls_x509_crt crt;
    mbedtls_pk_context pk;
    goblin__tls_rng r;
    goblin_err e;
    mbedtls_x509_crt_init(&crt);
    mbedtls_pk_init(&pk);
    int rc = goblin__tls_rng_init(&r);
    if (rc) {
        e = goblin__tls_mbed_errf(msg, cap, GOBLIN_ECRYPTO, rc, "seeding the random generator");
        goto out;
    }
    if ((e = goblin__tls_load_certs(cert_file, &crt, msg, cap)) ||
        (e = load_key(key_file, &pk, &r, msg, cap)))
        goto out;
    if (goblin__tls_pk_check_pair(&crt.pk, &pk, &r) != 0) {
        e = goblin__errf(msg, cap, GOBLIN_EAUTH, "private key %s does not belong to certificate %s",
                         key_file, cert_file);
        goto out;
    }
    if ((e = goblin__tls_fingerprint_der(crt.raw.p, crt.raw.len, fp, msg, cap))) goto out;
    if (chain_pem && (e = goblin__tls_chain_to_pem(&crt, chain_pem, msg, cap))) goto out;
    if (key_pem) {
        char *k = goblin__calloc(1, KEY_PEM_MAX);
        if (!k) {
            e = goblin__errf(msg, cap, GOBLIN_ENOMEM, "out of memory");
        } else if ((rc = mbedtls_pk_write_key_pem(&pk, (unsigned char *)k, KEY_PEM_MAX))) {
            goblin__tls_wipe_free(k, KEY_PEM_MAX);
            e = goblin__tls_mbed_errf(msg, cap, GOBLIN_ECRYPTO, rc, "re-encoding the private key");
        } else {
            *key_pem = k;
        }
        if (e && chain_pem) {
            goblin__free(*chain_pem);
            *chain_pem = NULL;
        }
    }
out:
    goblin__tls_rng_free(&r);
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
    goblin_err e = goblin__tls_load_pair(cert_file, key_file, NULL, NULL, fp, msg, cap);
    if (e) return e;
    snprintf(out->cert_path, sizeof out->cert_path, "%s", cert_file);
    snprintf(out->key_path, sizeof out->key_path, "%s", key_file);
    goblin__tls_to_hex(fp, 32, out->fingerprint);
    return GOBLIN_OK;
}

goblin_err goblin_tls_fingerprint_file(const char *path, char *hex_out, goblin_errbuf *err) {
    GOBLIN__ERRBUF(err, msg, cap);
    if (!path || !hex_out)
        return goblin__errf(msg, cap, GOBLIN_EINVAL, "path and output are required");
    mbedtls_x509_crt crt;
    mbedtls_x509_crt_init(&crt);
    uint8_t fp[32];
    goblin_err e = goblin__tls_load_certs(path, &crt, msg, cap);
    if (!e) e = goblin__tls_fingerprint_der(crt.raw.p, crt.raw.len, fp, msg, cap);
    mbedtls_x509_crt_free(&crt);
    if (!e) goblin__tls_to_hex(fp, 32, hex_out);
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
        if (!goblin__tls_from_hex(s, 32, b)) return GOBLIN_EINVAL;
    } else if (n == 95) { /* 32 pairs and 31 colons */
        for (size_t i = 0; i < 32; i++) {
            if (i < 31 && s[3 * i + 2] != ':') return GOBLIN_EINVAL;
            if (!goblin__tls_from_hex(s + 3 * i, 1, b + i)) return GOBLIN_EINVAL;
        }
    } else {
        return GOBLIN_EINVAL;
    }
    goblin__tls_to_hex(b, 32, hex_out);
    return GOBLIN_OK;
}

