/* libgoblin/net/worker_key.c - worker identities (worker_key.h): the key pair made
 * once per installation and kept in the config directory, or made in memory for an
 * in-process worker; the proof a worker signs for a node's CHALLENGE and its check;
 * fingerprints. */
#include "worker_key.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <mbedtls/ecdsa.h>
#include <mbedtls/ecp.h>
#include <mbedtls/pk.h>
#include <mbedtls/platform_util.h>

#include "base/alloc.h"
#include "base/errf.h"
#include "crypto.h"
#include "identity.h"

#define KEY_PEM_MAX 512

/* The DER of a P-256 SubjectPublicKeyInfo up to the 64 bytes of the point's
 * coordinates: SEQUENCE { SEQUENCE { id-ecPublicKey, prime256v1 }, BIT STRING 04 ... }. */
static const uint8_t SPKI_P256[27] = {0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48,
                                      0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a, 0x86, 0x48,
                                      0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00, 0x04};
_Static_assert(sizeof SPKI_P256 + 64 == GOBLIN__WKEY_PUBLIC_BYTES, "P-256 SPKI size");

struct goblin__wkey {
    mbedtls_pk_context pk;
    goblin__tls_rng rng;
    uint8_t pub[GOBLIN__WKEY_PUBLIC_BYTES];
    char fp[GOBLIN__WKEY_FP_HEX];
};

static bool spki_ok(const uint8_t *pub, size_t len) {
    return len == GOBLIN__WKEY_PUBLIC_BYTES && memcmp(pub, SPKI_P256, sizeof SPKI_P256) == 0;
}

goblin_err goblin__wkey_fingerprint_of(const uint8_t *pub, size_t pub_len, char hex[GOBLIN__WKEY_FP_HEX]) {
    uint8_t h[32];
    if (!pub || goblin__tls_sha256_two(pub, pub_len, NULL, 0, h)) return GOBLIN_EINVAL;
    goblin__tls_to_hex(h, 32, hex);
    return GOBLIN_OK;
}

bool goblin__wkey_fingerprint_valid(const char *s, size_t len) {
    if (!s || len != 64) return false;
    for (size_t i = 0; i < len; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
    return true;
}

/* The public half of k->pk into k->pub and its fingerprint. */
static goblin_err key_finish(goblin__wkey *k, char *msg, size_t cap) {
    unsigned char der[160];
    int n = mbedtls_pk_write_pubkey_der(&k->pk, der, sizeof der); /* written at the end */
    if (n < 0) return goblin__tls_mbed_errf(msg, cap, GOBLIN_EFORMAT, n, "worker public key");
    const uint8_t *p = der + sizeof der - (size_t)n;
    if (!spki_ok(p, (size_t)n))
        return goblin__errf(msg, cap, GOBLIN_EFORMAT, "worker key is not an EC P-256 key");
    memcpy(k->pub, p, GOBLIN__WKEY_PUBLIC_BYTES);
    return goblin__wkey_fingerprint_of(k->pub, sizeof k->pub, k->fp);
}

static goblin_err key_alloc(goblin__wkey **out, char *msg, size_t cap) {
    goblin__wkey *k = goblin__calloc(1, sizeof *k);
    if (!k) return goblin__errf(msg, cap, GOBLIN_ENOMEM, "out of memory");
    mbedtls_pk_init(&k->pk);
    int rc = goblin__tls_rng_init(&k->rng);
    if (rc) {
        goblin__wkey_free(k);
        return goblin__tls_mbed_errf(msg, cap, GOBLIN_EIO, rc, "random number generator");
    }
    *out = k;
    return GOBLIN_OK;
}

static goblin_err key_generate(goblin__wkey *k, char *msg, size_t cap) {
    int rc;
    if ((rc = mbedtls_pk_setup(&k->pk, mbedtls_pk_info_from_type(MBEDTLS_PK_ECKEY))) ||
        (rc = mbedtls_ecp_gen_key(MBEDTLS_ECP_DP_SECP256R1, mbedtls_pk_ec(k->pk), mbedtls_ctr_drbg_random,
                                  &k->rng.drbg)))
        return goblin__tls_mbed_errf(msg, cap, GOBLIN_EIO, rc, "generating the worker key");
    return key_finish(k, msg, cap);
}

goblin_err goblin__wkey_ephemeral(goblin__wkey **out, char *msg, size_t cap) {
    if (!out) return GOBLIN_EINVAL;
    goblin__wkey *k;
    goblin_err e = key_alloc(&k, msg, cap);
    if (e) return e;
    if ((e = key_generate(k, msg, cap))) {
        goblin__wkey_free(k);
        return e;
    }
    *out = k;
    return GOBLIN_OK;
}

static goblin_err key_load(goblin__wkey *k, const char *path, char *msg, size_t cap) {
    uint8_t *buf;
    size_t len;
    goblin_err e = goblin__tls_read_file(path, "worker key", &buf, &len, msg, cap);
    if (e) return e;
    int rc = goblin__tls_pk_parse(&k->pk, buf, len + 1, &k->rng);
    goblin__tls_wipe_free(buf, len + 1);
    if (rc) {
        char what[64 + 4096];
        snprintf(what, sizeof what, "worker key %s", path);
        return goblin__tls_mbed_errf(msg, cap, GOBLIN_EFORMAT, rc, what);
    }
    if (mbedtls_pk_get_type(&k->pk) != MBEDTLS_PK_ECKEY)
        return goblin__errf(msg, cap, GOBLIN_EFORMAT, "worker key %s is not an EC key", path);
    return key_finish(k, msg, cap);
}

goblin_err goblin__wkey_load_or_create(const char *dir, goblin__wkey **out, bool *created, char *msg,
                                       size_t cap) {
    if (!dir || !*dir || !out) return goblin__errf(msg, cap, GOBLIN_EINVAL, "no config directory");
    char path[4096];
    int w = snprintf(path, sizeof path, "%s/%s", dir, GOBLIN__WKEY_FILE);
    if (w < 0 || (size_t)w >= sizeof path) return goblin__errf(msg, cap, GOBLIN_ELIMIT, "path too long: %s", dir);
    goblin__wkey *k;
    goblin_err e = key_alloc(&k, msg, cap);
    if (e) return e;
    struct stat st;
    bool make = stat(path, &st) != 0 && errno == ENOENT;
    if (!make) {
        e = key_load(k, path, msg, cap);
    } else if (!(e = goblin__tls_make_dirs(dir, msg, cap)) && !(e = key_generate(k, msg, cap))) {
        unsigned char pem[KEY_PEM_MAX];
        int rc = mbedtls_pk_write_key_pem(&k->pk, pem, sizeof pem);
        if (rc) e = goblin__tls_mbed_errf(msg, cap, GOBLIN_EIO, rc, "writing the worker key");
        else e = goblin__tls_write_file(path, pem, strlen((char *)pem), 0600, false, msg, cap);
        mbedtls_platform_zeroize(pem, sizeof pem);
    }
    if (e) {
        goblin__wkey_free(k);
        return e;
    }
    if (created) *created = make;
    *out = k;
    return GOBLIN_OK;
}

void goblin__wkey_free(goblin__wkey *k) {
    if (!k) return;
    mbedtls_pk_free(&k->pk); /* zeroizes the private key */
    goblin__tls_rng_free(&k->rng);
    goblin__tls_wipe_free(k, sizeof *k);
}

const uint8_t *goblin__wkey_public(const goblin__wkey *k) { return k ? k->pub : NULL; }

const char *goblin__wkey_fingerprint(const goblin__wkey *k) { return k ? k->fp : ""; }

/* ---- proofs --------------------------------------------------------------------- */

goblin_err goblin__wkey_hash(const void *p, size_t n, uint8_t out[32]) {
    return goblin__tls_sha256_two(p, n, NULL, 0, out) ? GOBLIN_EINTERNAL : GOBLIN_OK;
}

goblin_err goblin__wkey_proof_digest(const uint8_t nonce[GOBLIN__WKEY_NONCE_BYTES], const uint8_t hello_hash[32],
                                     const uint8_t *pub, uint8_t out[32]) {
    static const char domain[] = "goblin worker identity proof v1";
    uint8_t msg[sizeof domain + GOBLIN__WKEY_NONCE_BYTES + 32 + GOBLIN__WKEY_PUBLIC_BYTES];
    size_t o = 0;
    memcpy(msg, domain, sizeof domain); /* with its NUL: the domain ends unambiguously */
    o += sizeof domain;
    memcpy(msg + o, nonce, GOBLIN__WKEY_NONCE_BYTES);
    o += GOBLIN__WKEY_NONCE_BYTES;
    memcpy(msg + o, hello_hash, 32);
    o += 32;
    memcpy(msg + o, pub, GOBLIN__WKEY_PUBLIC_BYTES);
    o += GOBLIN__WKEY_PUBLIC_BYTES;
    return goblin__tls_sha256_two(msg, o, NULL, 0, out) ? GOBLIN_EINTERNAL : GOBLIN_OK;
}

goblin_err goblin__wkey_sign(goblin__wkey *k, const uint8_t digest[32], uint8_t *sig, size_t *len, char *msg,
                             size_t cap) {
    if (!k || !digest || !sig || !len) return GOBLIN_EINVAL;
    int rc = goblin__tls_pk_sign(&k->pk, digest, sig, GOBLIN__WKEY_SIG_MAX, len, &k->rng);
    if (rc) return goblin__tls_mbed_errf(msg, cap, GOBLIN_EINTERNAL, rc, "signing the identity proof");
    return GOBLIN_OK;
}

/* The verifier's P-256 group, kept: mbedtls keeps the comb table of multiples of the
 * generator it computes on a group's first use in the group, and the half of a
 * verification that multiplies the generator then skips it. A key parsed afresh
 * (mbedtls_pk_parse_public_key) loads a new group every time: 1.46 ms per proof
 * checked against 1.05 ms with the group kept (measured alone, in one process). The
 * node checks one proof per worker joining; 4,096 joining at once took it 6 s of
 * verification. One context under a lock; a thread that finds it busy verifies the
 * usual way. */
static pthread_mutex_t vctx_mu = PTHREAD_MUTEX_INITIALIZER;
static mbedtls_ecdsa_context vctx;
static int vctx_state; /* 0: not made yet, 1: ready, -1: could not be made */

/* The check with the kept group: GOBLIN_OK, the error (as the usual way reports it), or
 * -1: the kept group cannot be used now (busy, or it could not be made). */
static int verify_kept(const uint8_t *pub, const uint8_t digest[32], const uint8_t *sig, size_t sig_len,
                       char *msg, size_t cap) {
    if (pthread_mutex_trylock(&vctx_mu) != 0) return -1;
    if (vctx_state == 0) {
        mbedtls_ecdsa_init(&vctx);
        vctx_state = mbedtls_ecp_group_load(&vctx.grp, MBEDTLS_ECP_DP_SECP256R1) == 0 ? 1 : -1;
    }
    int r = -1;
    if (vctx_state == 1) {
        /* The SPKI (checked by spki_ok: P-256, uncompressed) ends with the point 04 || X || Y.
         * As mbedtls_pk_parse_public_key does: read it, check it lies on the curve; then
         * as mbedtls_pk_verify does for an EC key: mbedtls_ecdsa_read_signature. */
        const uint8_t *pt = pub + sizeof SPKI_P256 - 1;
        int rc = mbedtls_ecp_point_read_binary(&vctx.grp, &vctx.Q, pt, 65);
        if (!rc) rc = mbedtls_ecp_check_pubkey(&vctx.grp, &vctx.Q);
        if (rc) r = goblin__tls_mbed_errf(msg, cap, GOBLIN_EFORMAT, rc, "public key");
        else if (mbedtls_ecdsa_read_signature(&vctx, digest, 32, sig, sig_len))
            r = goblin__errf(msg, cap, GOBLIN_EAUTH, "signature does not verify with the presented public key");
        else r = GOBLIN_OK;
    }
    pthread_mutex_unlock(&vctx_mu);
    return r;
}

goblin_err goblin__wkey_verify(const uint8_t *pub, size_t pub_len, const uint8_t digest[32], const uint8_t *sig,
                               size_t sig_len, char *msg, size_t cap) {
    if (!pub || !spki_ok(pub, pub_len))
        return goblin__errf(msg, cap, GOBLIN_EFORMAT, "public key is not a P-256 key (%zu bytes)", pub_len);
    if (!sig || sig_len == 0 || sig_len > GOBLIN__WKEY_SIG_MAX)
        return goblin__errf(msg, cap, GOBLIN_EAUTH, "signature of %zu bytes", sig_len);
    int kept = verify_kept(pub, digest, sig, sig_len, msg, cap);
    if (kept >= 0) return (goblin_err)kept;
    /* The kept group busy (another thread verifying) or unavailable: the usual way. */
    mbedtls_pk_context pk;
    mbedtls_pk_init(&pk);
    int rc = mbedtls_pk_parse_public_key(&pk, pub, pub_len);
    goblin_err e = GOBLIN_OK;
    if (rc) e = goblin__tls_mbed_errf(msg, cap, GOBLIN_EFORMAT, rc, "public key");
    else if ((rc = mbedtls_pk_verify(&pk, MBEDTLS_MD_SHA256, digest, 32, sig, sig_len)))
        e = goblin__errf(msg, cap, GOBLIN_EAUTH, "signature does not verify with the presented public key");
    mbedtls_pk_free(&pk);
    return e;
}
