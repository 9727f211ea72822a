/* examples/list_ops.c - print the operator catalogue through the public API.
 *
 *   list_ops              one block of text per op
 *   list_ops --markdown   docs/ops.md (regenerate it with this after changing an op)
 *
 * Everything printed comes from goblin_op_next / goblin_op_get_info /
 * goblin_op_contract, so the document can never drift from the library. */
#include <goblin/goblin.h>
#include <stdio.h>
#include <string.h>

/* Reduction lengths at which the contract tables are evaluated: reducing ops'
 * tolerances grow with k, elementwise ones do not. */
static const int64_t contract_ks[] = {1, 1024, 1048576};
#define N_KS ((int)(sizeof contract_ks / sizeof contract_ks[0]))

static const char *attr_kind_name(goblin_attr_kind k) {
    switch (k) {
    case GOBLIN_ATTR_KIND_INT: return "int";
    case GOBLIN_ATTR_KIND_FLOAT: return "float";
    case GOBLIN_ATTR_KIND_INTS: return "ints";
    default: return "?";
    }
}

/* "f32 f64 ..." for a dtype mask, or "-" when empty. */
static void dtype_list(uint32_t mask, char *buf, size_t cap) {
    size_t len = 0;
    buf[0] = '\0';
    for (int d = 0; d < GOBLIN_DTYPE_COUNT; d++) {
        if (!(mask & GOBLIN_DTMASK(d))) continue;
        int n = snprintf(buf + len, cap - len, "%s%s", len ? " " : "", goblin_dtype_name((goblin_dtype)d));
        if (n < 0 || (size_t)n >= cap - len) break;
        len += (size_t)n;
    }
    if (len == 0) snprintf(buf, cap, "-");
}

static void arity(const goblin_op_info *in, char *buf, size_t cap) {
    if (in->max_inputs < 0)
        snprintf(buf, cap, "%d or more", in->min_inputs);
    else if (in->min_inputs == in->max_inputs)
        snprintf(buf, cap, "%d", in->min_inputs);
    else
        snprintf(buf, cap, "%d to %d", in->min_inputs, in->max_inputs);
}

static void attr_list(const goblin_op_info *in, char *buf, size_t cap, bool md) {
    size_t len = 0;
    buf[0] = '\0';
    for (uint32_t i = 0; i < in->n_attrs && i < 16; i++) {
        const char *name = goblin_attr_name(in->attrs[i]);
        int n = snprintf(buf + len, cap - len, md ? "%s`%s` (%s)" : "%s%s:%s", len ? ", " : "",
                         name ? name : "?", attr_kind_name(goblin_attr_key_kind(in->attrs[i])));
        if (n < 0 || (size_t)n >= cap - len) break;
        len += (size_t)n;
    }
    if (len == 0) snprintf(buf, cap, "-");
}

/* One line of Markdown: a newline in the text would end the list item. */
static void md_line(FILE *f, const char *s) {
    for (; s && *s; s++) fputc(*s == '\n' ? ' ' : *s, f);
}

/* The float dtypes whose contract is non-trivial for this op, as a table. */
static void contract_table(FILE *f, const goblin_op_info *in) {
    bool any = false;
    for (int d = 0; d < GOBLIN_DTYPE_COUNT && !any; d++) {
        if (!(in->dtypes & GOBLIN_DTMASK(d))) continue;
        for (int k = 0; k < N_KS; k++) {
            double rel = 0, abs_tol = 0;
            if (goblin_op_contract(in->op, (goblin_dtype)d, contract_ks[k], &rel, &abs_tol) == GOBLIN_OK &&
                (rel != 0 || abs_tol != 0))
                any = true;
        }
    }
    if (!any) {
        fprintf(f, "- Tolerance: exact (0, 0) for every dtype it takes.\n");
        return;
    }
    fprintf(f, "\n| dtype |");
    for (int k = 0; k < N_KS; k++) fprintf(f, " rel, abs at k=%lld |", (long long)contract_ks[k]);
    fprintf(f, "\n|---|");
    for (int k = 0; k < N_KS; k++) fprintf(f, "---|");
    fprintf(f, "\n");
    for (int d = 0; d < GOBLIN_DTYPE_COUNT; d++) {
        if (!(in->dtypes & GOBLIN_DTMASK(d))) continue;
        fprintf(f, "| %s |", goblin_dtype_name((goblin_dtype)d));
        for (int k = 0; k < N_KS; k++) {
            double rel = 0, abs_tol = 0;
            if (goblin_op_contract(in->op, (goblin_dtype)d, contract_ks[k], &rel, &abs_tol) != GOBLIN_OK)
                fprintf(f, " - |");
            else if (rel == 0 && abs_tol == 0)
                fprintf(f, " exact |");
            else
                fprintf(f, " %.3g, %.3g |", rel, abs_tol);
        }
        fprintf(f, "\n");
    }
}

static int print_text(FILE *f) {
    int n_ops = 0, n_missing = 0;
    for (int op = goblin_op_next(-1); op >= 0; op = goblin_op_next(op)) {
        goblin_op_info in;
        goblin_err e = goblin_op_get_info((goblin_op)op, &in);
        if (e == GOBLIN_ENOTSUP) {
            fprintf(f, "%3d %-28s (not implemented in this build)\n\n", op, in.name);
            n_missing++;
            continue;
        }
        if (e != GOBLIN_OK) {
            fprintf(stderr, "list_ops: op %d: %s\n", op, goblin_strerror(e));
            return 1;
        }
        char dts[128], ar[32], attrs[512];
        dtype_list(in.dtypes, dts, sizeof dts);
        arity(&in, ar, sizeof ar);
        attr_list(&in, attrs, sizeof attrs, false);
        fprintf(f, "%3d %-28s [%s] %s\n", op, in.name, in.group, in.summary);
        fprintf(f, "    inputs: %s   dtypes: %s\n", ar, dts);
        fprintf(f, "    attributes: %s\n", attrs);
        if (in.semantics[0]) fprintf(f, "    semantics: %s\n", in.semantics);
        fprintf(f, "    contract: %s\n\n", in.contract);
        n_ops++;
    }
    fprintf(f, "%d ops implemented, %d not implemented; catalogue version %u, libgoblin %s\n", n_ops,
            n_missing, goblin_catalog_version(), GOBLIN_VERSION_STRING);
    return 0;
}

static int print_markdown(FILE *f) {
    /* Two passes: the summary table, then one section per op. */
    int n_ops = 0, n_missing = 0;
    for (int op = goblin_op_next(-1); op >= 0; op = goblin_op_next(op)) {
        goblin_op_info in;
        if (goblin_op_get_info((goblin_op)op, &in) == GOBLIN_OK) n_ops++;
        else n_missing++;
    }
    fprintf(f, "# Operator catalogue\n\n");
    fprintf(f, "<!-- Generated by `build/examples/list_ops --markdown > docs/ops.md`; do not edit by hand. -->\n\n");
    fprintf(f, "libgoblin %s, catalogue version %u: %d ops implemented", GOBLIN_VERSION_STRING,
            goblin_catalog_version(), n_ops);
    if (n_missing) fprintf(f, ", %d listed in `ops.h` but not implemented yet", n_missing);
    fprintf(f, ".\n\n");
    fprintf(f,
            "The op values are part of the wire format (append-only). Binary elementwise ops broadcast "
            "NumPy-style and require both inputs to have the same dtype (insert a `cast`).\n\n"
            "**Numeric contract.** A result is accepted when `|result - exact| <= abs + rel * scale`, "
            "where `scale` is `|exact|` for elementwise ops and the sum of the magnitudes of the terms "
            "(`sum |a_i b_i|` for dot products, `sum |x_i|` for sums) for reducing ops; `k` is the "
            "reduction length, `u` the unit roundoff of the dtype (2^-24 f32, 2^-53 f64, 2^-11 f16, "
            "2^-8 bf16) and `gamma_k = k u / (1 - k u)`. The tables below are computed by "
            "`goblin_op_contract()` in this build.\n\n");

    fprintf(f, "## Summary\n\n| value | op | group | inputs | dtypes | attributes |\n|---:|---|---|---|---|---|\n");
    for (int op = goblin_op_next(-1); op >= 0; op = goblin_op_next(op)) {
        goblin_op_info in;
        if (goblin_op_get_info((goblin_op)op, &in) != GOBLIN_OK) continue;
        char dts[128], ar[32], attrs[512];
        dtype_list(in.dtypes, dts, sizeof dts);
        arity(&in, ar, sizeof ar);
        attr_list(&in, attrs, sizeof attrs, true);
        fprintf(f, "| %d | [`%s`](#%s) | %s | %s | %s | %s |\n", op, in.name, in.name, in.group, ar,
                dts, attrs);
    }

    const char *group = NULL;
    for (int op = goblin_op_next(-1); op >= 0; op = goblin_op_next(op)) {
        goblin_op_info in;
        if (goblin_op_get_info((goblin_op)op, &in) != GOBLIN_OK) continue;
        if (!group || strcmp(group, in.group) != 0) {
            group = in.group;
            fprintf(f, "\n## Group: %s\n", group);
        }
        char dts[128], ar[32], attrs[512];
        dtype_list(in.dtypes, dts, sizeof dts);
        arity(&in, ar, sizeof ar);
        attr_list(&in, attrs, sizeof attrs, true);
        fprintf(f, "\n### %s\n\n", in.name);
        fprintf(f, "%s\n\n", in.summary[0] ? in.summary : "(no summary)");
        fprintf(f, "- Value: %d (`GOBLIN_OP_", op);
        for (const char *p = in.name; *p; p++)
            fputc((*p >= 'a' && *p <= 'z') ? *p - 'a' + 'A' : *p, f);
        fprintf(f, "`)\n- Inputs: %s\n- Dtypes (first input): %s\n- Attributes: %s\n", ar, dts, attrs);
        if (in.semantics[0]) {
            fprintf(f, "- Semantics: ");
            md_line(f, in.semantics);
            fprintf(f, "\n");
        }
        fprintf(f, "- Contract: ");
        md_line(f, in.contract);
        fprintf(f, "\n");
        contract_table(f, &in);
    }

    if (n_missing) {
        fprintf(f, "\n## Not implemented yet\n\nThese values are reserved in `include/goblin/ops.h`; building a "
                   "graph with them fails with `GOBLIN_EINVAL`.\n\n");
        for (int op = goblin_op_next(-1); op >= 0; op = goblin_op_next(op)) {
            goblin_op_info in;
            if (goblin_op_get_info((goblin_op)op, &in) == GOBLIN_ENOTSUP)
                fprintf(f, "- %d `%s`\n", op, in.name);
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    bool md = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--markdown") == 0) {
            md = true;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("usage: %s [--markdown]\nPrint every op of the catalogue: group, arity, dtypes, "
                   "attributes, semantics and numeric contract.\n", argv[0]);
            return 0;
        } else {
            fprintf(stderr, "%s: unknown argument '%s' (try --help)\n", argv[0], argv[i]);
            return 2;
        }
    }
    int rc = md ? print_markdown(stdout) : print_text(stdout);
    if (fflush(stdout) != 0) return 1;
    return rc;
}
