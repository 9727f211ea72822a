/* libgoblin/node/status_page.c - what the node's status page shows: one snapshot of the
 * node's counters, its connected workers and its jobs, taken under node->mu (job->mu
 * inside it for a job's status, the lock order of node_impl.h), then written out as HTML,
 * JSON or Prometheus text with the lock released.
 *
 * Nothing of the research is shown: no file names, operands, results, principals,
 * owners, network origins, tokens or job error texts. A worker appears by the first 16
 * hex digits of its identity's fingerprint, a job by its number. */
#include "node_impl.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/page.h"

/* Rows listed at most (all are counted): a page stays well under GOBLIN__PAGE_MAX. */
#define STATUS_WORKERS_MAX 4096
#define STATUS_JOBS_MAX 1024
/* The tasks-per-second window: the figure covers the time since the last request at
 * least this long ago (before the first such window: since the node started). */
#define RATE_WINDOW_MS 5000

typedef struct st_worker {
    uint64_t session;
    char fp[17];
    int32_t threads;
    uint64_t memory;
    int64_t issued, accepted, rejected, failed;
    bool quarantined, probation;
} st_worker;

typedef struct st_job {
    uint64_t id;
    int kind;
    goblin_verify verify;
    goblin_job_status status;
    int64_t done, total, by_node, checked, failed_attempts;
} st_job;

typedef struct snap {
    goblin_node_stats st;
    int64_t uptime_ms;
    double rate;
    int32_t n_workers, n_jobs, n_probation; /* all of them */
    int32_t n_quarantined_connected;
    st_worker *w;                           /* the first STATUS_WORKERS_MAX, by session */
    int32_t w_listed;
    st_job *j;                              /* the first STATUS_JOBS_MAX, by id */
    int32_t j_listed, jobs_running;
    bool oom;
} snap;

static void job_row(goblin_node *n, goblin_job *j, st_job *o) {
    *o = (st_job){.id = j->id, .kind = j->kind, .total = j->ntasks};
    o->verify = j->kind == JOB_GRAPH && j->g ? j->g->verify : n->p.verify;
    for (int64_t i = 0; j->tasks && i < j->ntasks; i++) {
        const task *t = &j->tasks[i];
        o->failed_attempts += t->attempts;
        if (t->state != T_DONE) continue;
        o->by_node += t->by_session == 0;
        /* Matmul: every accepted tile passed Freivalds' check; graph jobs: checked by a
         * replica, the node, a spot check or the products' check (t->replicated). */
        o->checked += j->kind == JOB_MATMUL || t->replicated;
    }
    pthread_mutex_lock(&j->mu);
    o->status = j->status;
    o->done = j->done;
    pthread_mutex_unlock(&j->mu);
}

static int cmp_worker(const void *a, const void *b) {
    uint64_t x = ((const st_worker *)a)->session, y = ((const st_worker *)b)->session;
    return x < y ? -1 : x > y;
}

static int cmp_job(const void *a, const void *b) {
    uint64_t x = ((const st_job *)a)->id, y = ((const st_job *)b)->id;
    return x < y ? -1 : x > y;
}

static void take(goblin_node *n, snap *s, goblin__node_rate *rate) {
    memset(s, 0, sizeof *s);
    pthread_mutex_lock(&n->mu);
    int32_t cw = n->st.workers_connected > 0 ? (int32_t)n->st.workers_connected : 0;
    if (cw > STATUS_WORKERS_MAX) cw = STATUS_WORKERS_MAX;
    int32_t cj = n->n_jobs < STATUS_JOBS_MAX ? n->n_jobs : STATUS_JOBS_MAX;
    s->w = cw ? goblin__calloc((size_t)cw, sizeof *s->w) : NULL;
    s->j = cj ? goblin__calloc((size_t)cj, sizeof *s->j) : NULL;
    s->oom = (cw && !s->w) || (cj && !s->j);
    s->st = n->st;
    s->st.workers_asking = goblin__node_capacity_now(n).workers;
    int64_t now = goblin__now_ms();
    s->uptime_ms = n->started ? now - n->started_ms : 0;
    /* The peers that goblin_node_stats.workers_connected counts: admitted, connected. */
    for (int32_t k = 0; k < n->n_peers; k++) {
        const peer *p = &n->peers[k];
        if (!p->used || !p->hello || !p->counted) continue;
        bool probation = goblin__node_on_probation(n, k);
        s->n_workers++;
        s->n_probation += probation;
        s->n_quarantined_connected += p->quarantined;
        if (!s->w || s->w_listed >= cw) continue;
        st_worker *o = &s->w[s->w_listed++];
        *o = (st_worker){.session = p->session_id, .threads = p->threads, .memory = p->memory,
                         .issued = p->issued, .accepted = p->accepted, .rejected = p->rejected,
                         .failed = p->failed, .quarantined = p->quarantined, .probation = probation};
        const ident *id = goblin__node_peer_ident(n, k);
        snprintf(o->fp, sizeof o->fp, "%.16s", id ? id->fp : "");
    }
    for (int32_t k = 0; k < n->n_jobs; k++) {
        s->n_jobs++;
        s->jobs_running += n->jobs[k]->running;
        if (s->j && s->j_listed < cj) job_row(n, n->jobs[k], &s->j[s->j_listed++]);
    }
    pthread_mutex_unlock(&n->mu);
    if (s->w) qsort(s->w, (size_t)s->w_listed, sizeof *s->w, cmp_worker);
    if (s->j) qsort(s->j, (size_t)s->j_listed, sizeof *s->j, cmp_job);
    /* Tasks per second over the window (the caller serializes renders). */
    if (rate->t_ms == 0) *rate = (goblin__node_rate){.t_ms = now - s->uptime_ms, .done = 0, .per_s = -1.0};
    int64_t dt = now - rate->t_ms;
    if (dt >= RATE_WINDOW_MS) {
        rate->per_s = (double)(s->st.tasks_completed - rate->done) * 1000.0 / (double)dt;
        rate->t_ms = now;
        rate->done = s->st.tasks_completed;
    }
    /* Before the first whole window: the average since the node started. */
    s->rate = rate->per_s >= 0 ? rate->per_s
            : dt > 0         ? (double)(s->st.tasks_completed - rate->done) * 1000.0 / (double)dt
                             : 0.0;
}

static void snap_free(snap *s) {
    goblin__free(s->w);
    goblin__free(s->j);
}

static const char *status_name(goblin_job_status st) {
    static const char *const names[GOBLIN_JOB_STATUS_COUNT] = {"running", "done", "failed", "canceled"};
    return st >= 0 && st < GOBLIN_JOB_STATUS_COUNT ? names[st] : "unknown";
}

static const char *verify_name(goblin_verify v) {
    const char *s = goblin_verify_name(v);
    return s ? s : "unknown";
}

/* The node-wide verification counters, in the order the page lists them. */
typedef struct counter {
    const char *name; /* Prometheus: goblin_node_<name>_total */
    const char *label; /* the HTML table's */
    size_t off;
} counter;

#define C(f, label) {#f, label, offsetof(goblin_node_stats, f)}
static const counter counters[] = {
    C(tasks_issued, "Leases handed out"),
    C(tasks_completed, "Tasks completed"),
    C(results_accepted, "Results accepted"),
    C(results_rejected, "Results rejected"),
    C(results_escalated, "Inconclusive checks decided on the node"),
    C(results_duplicate, "Duplicate results discarded"),
    C(results_late, "Late results discarded"),
    C(tasks_reissued, "Leases that failed"),
    C(tasks_speculative, "Straggler duplicates"),
    C(replicas_issued, "Replica leases"),
    C(replicas_agreed, "Replica pairs that agreed"),
    C(replicas_correlated, "Checked on the node: no independent replica"),
    C(node_recomputed, "Graph tasks computed on the node"),
    C(tasks_checked, "Graph tasks checked (products and the rest)"),
    C(products_checked, "Products checked by Freivalds' algorithm"),
    C(spot_checks, "Spot checks"),
    C(spot_rows_checked, "Rows recomputed by spot checks"),
    C(freivalds_row_panels, "Matmul row panels checked at once"),
    C(freivalds_row_fallbacks, "Row panels judged again tile by tile"),
    C(probation_checks, "Results on probation checked"),
    C(audits, "Secret audits"),
    C(audits_failed, "Secret audits that failed"),
    C(rechecked, "Results rechecked after a quarantine"),
    C(recheck_failed, "Rechecks that failed"),
    C(workers_quarantined, "Quarantines"),
    C(workers_refused, "Workers refused at HELLO"),
    C(workers_seen, "Workers that joined"),
    C(peers_dropped, "Connections dropped"),
};
#undef C

static int64_t field(const goblin_node_stats *st, const counter *c) {
    int64_t v;
    memcpy(&v, (const char *)st + c->off, sizeof v);
    return v;
}

/* ---- HTML ---- */

static const char css[] =
    "body{font:15px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}h1{font-size:1.4em}h2{font-size:1.15em}"
    "table{border-collapse:collapse;margin-bottom:1em}td,th{border-bottom:1px solid #ccc;padding:.2em .6em;"
    "text-align:right}th:first-child,td:first-child{text-align:left}code{font-size:.95em}.bad{color:#a00}";

static void row(goblin__page *b, const char *label, int64_t v) {
    goblin__page_raw(b, "<tr><th>");
    goblin__page_html(b, label);
    goblin__page_rawf(b, "</th><td>%" PRId64 "</td></tr>", v);
}

static void html(goblin__page *b, const snap *s) {
    goblin__page_raw(b, "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                        "<meta http-equiv=\"refresh\" content=\"10\">"
                        "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
                        "<title>GPU Goblin node</title><style>");
    goblin__page_raw(b, css);
    goblin__page_raw(b, "</style></head><body><h1>GPU Goblin node</h1>"
                        "<p><a href=\"/status.json\">JSON</a> &middot; <a href=\"/metrics\">metrics</a></p><table>");
    goblin__page_rawf(b, "<tr><th>Up for</th><td>%" PRId64 " s</td></tr>", s->uptime_ms / 1000);
    goblin__page_rawf(b, "<tr><th>Tasks per second</th><td>%.2f</td></tr>", s->rate);
    row(b, "Workers connected", s->n_workers);
    row(b, "Workers asking for work", s->st.workers_asking);
    row(b, "Workers on probation", s->n_probation);
    row(b, "Jobs (running)", s->jobs_running);
    row(b, "Jobs held", s->n_jobs);
    goblin__page_raw(b, "</table><h2>Verification</h2><table>");
    for (size_t i = 0; i < sizeof counters / sizeof counters[0]; i++)
        row(b, counters[i].label, field(&s->st, &counters[i]));
    goblin__page_rawf(b, "<tr><th>Time spent verifying</th><td>%.3f s</td></tr></table>", (double)s->st.verify_ns / 1e9);

    goblin__page_rawf(b, "<h2>Workers (%" PRId32 ")</h2>", s->n_workers);
    if (s->w_listed) {
        goblin__page_raw(b, "<table><tr><th>Identity</th><th>Threads</th><th>Memory (MiB)</th><th>Leases</th>"
                            "<th>Tasks done</th><th>Rejected</th><th>Failed leases</th><th>Quarantined</th>"
                            "<th>Probation</th></tr>");
        for (int32_t i = 0; i < s->w_listed; i++) {
            const st_worker *w = &s->w[i];
            goblin__page_raw(b, "<tr><td><code>");
            goblin__page_html(b, w->fp);
            goblin__page_rawf(b, "</code></td><td>%" PRId32 "</td><td>%" PRIu64 "</td><td>%" PRId64 "</td><td>%" PRId64
                                 "</td><td>%" PRId64 "</td><td>%" PRId64 "</td><td%s>%s</td><td>%s</td></tr>",
                              w->threads, w->memory >> 20, w->issued, w->accepted, w->rejected, w->failed,
                              w->quarantined ? " class=\"bad\"" : "", w->quarantined ? "yes" : "no",
                              w->probation ? "yes" : "no");
        }
        goblin__page_raw(b, "</table>");
    }
    if (s->w_listed < s->n_workers)
        goblin__page_rawf(b, "<p>%" PRId32 " more not listed.</p>", s->n_workers - s->w_listed);

    goblin__page_rawf(b, "<h2>Jobs (%" PRId32 ")</h2>", s->n_jobs);
    if (s->j_listed) {
        goblin__page_raw(b, "<table><tr><th>Job</th><th>Kind</th><th>Verification</th><th>State</th><th>Tasks done</th>"
                            "<th>Tasks</th><th>Checked</th><th>Computed on the node</th><th>Failed attempts</th></tr>");
        for (int32_t i = 0; i < s->j_listed; i++) {
            const st_job *j = &s->j[i];
            goblin__page_rawf(b, "<tr><td>%" PRIu64 "</td><td>%s</td><td>%s</td><td>%s</td><td>%" PRId64 "</td><td>%" PRId64
                                 "</td><td>%" PRId64 "</td><td>%" PRId64 "</td><td>%" PRId64 "</td></tr>",
                              j->id, j->kind == JOB_GRAPH ? "graph" : "matmul", verify_name(j->verify),
                              status_name(j->status), j->done, j->total, j->checked, j->by_node, j->failed_attempts);
        }
        goblin__page_raw(b, "</table>");
    }
    if (s->j_listed < s->n_jobs) goblin__page_rawf(b, "<p>%" PRId32 " more not listed.</p>", s->n_jobs - s->j_listed);
    goblin__page_raw(b, "</body></html>\n");
}

/* ---- JSON ---- */

static void json(goblin__page *b, const snap *s) {
    goblin__page_rawf(b, "{\"uptime_s\":%.3f,\"tasks_per_second\":%.4f,\"workers_connected\":%" PRId32
                         ",\"workers_asking\":%" PRId64 ",\"workers_on_probation\":%" PRId32 ",\"jobs_running\":%" PRId32
                         ",\"jobs_held\":%" PRId32 ",\"verify_seconds\":%.6f,\"counters\":{",
                      (double)s->uptime_ms / 1000.0, s->rate, s->n_workers, s->st.workers_asking, s->n_probation,
                      s->jobs_running, s->n_jobs, (double)s->st.verify_ns / 1e9);
    for (size_t i = 0; i < sizeof counters / sizeof counters[0]; i++)
        goblin__page_rawf(b, "%s\"%s\":%" PRId64, i ? "," : "", counters[i].name, field(&s->st, &counters[i]));
    goblin__page_raw(b, "},\"rejected_by_reason\":{");
    for (int r = 0; r < GOBLIN_VERIFY_REASON_COUNT; r++) {
        const char *name = goblin_verify_reason_name((goblin_verify_reason)r);
        goblin__page_raw(b, r ? "," : "");
        goblin__page_json(b, name ? name : "unknown");
        goblin__page_rawf(b, ":%" PRId64, s->st.rejected_by_reason[r]);
    }
    goblin__page_raw(b, "},\"workers\":[");
    for (int32_t i = 0; i < s->w_listed; i++) {
        const st_worker *w = &s->w[i];
        goblin__page_raw(b, i ? ",{\"identity\":" : "{\"identity\":");
        goblin__page_json(b, w->fp);
        goblin__page_rawf(b, ",\"threads\":%" PRId32 ",\"memory_bytes\":%" PRIu64 ",\"leases\":%" PRId64
                             ",\"tasks_done\":%" PRId64 ",\"rejected\":%" PRId64 ",\"failed_leases\":%" PRId64
                             ",\"quarantined\":%s,\"probation\":%s}",
                          w->threads, w->memory, w->issued, w->accepted, w->rejected, w->failed,
                          w->quarantined ? "true" : "false", w->probation ? "true" : "false");
    }
    goblin__page_rawf(b, "],\"workers_not_listed\":%" PRId32 ",\"jobs\":[", s->n_workers - s->w_listed);
    for (int32_t i = 0; i < s->j_listed; i++) {
        const st_job *j = &s->j[i];
        goblin__page_rawf(b, "%s{\"id\":%" PRIu64 ",\"kind\":\"%s\",\"verify\":\"%s\",\"state\":\"%s\",\"tasks_done\":%" PRId64
                             ",\"tasks_total\":%" PRId64 ",\"checked\":%" PRId64 ",\"computed_on_node\":%" PRId64
                             ",\"failed_attempts\":%" PRId64 "}",
                          i ? "," : "", j->id, j->kind == JOB_GRAPH ? "graph" : "matmul", verify_name(j->verify),
                          status_name(j->status), j->done, j->total, j->checked, j->by_node, j->failed_attempts);
    }
    goblin__page_rawf(b, "],\"jobs_not_listed\":%" PRId32 "}\n", s->n_jobs - s->j_listed);
}

/* ---- Prometheus text (exposition format 0.0.4) ---- */

static void gauge(goblin__page *b, const char *name, const char *help, double v) {
    goblin__page_rawf(b, "# HELP goblin_node_%s %s\n# TYPE goblin_node_%s gauge\ngoblin_node_%s %.17g\n", name, help,
                      name, name, v);
}

static void metrics(goblin__page *b, const snap *s) {
    gauge(b, "uptime_seconds", "Seconds since the node started.", (double)s->uptime_ms / 1000.0);
    gauge(b, "tasks_per_second", "Tasks completed per second over the last window (5 s or more).", s->rate);
    gauge(b, "workers_connected", "Workers connected and admitted.", (double)s->n_workers);
    gauge(b, "workers_asking", "Connected workers asking for work.", (double)s->st.workers_asking);
    gauge(b, "workers_on_probation", "Connected workers whose identity is on probation.", (double)s->n_probation);
    gauge(b, "workers_quarantined_connected", "Connected workers whose identity is quarantined.",
          (double)s->n_quarantined_connected);
    gauge(b, "jobs_running", "Jobs running.", (double)s->jobs_running);
    gauge(b, "jobs_held", "Jobs the node holds (running or ended, not yet freed).", (double)s->n_jobs);
    gauge(b, "peers_tracked", "Entries of the peer table.", (double)s->st.peers_tracked);
    gauge(b, "identities_tracked", "Worker identity records.", (double)s->st.identities_tracked);
    for (size_t i = 0; i < sizeof counters / sizeof counters[0]; i++) {
        const char *nm = counters[i].name;
        goblin__page_rawf(b, "# HELP goblin_node_%s_total %s.\n# TYPE goblin_node_%s_total counter\n", nm,
                          counters[i].label, nm);
        goblin__page_rawf(b, "goblin_node_%s_total %" PRId64 "\n", nm, field(&s->st, &counters[i]));
    }
    goblin__page_rawf(b, "# HELP goblin_node_verify_seconds_total Time the node spent verifying.\n"
                         "# TYPE goblin_node_verify_seconds_total counter\ngoblin_node_verify_seconds_total %.9f\n",
                      (double)s->st.verify_ns / 1e9);
    goblin__page_raw(b, "# HELP goblin_node_rejected_by_reason_total Results rejected, by reason.\n"
                        "# TYPE goblin_node_rejected_by_reason_total counter\n");
    for (int r = 0; r < GOBLIN_VERIFY_REASON_COUNT; r++) {
        const char *name = goblin_verify_reason_name((goblin_verify_reason)r);
        goblin__page_rawf(b, "goblin_node_rejected_by_reason_total{reason=\"%s\"} %" PRId64 "\n", name ? name : "unknown",
                          s->st.rejected_by_reason[r]);
    }
    goblin__page_raw(b, "# HELP goblin_node_job_tasks Tasks of each job the node holds, by state.\n"
                        "# TYPE goblin_node_job_tasks gauge\n");
    for (int32_t i = 0; i < s->j_listed; i++) {
        const st_job *j = &s->j[i];
        goblin__page_rawf(b, "goblin_node_job_tasks{job=\"%" PRIu64 "\",kind=\"%s\",state=\"done\"} %" PRId64 "\n"
                             "goblin_node_job_tasks{job=\"%" PRIu64 "\",kind=\"%s\",state=\"total\"} %" PRId64 "\n",
                          j->id, j->kind == JOB_GRAPH ? "graph" : "matmul", j->done, j->id,
                          j->kind == JOB_GRAPH ? "graph" : "matmul", j->total);
    }
}

void goblin__node_status_render(goblin_node *n, int which, goblin__page *b, goblin__node_rate *rate) {
    snap s;
    take(n, &s, rate);
    if (s.oom) b->failed = true;
    else if (which == GOBLIN__STATUS_HTML) html(b, &s);
    else if (which == GOBLIN__STATUS_JSON) json(b, &s);
    else metrics(b, &s);
    snap_free(&s);
}
