/* tests/unit/test_hub_web.c - what the hub's web pages parse and print, against values
 * worked out by hand: url-encoded forms (escapes, repeats, too many fields, NUL bytes),
 * cookies, and HTML and JSON escaping of hostile text. The pages over HTTPS are driven
 * by tests/python/test_hub_web.py against the real goblin-hub. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "hub/form.h"
#include "hub/page.h"

static goblin__hub_form parse_ok(const char *s) {
    goblin__hub_form f;
    const char *why = NULL;
    cr_assert(goblin__hub_form_parse(s, strlen(s), &f, &why), "%s: %s", s, why);
    return f;
}

static const char *parse_bad(const char *s, size_t n) {
    goblin__hub_form f;
    const char *why = NULL;
    cr_assert(!goblin__hub_form_parse(s, n, &f, &why), "%s was accepted", s);
    cr_assert_eq(f.n, 0);
    cr_assert_not_null(why);
    return why;
}

Test(hub_form, decodes_by_hand) {
    goblin__hub_form f = parse_ok("email=a%40b.org&name=Robert%27%29%3B+DROP+TABLE&empty=&flag&x=%C3%A9");
    cr_assert_eq(f.n, 5);
    cr_assert_str_eq(goblin__hub_form_get(&f, "email"), "a@b.org");
    cr_assert_str_eq(goblin__hub_form_get(&f, "name"), "Robert'); DROP TABLE");
    cr_assert_str_eq(goblin__hub_form_get(&f, "empty"), "");
    cr_assert_str_eq(goblin__hub_form_get(&f, "flag"), "");
    cr_assert_str_eq(goblin__hub_form_get(&f, "x"), "\xc3\xa9");
    cr_assert_null(goblin__hub_form_get(&f, "missing"));
    goblin__hub_form_free(&f);
    f = parse_ok("");
    cr_assert_eq(f.n, 0);
    f = parse_ok("&&a=1&&");
    cr_assert_eq(f.n, 1);
    goblin__hub_form_free(&f);
}

Test(hub_form, refuses_what_it_cannot_read) {
    parse_bad("a=%zz", 5);
    parse_bad("a=%4", 4);
    parse_bad("a=%", 3);
    parse_bad("a=x%00y", 7);
    parse_bad("a=x\0y", 5);
    cr_assert(strstr(parse_bad("a=1&a=2", 7), "twice"));
    char many[400] = "";
    for (int i = 0; i < 17; i++) sprintf(many + strlen(many), "f%d=v&", i);
    cr_assert(strstr(parse_bad(many, strlen(many)), "too many"));
}

Test(hub_form, cookies) {
    char v[65];
    cr_assert(goblin__hub_cookie("a=1; goblin_session=abc; b=2", "goblin_session", v, sizeof v));
    cr_assert_str_eq(v, "abc");
    cr_assert(goblin__hub_cookie("goblin_pre=xyz", "goblin_pre", v, sizeof v));
    cr_assert_str_eq(v, "xyz");
    cr_assert(!goblin__hub_cookie("xgoblin_session=abc", "goblin_session", v, sizeof v));
    cr_assert(!goblin__hub_cookie("goblin_sessionx=abc", "goblin_session", v, sizeof v));
    cr_assert(!goblin__hub_cookie(NULL, "goblin_session", v, sizeof v));
    char big[200];
    memset(big, 'a', sizeof big);
    memcpy(big, "s=", 2);
    big[sizeof big - 1] = 0;
    cr_assert(!goblin__hub_cookie(big, "s", v, sizeof v), "too long for the buffer");
}

Test(hub_page, escapes_hostile_text) {
    goblin__hub_page b = {0};
    goblin__hub_page_html(&b, "<script>alert('x')</script> & \"q\"");
    cr_assert_str_eq(b.p, "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;");
    goblin__hub_page_free(&b);
    goblin__hub_page_json(&b, "a\"b\\c\n</script>\x01");
    cr_assert_str_eq(b.p, "\"a\\\"b\\\\c\\u000a\\u003c/script\\u003e\\u0001\"");
    goblin__hub_page_free(&b);
    goblin__hub_page_begin(&b, "<b>", false, false);
    cr_assert(strstr(b.p, "<title>&lt;b&gt; - GPU Goblin</title>"));
    cr_assert(!b.failed);
    goblin__hub_page_free(&b);
}
