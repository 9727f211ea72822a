/* tests/unit/test_names.c - the enums' names both ways, and sizes written as text
 * (goblin_size_parse), against values written out here by hand. */
#include <criterion/criterion.h>
#include <goblin/goblin.h>
#include <stdint.h>
#include <string.h>

/* name(v) for every value, the names given here, from_name(name(v)) == v, and
 * nothing (NULL, or what the header promises: OUT) for the value past the end, and
 * nothing for an unknown name. */
#define CHECK_ENUM(T, NAME, FROM, COUNT, OUT, ...)                                              \
    do {                                                                                         \
        static const char *const want[] = {__VA_ARGS__};                                         \
        cr_assert_eq((int)(sizeof want / sizeof *want), (int)(COUNT), #T ": count");             \
        for (int v = 0; v < (int)(COUNT); v++) {                                                 \
            const char *n = NAME((T)v);                                                          \
            cr_assert_not_null(n, #T " %d has no name", v);                                      \
            cr_assert_str_eq(n, want[v], #T " %d", v);                                           \
            T back;                                                                              \
            cr_assert_eq(FROM(n, &back), GOBLIN_OK, #T " %s", n);                                \
            cr_assert_eq((int)back, v);                                                          \
        }                                                                                        \
        const char *out_of_range[2] = {NAME((T)(COUNT)), NAME((T)-1)};                           \
        for (int k = 0; k < 2; k++) {                                                            \
            if (OUT) cr_assert_str_eq(out_of_range[k], (const char *)(OUT), #T);                \
            else cr_assert_null(out_of_range[k], #T);                                            \
        }                                                                                        \
        T x;                                                                                     \
        cr_assert_eq(FROM("no-such-name", &x), GOBLIN_EINVAL);                                   \
        cr_assert_eq(FROM("", &x), GOBLIN_EINVAL);                                               \
        cr_assert_eq(FROM(NULL, &x), GOBLIN_EINVAL);                                             \
    } while (0)

Test(names, enums_both_ways) {
    CHECK_ENUM(goblin_dtype, goblin_dtype_name, goblin_dtype_from_name, GOBLIN_DTYPE_COUNT, "invalid", "f32",
               "f64", "f16", "bf16", "i8", "i16", "i32", "i64", "u8", "bool");
    CHECK_ENUM(goblin_split, goblin_split_name, goblin_split_from_name, GOBLIN_SPLIT_COUNT, NULL,
               "broadcast", "batch");
    CHECK_ENUM(goblin_combine, goblin_combine_name, goblin_combine_from_name, GOBLIN_COMBINE_COUNT, NULL,
               "auto", "concat", "sum", "mean", "max", "min");
    CHECK_ENUM(goblin_verify, goblin_verify_name, goblin_verify_from_name, GOBLIN_VERIFY_COUNT, NULL,
               "freivalds", "recompute", "unsafe-none", "spot", "replicate", "checked");
    CHECK_ENUM(goblin_lr_kind, goblin_lr_kind_name, goblin_lr_kind_from_name, GOBLIN_LR_KIND_COUNT, NULL,
               "constant", "cosine-warmup");
    CHECK_ENUM(goblin_optimizer, goblin_optimizer_name, goblin_optimizer_from_name,
               GOBLIN_OPTIMIZER_COUNT, NULL, "sgd", "adamw");
    CHECK_ENUM(goblin_role, goblin_role_name, goblin_role_from_name, GOBLIN_ROLE_COUNT, NULL, "researcher",
               "admin");
    /* names are exact: no case folding, no blanks */
    goblin_dtype d;
    cr_assert_eq(goblin_dtype_from_name("F32", &d), GOBLIN_EINVAL);
    cr_assert_eq(goblin_dtype_from_name(" f32", &d), GOBLIN_EINVAL);
    /* error names: every code has one, distinct */
    for (int a = 0; a <= GOBLIN_EINTERNAL; a++) {
        cr_assert_not_null(goblin_err_name((goblin_err)a));
        for (int b = 0; b < a; b++)
            cr_assert_str_neq(goblin_err_name((goblin_err)a), goblin_err_name((goblin_err)b));
    }
    cr_assert_str_eq(goblin_err_name(GOBLIN_EAUTH), "GOBLIN_EAUTH");
}

Test(names, sizes_as_text) {
    static const struct {
        const char *text;
        uint64_t want;
    } ok[] = {
        {"0", 0},
        {"512", 512},
        {"512B", 512},
        {"1K", 1024},
        {"1k", 1024},
        {"1KiB", 1024},
        {"1KB", 1024},
        {"512M", (uint64_t)512 << 20},
        {" 512 M ", (uint64_t)512 << 20},
        {"1.5G", (uint64_t)3 << 29},
        {"2T", (uint64_t)2 << 40},
        {"0.5K", 512},
        {"1.0009765625K", 1025},  /* 1024 + 1 */
        {"1.001K", 1025},         /* 1025.024, rounded down */
        {"18446744073709551615", UINT64_MAX},
        {"16777215T", (uint64_t)16777215 << 40},
    };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        uint64_t got = 7;
        cr_assert_eq(goblin_size_parse(ok[i].text, &got), GOBLIN_OK, "'%s'", ok[i].text);
        cr_assert_eq(got, ok[i].want, "'%s': %llu, want %llu", ok[i].text, (unsigned long long)got,
                     (unsigned long long)ok[i].want);
    }
    static const char *const bad[] = {"", " ", "M", "-1", "1X", "1MM", "1 2", "1.2.3", "0x10",
                                      "1e3", "G1", "1MiBs", "nan"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        uint64_t got = 7;
        cr_assert_eq(goblin_size_parse(bad[i], &got), GOBLIN_EINVAL, "'%s'", bad[i]);
        cr_assert_eq(got, 7, "'%s' wrote its output", bad[i]);
    }
    uint64_t got;
    cr_assert_eq(goblin_size_parse("18446744073709551616", &got), GOBLIN_ERANGE);
    cr_assert_eq(goblin_size_parse("16777216T", &got), GOBLIN_ERANGE);
    cr_assert_eq(goblin_size_parse(NULL, &got), GOBLIN_EINVAL);
    cr_assert_eq(goblin_size_parse("1K", NULL), GOBLIN_EINVAL);
}
