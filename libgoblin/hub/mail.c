/* libgoblin/hub/mail.c - mail to people through libcurl's SMTP client (no SMTP of
 * our own). The message is built here from checked parts only: the recipient passed
 * goblin__hub_email_ok, the subject and body are the hub's own text (with at most an
 * address, a code, a link or an id in them), so no header can be injected. */
#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/errf.h"
#include "hub_impl.h"

typedef struct reader {
    const char *p;
    size_t left;
} reader;

static size_t read_cb(char *buf, size_t size, size_t n, void *ud) {
    reader *r = ud;
    size_t k = size * n < r->left ? size * n : r->left;
    memcpy(buf, r->p, k);
    r->p += k;
    r->left -= k;
    return k;
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc = CURLE_FAILED_INIT;
static void curl_init(void) { curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

/* The body with every "\n" as "\r\n" and a leading '.' doubled is libcurl's business
 * (it dot-stuffs); line ends are ours. */
static char *build(const goblin_hub_config *cfg, const char *to, const char *subject, const char *body) {
    char date[64];
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S +0000", &tm);
    char mid[40];
    if (goblin__hub_random_hex(mid, 16, NULL, 0)) snprintf(mid, sizeof mid, "%lld", (long long)t);
    size_t n = strlen(body), cap = 1024 + strlen(subject) + 2 * n;
    char *m = goblin__alloc(cap);
    if (!m) return NULL;
    int k = snprintf(m, cap,
                     "Date: %s\r\nFrom: GPU Goblin <%s>\r\nTo: <%s>\r\nSubject: %s\r\n"
                     "Message-ID: <%s@goblin-hub>\r\nMIME-Version: 1.0\r\n"
                     "Content-Type: text/plain; charset=utf-8\r\n\r\n",
                     date, cfg->mail_from, to, subject, mid);
    size_t j = (size_t)k;
    for (size_t i = 0; i < n; i++) {
        if (body[i] == '\n' && (i == 0 || body[i - 1] != '\r')) m[j++] = '\r';
        m[j++] = body[i];
    }
    m[j] = 0;
    return m;
}

goblin_err goblin__hub_mail(const goblin_hub_config *cfg, const char *to, const char *subject,
                            const char *body, char *msg, size_t cap) {
    char rcpt[GOBLIN_HUB_EMAIL_MAX + 1];
    if (!goblin__hub_email_ok(to, rcpt)) return goblin__errf(msg, cap, GOBLIN_EINVAL, "not a mail address");
    if (strpbrk(subject, "\r\n")) return goblin__errf(msg, cap, GOBLIN_EINVAL, "a subject is one line");
    pthread_once(&curl_once, curl_init);
    if (curl_init_rc != CURLE_OK) return goblin__errf(msg, cap, GOBLIN_EIO, "libcurl did not initialise");
    char *text = build(cfg, rcpt, subject, body);
    if (!text) return goblin__errf(msg, cap, GOBLIN_ENOMEM, "out of memory");
    CURL *c = curl_easy_init();
    struct curl_slist *rcpts = NULL;
    goblin_err e = GOBLIN_OK;
    char from[GOBLIN_HUB_EMAIL_MAX + 3], rto[GOBLIN_HUB_EMAIL_MAX + 3];
    snprintf(from, sizeof from, "<%s>", cfg->mail_from);
    snprintf(rto, sizeof rto, "<%s>", rcpt);
    if (!c || !(rcpts = curl_slist_append(NULL, rto))) {
        e = goblin__errf(msg, cap, GOBLIN_ENOMEM, "out of memory (libcurl)");
        goto out;
    }
    reader r = {text, strlen(text)};
    char err[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(c, CURLOPT_URL, cfg->smtp_url);
    curl_easy_setopt(c, CURLOPT_MAIL_FROM, from);
    curl_easy_setopt(c, CURLOPT_MAIL_RCPT, rcpts);
    curl_easy_setopt(c, CURLOPT_READFUNCTION, read_cb);
    curl_easy_setopt(c, CURLOPT_READDATA, &r);
    curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, err);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 10L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "smtp,smtps");
    if (!strncmp(cfg->smtp_url, "smtp://", 7) && cfg->smtp_user[0])
        curl_easy_setopt(c, CURLOPT_USE_SSL, (long)CURLUSESSL_ALL); /* never a password in clear */
    if (cfg->smtp_user[0]) {
        curl_easy_setopt(c, CURLOPT_USERNAME, cfg->smtp_user);
        curl_easy_setopt(c, CURLOPT_PASSWORD, cfg->smtp_password);
    }
    CURLcode rc = curl_easy_perform(c);
    if (rc != CURLE_OK)
        e = goblin__errf(msg, cap, GOBLIN_EIO, "mail to %s through %s: %s", rcpt, cfg->smtp_url,
                         err[0] ? err : curl_easy_strerror(rc));
out:
    curl_slist_free_all(rcpts);
    if (c) curl_easy_cleanup(c);
    goblin__free(text);
    return e;
}
