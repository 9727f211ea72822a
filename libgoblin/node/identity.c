/* libgoblin/node/identity.c - worker identities on the node: the CHALLENGE sent for a
 * HELLO and the PROOF checked (net/worker_key.h), the allow list, the owners of
 * identities, the quarantined identities and their file, and the bounded table of
 * per-identity records (trust, quarantine) that outlive the connections. */
#include "node_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/errf.h"
#include "base/secret.h"
#include "goblin/tls.h"

#define OWNER_MAX 63 /* bytes of an owner's name */

/* The leading 64 bits of a fingerprint: its key in the hash maps (the full text is
 * compared after a lookup; two identities agreeing in 64 bits of SHA-256 are refused). */
static uint64_t fp_key(const char *fp) {
    uint64_t k = 0;
    for (int i = 0; i < 16; i++) {
        char c = fp[i];
        k = k << 4 | (uint64_t)(c <= '9' ? c - '0' : c - 'a' + 10);
    }
    return k;
}

/* ---- fingerprint lists ---------------------------------------------------------- */

static int32_t fplist_find(const fplist *l, const char *fp) {
    int32_t i = goblin__node_index_get(&l->ix, fp_key(fp));
    return i >= 0 && strcmp(l->fp[i], fp) == 0 ? i : -1;
}

/* Add @p fp (owner @p owner) unless there: ENOMEM, or EINVAL for a 64-bit collision. */
static goblin_err fplist_add(fplist *l, const char *fp, int32_t owner) {
    int32_t i = goblin__node_index_get(&l->ix, fp_key(fp));
    if (i >= 0) {
        if (strcmp(l->fp[i], fp) != 0) return GOBLIN_EINVAL;
        l->owner[i] = owner;
        return GOBLIN_OK;
    }
    int64_t c = l->cap;
    if (!goblin__node_grow((void **)&l->fp, &c, l->n + 1, sizeof *l->fp)) return GOBLIN_ENOMEM;
    c = l->cap;
    if (!goblin__node_grow((void **)&l->owner, &c, l->n + 1, sizeof *l->owner)) return GOBLIN_ENOMEM;
    l->cap = (int32_t)c;
    if (!goblin__node_index_put(&l->ix, fp_key(fp), l->n)) return GOBLIN_ENOMEM;
    memcpy(l->fp[l->n], fp, GOBLIN__WKEY_FP_HEX);
    l->owner[l->n++] = owner;
    return GOBLIN_OK;
}

static void fplist_free(fplist *l) {
    goblin__free(l->fp);
    goblin__free(l->owner);
    goblin__node_index_free(&l->ix);
    *l = (fplist){0};
}

static int32_t owner_intern(goblin_node *n, const char *name) {
    for (int32_t i = 0; i < n->n_owner_names; i++)
        if (strcmp(n->owner_names[i], name) == 0) return i;
    int64_t c = n->n_owner_names;
    if (!goblin__node_grow((void **)&n->owner_names, &c, n->n_owner_names + 1, sizeof(char *))) return -1;
    char *s = goblin__strdup(name);
    if (!s) return -1;
    n->owner_names[n->n_owner_names] = s;
    return n->n_owner_names++;
}

/* Read @p path into @p l: a fingerprint a line (with @p owners, then its owner's name),
 * '#' to the end of a line a comment, blank lines ignored. A missing file is empty
 * when @p missing_ok. */
static goblin_err load_list(goblin_node *n, const char *path, const char *what, fplist *l, bool owners,
                            bool missing_ok, char *msg, size_t cap) {
    FILE *f = fopen(path, "re");
    if (!f) {
        if (errno == ENOENT && missing_ok) return GOBLIN_OK;
        return goblin__errf(msg, cap, GOBLIN_EINVAL, "cannot read the %s %s: %s", what, path, strerror(errno));
    }
    char line[1024];
    int64_t no = 0;
    goblin_err e = GOBLIN_OK;
    while (!e && fgets(line, sizeof line, f)) {
        no++;
        size_t len = strlen(line);
        if (len == sizeof line - 1 && line[len - 1] != '\n') {
            e = goblin__errf(msg, cap, GOBLIN_EINVAL, "%s %s line %lld: too long", what, path, (long long)no);
            break;
        }
        char *hash = strchr(line, '#');
        if (hash) *hash = 0;
        char *save = NULL, *tok = strtok_r(line, " \t\r\n", &save);
        if (!tok) continue;
        char fp[GOBLIN__WKEY_FP_HEX];
        if (goblin_tls_fingerprint_normalize(tok, fp) != GOBLIN_OK) {
            e = goblin__errf(msg, cap, GOBLIN_EINVAL, "%s %s line %lld: not a SHA-256 fingerprint: %.80s", what, path,
                             (long long)no, tok);
            break;
        }
        int32_t owner = -1;
        char *name = strtok_r(NULL, " \t\r\n", &save);
        if (owners) {
            bool ok = name && strlen(name) <= OWNER_MAX;
            for (const char *c = name; ok && *c; c++) ok = *c > 0x20 && *c < 0x7f;
            if (!ok) {
                e = goblin__errf(msg, cap, GOBLIN_EINVAL, "%s %s line %lld: want \"fingerprint owner\" (an owner of "
                                 "1..%d printable characters)", what, path, (long long)no, OWNER_MAX);
                break;
            }
            if ((owner = owner_intern(n, name)) < 0) e = goblin__errf(msg, cap, GOBLIN_ENOMEM, "out of memory");
            name = strtok_r(NULL, " \t\r\n", &save);
        }
        if (!e && name)
            e = goblin__errf(msg, cap, GOBLIN_EINVAL, "%s %s line %lld: unexpected \"%.40s\"", what, path, (long long)no,
                             name);
        goblin_err ae = e ? GOBLIN_OK : fplist_add(l, fp, owner);
        if (ae == GOBLIN_ENOMEM) e = goblin__errf(msg, cap, GOBLIN_ENOMEM, "out of memory");
        else if (ae)
            e = goblin__errf(msg, cap, GOBLIN_EINVAL, "%s %s line %lld: %s collides with an earlier line in 64 bits",
                             what, path, (long long)no, fp);
    }
    if (!e && ferror(f)) e = goblin__errf(msg, cap, GOBLIN_EINVAL, "cannot read the %s %s", what, path);
    fclose(f);
    return e;
}

goblin_err goblin__node_identity_load(goblin_node *n, char *msg, size_t cap) {
    goblin_err e = GOBLIN_OK;
    if (n->p.allow_identities_file &&
        (e = load_list(n, n->p.allow_identities_file, "identity allow list", &n->allow, false, false, msg, cap)))
        return e;
    if (n->p.owners_file && (e = load_list(n, n->p.owners_file, "owners file", &n->owners, true, false, msg, cap)))
        return e;
    if (n->p.quarantine_file &&
        (e = load_list(n, n->p.quarantine_file, "quarantine file", &n->qlist, false, true, msg, cap)))
        return e;
    return GOBLIN_OK;
}

void goblin__node_identity_free(goblin_node *n) {
    fplist_free(&n->allow);
    fplist_free(&n->owners);
    fplist_free(&n->qlist);
    for (int32_t i = 0; i < n->n_owner_names; i++) goblin__free(n->owner_names[i]);
    goblin__free(n->owner_names);
    n->owner_names = NULL;
    n->n_owner_names = 0;
    goblin__free(n->idents);
    n->idents = NULL;
    n->n_idents = n->cap_idents = n->live_idents = 0;
    goblin__node_index_free(&n->ident_ix);
}

/* ---- the quarantine file -------------------------------------------------------- */

/* Rewrite the quarantine file from n->qlist: a temporary file (0600) renamed over it,
 * so a crash leaves the old list or the new one, never a part. */
static void save_quarantine(goblin_node *n) {
    const char *path = n->p.quarantine_file;
    if (!path) return;
    char tmp[4200];
    int k = snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    if (k < 0 || (size_t)k >= sizeof tmp) {
        goblin__node_log(n, GOBLIN_LOG_ERROR, "quarantine file %s: path too long", path);
        return;
    }
    unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    bool ok = fd >= 0 && fchmod(fd, 0600) == 0;
    static const char head[] = "# worker identities quarantined by this goblin node (one SHA-256 fingerprint a line)\n";
    ok = ok && write(fd, head, sizeof head - 1) == (ssize_t)(sizeof head - 1);
    for (int32_t i = 0; ok && i < n->qlist.n; i++) {
        char line[GOBLIN__WKEY_FP_HEX + 1];
        memcpy(line, n->qlist.fp[i], 64);
        line[64] = '\n';
        ok = write(fd, line, 65) == 65;
    }
    int err = errno;
    if (fd >= 0) {
        if (ok && fsync(fd) != 0) ok = false;
        if (close(fd) != 0) ok = false;
    }
    if (ok && rename(tmp, path) != 0) ok = false;
    if (!ok) {
        if (!err) err = errno;
        if (fd >= 0) unlink(tmp);
        goblin__node_log(n, GOBLIN_LOG_ERROR, "cannot write the quarantine file %s: %s (the quarantine holds "
                         "until the node stops)", path, strerror(err));
    }
}

/* ---- records -------------------------------------------------------------------- */

ident *goblin__node_peer_ident(const goblin_node *n, int32_t pi) {
    int32_t i = n->peers[pi].ident;
    return i >= 0 && i < n->n_idents && n->idents[i].used ? &n->idents[i] : NULL;
}

bool goblin__node_ident_same_party(const goblin_node *n, int32_t a, int32_t b) {
    if (a == b) return true;
    if (a < 0 || b < 0) return false;
    int32_t oa = n->idents[a].owner;
    return oa >= 0 && oa == n->idents[b].owner;
}

bool goblin__node_same_party(const goblin_node *n, int32_t a, int32_t b) {
    if (a == b || goblin__node_same_origin(n, a, b)) return true;
    return goblin__node_ident_same_party(n, n->peers[a].ident, n->peers[b].ident) && n->peers[a].ident >= 0;
}

int32_t goblin__node_ident_by_serial(const goblin_node *n, uint64_t serial) {
    if (!serial) return -1;
    for (int32_t i = 0; i < n->n_idents; i++)
        if (n->idents[i].used && n->idents[i].serial == serial) return i;
    return -1;
}

/* The record of @p fp, made if needed (evicting the least recently seen identity with
 * no connection when the table is full); -1: out of memory, a collision or full. */
static int32_t ident_record(goblin_node *n, const char *fp, char *why, size_t cap) {
    uint64_t key = fp_key(fp);
    int32_t i = goblin__node_index_get(&n->ident_ix, key);
    if (i >= 0) {
        if (strcmp(n->idents[i].fp, fp) == 0) return i;
        goblin__errf(why, cap, GOBLIN_EAUTH, "identity %s collides with another in 64 bits", fp);
        return -1;
    }
    if (n->n_idents < IDENT_MAX) {
        int64_t c = n->cap_idents;
        if (!goblin__node_grow((void **)&n->idents, &c, n->n_idents + 1, sizeof(ident))) {
            goblin__errf(why, cap, GOBLIN_ENOMEM, "out of memory");
            return -1;
        }
        n->cap_idents = (int32_t)c;
        i = n->n_idents++;
        n->idents[i].used = false;
    } else {
        int32_t lru = -1;
        for (int32_t k = 0; k < n->n_idents; k++) {
            const ident *r = &n->idents[k];
            if (!r->used) {
                lru = k;
                break;
            }
            if (r->connected == 0 && (lru < 0 || r->last_seen_ms < n->idents[lru].last_seen_ms)) lru = k;
        }
        if (lru < 0) {
            goblin__errf(why, cap, GOBLIN_ELIMIT, "%d identities are connected: no room for another", IDENT_MAX);
            return -1;
        }
        i = lru;
        if (n->idents[i].used) {
            goblin__node_index_del(&n->ident_ix, fp_key(n->idents[i].fp));
            n->live_idents--;
        }
    }
    if (!goblin__node_index_put(&n->ident_ix, key, i)) {
        goblin__errf(why, cap, GOBLIN_ENOMEM, "out of memory");
        n->idents[i].used = false;
        if (i == n->n_idents - 1 && n->n_idents < IDENT_MAX) n->n_idents--; /* not left unused */
        n->st.identities_tracked = n->live_idents;
        return -1;
    }
    ident *r = &n->idents[i];
    memset(r, 0, sizeof *r);
    r->used = true;
    memcpy(r->fp, fp, GOBLIN__WKEY_FP_HEX);
    int32_t o = fplist_find(&n->owners, fp);
    r->owner = o >= 0 ? n->owners.owner[o] : -1;
    r->serial = ++n->next_ident_serial;
    r->quarantined = fplist_find(&n->qlist, fp) >= 0;
    n->live_idents++;
    n->st.identities_tracked = n->live_idents;
    return i;
}

/* ---- the proof at HELLO --------------------------------------------------------- */

void goblin__node_identity_challenge(goblin_node *n, int32_t pi, const uint8_t *hello, size_t len) {
    peer *p = &n->peers[pi];
    goblin__wkey_hash(hello, len, p->hello_hash);
    for (int i = 0; i < GOBLIN__WKEY_NONCE_BYTES; i += 8) {
        uint64_t r = goblin__secret_u64();
        memcpy(p->nonce + i, &r, 8);
    }
    p->challenged = true;
    goblin__wire_msg m;
    goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_CHALLENGE);
    m.request_id = p->hello_rid;
    memcpy(m.body.challenge.nonce, p->nonce, GOBLIN__WKEY_NONCE_BYTES);
    goblin__node_send_wire(n, p->pipe, &m);
}

goblin_err goblin__node_identity_admit(goblin_node *n, int32_t pi, const goblin__wire_proof *pf, char *why,
                                       size_t cap) {
    peer *p = &n->peers[pi];
    char detail[256] = "";
    if (pf->key_len != GOBLIN__WKEY_PUBLIC_BYTES)
        return goblin__errf(why, cap, GOBLIN_EAUTH, "identity proof failed: a public key of %u bytes is not a P-256 "
                            "key", (unsigned)pf->key_len);
    uint8_t digest[32];
    goblin_err e = goblin__wkey_proof_digest(p->nonce, p->hello_hash, pf->key, digest);
    if (!e) e = goblin__wkey_verify(pf->key, pf->key_len, digest, pf->sig, pf->sig_len, detail, sizeof detail);
    char fp[GOBLIN__WKEY_FP_HEX] = "";
    goblin__wkey_fingerprint_of(pf->key, pf->key_len, fp);
    memset(p->nonce, 0, sizeof p->nonce); /* one proof per nonce */
    if (e) return goblin__errf(why, cap, GOBLIN_EAUTH, "identity proof failed for %.16s: %s", fp, detail);
    if (n->p.allow_identities_file && fplist_find(&n->allow, fp) < 0)
        return goblin__errf(why, cap, GOBLIN_EAUTH, "identity %s is not on the allow list", fp);
    if (fplist_find(&n->qlist, fp) >= 0)
        return goblin__errf(why, cap, GOBLIN_EAUTH, "identity %s is quarantined", fp);
    int32_t i = ident_record(n, fp, why, cap);
    if (i < 0) return GOBLIN_EAUTH;
    ident *r = &n->idents[i];
    if (r->quarantined) return goblin__errf(why, cap, GOBLIN_EAUTH, "identity %s is quarantined", fp);
    p->ident = i;
    r->connected++;
    r->last_seen_ms = goblin__now_ms();
    return GOBLIN_OK;
}

/* ---- owners the hub names -------------------------------------------------------- */

#define HUB_OWNERS_MAX 65536 /* identities whose owner the hub named, at most */

goblin_err goblin__node_identity_owner_from_hub(goblin_node *n, const char *fp, int64_t account) {
    if (account <= 0) return GOBLIN_EINVAL;
    if (fplist_find(&n->owners, fp) >= 0) return GOBLIN_OK; /* known (the owners file wins) */
    if (n->owners.n >= HUB_OWNERS_MAX) return GOBLIN_ELIMIT;
    char name[OWNER_MAX + 1];
    snprintf(name, sizeof name, "hub account %lld", (long long)account);
    int32_t o = owner_intern(n, name);
    if (o < 0) return GOBLIN_ENOMEM;
    goblin_err e = fplist_add(&n->owners, fp, o);
    if (e) return e;
    /* A record of the identity (connected now, most likely) takes it at once. */
    int32_t i = goblin__node_index_get(&n->ident_ix, fp_key(fp));
    if (i >= 0 && n->idents[i].used && strcmp(n->idents[i].fp, fp) == 0 && n->idents[i].owner < 0)
        n->idents[i].owner = o;
    return GOBLIN_OK;
}

/* ---- quarantine ----------------------------------------------------------------- */

void goblin__node_identity_quarantine(goblin_node *n, int32_t id) {
    if (id < 0 || id >= n->n_idents || !n->idents[id].used) return;
    ident *r = &n->idents[id];
    bool added = fplist_find(&n->qlist, r->fp) < 0;
    r->quarantined = true;
    if (fplist_add(&n->qlist, r->fp, -1) != GOBLIN_OK) /* the record stays quarantined meanwhile */
        goblin__node_log(n, GOBLIN_LOG_ERROR, "out of memory recording the quarantine of %s", r->fp);
    if (r->owner >= 0) {
        /* The owner is caught: all of its identities go, known and connected or not. */
        for (int32_t k = 0; k < n->owners.n; k++)
            if (n->owners.owner[k] == r->owner && fplist_find(&n->qlist, n->owners.fp[k]) < 0) {
                added = true;
                fplist_add(&n->qlist, n->owners.fp[k], -1);
            }
        for (int32_t k = 0; k < n->n_idents; k++)
            if (n->idents[k].used && n->idents[k].owner == r->owner) n->idents[k].quarantined = true;
    }
    goblin__node_log(n, GOBLIN_LOG_WARN, "identity %s%s%s quarantined", r->fp, r->owner >= 0 ? " of owner " : "",
                     r->owner >= 0 ? n->owner_names[r->owner] : "");
    if (added) save_quarantine(n);
}
