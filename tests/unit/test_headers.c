/* tests/unit/test_headers.c - the public headers as a whole.
 *
 * Each header is also compiled alone, as strict C11 and as C++, by targets
 * that tests/meson.build generates (header_alone_*) for every header it finds
 * when meson configures; a failure there breaks the build. This file checks
 * what those cannot: that no header was added since (the build would not have
 * compiled it alone), that the version macros agree with
 * meson's project version, and that including everything twice is harmless. */
#include <criterion/criterion.h>
#include <goblin/goblin.h>
#include <goblin/goblin.h> /* include guards */
#include <goblin/api.h>
#include <dirent.h>
#include <stdio.h>
#include <string.h>

#ifndef GOBLIN_TEST_INCLUDE_DIR
#error "tests/meson.build passes GOBLIN_TEST_INCLUDE_DIR"
#endif

Test(headers, every_public_header_is_compiled_alone) {
    DIR *d = opendir(GOBLIN_TEST_INCLUDE_DIR);
    cr_assert_not_null(d, "cannot open %s", GOBLIN_TEST_INCLUDE_DIR);
    /* ",a.h,b.h," so a search for ",x.h," cannot match a prefix. */
    const char *tested = "," GOBLIN_TEST_HEADERS ",";
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len < 3 || strcmp(e->d_name + len - 2, ".h") != 0) continue;
        char key[300];
        snprintf(key, sizeof key, ",%s,", e->d_name);
        cr_expect(strstr(tested, key) != NULL,
                  "include/goblin/%s is newer than this build directory's header checks: "
                  "run meson setup --reconfigure", e->d_name);
        n++;
    }
    closedir(d);
    cr_expect_geq(n, 10, "found only %d headers in %s", n, GOBLIN_TEST_INCLUDE_DIR);
}

Test(headers, version_macros_match_meson) {
    char v[64];
    snprintf(v, sizeof v, "%d.%d.%d", GOBLIN_VERSION_MAJOR, GOBLIN_VERSION_MINOR, GOBLIN_VERSION_PATCH);
    cr_expect_str_eq(v, GOBLIN_VERSION_STRING);
    cr_expect_str_eq(GOBLIN_VERSION_STRING, GOBLIN_TEST_MESON_VERSION,
                     "version.h and meson's project version disagree");
}

/* The X-macro enums end with _COUNT past the largest value; a value past it
 * would break every table indexed by the enum. */
Test(headers, enum_counts_bound_the_maps) {
#define CHECK_OP(name, value, str) cr_expect_lt(value, (int)GOBLIN_OP_COUNT, "%s", str);
    GOBLIN_OP_MAP(CHECK_OP)
#undef CHECK_OP
#define CHECK_DT(name, value, str, size) cr_expect_lt(value, (int)GOBLIN_DTYPE_COUNT, "%s", str);
    GOBLIN_DTYPE_MAP(CHECK_DT)
#undef CHECK_DT
#define CHECK_ATTR(name, value, str, kind) cr_expect_lt(value, (int)GOBLIN_ATTR_COUNT, "%s", str);
    GOBLIN_ATTR_MAP(CHECK_ATTR)
#undef CHECK_ATTR
#define CHECK_ERR(name, value, msg) cr_expect_lt(value, (int)GOBLIN_ERR_COUNT, "%s", #name);
    GOBLIN_ERR_MAP(CHECK_ERR)
#undef CHECK_ERR
    cr_expect_eq(GOBLIN_MAX_RANK, 8);
}
