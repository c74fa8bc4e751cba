/* test_plan.c: offline plans (tools/run/plan.c): no two live allocations overlap, the search beats the greedy where
 * the greedy misses, the same seed gives the same plan, budgets bound the work. */
#include "helpers.h"
#include <unistd.h>

#include "run/plan.h"
#include "trace/trace.h"

/* The lifetimes of PyTorch's linear-10k-50k-nograd snapshot (../shared/traces, from the memory_viz tutorial's
 * example): 12 allocations whose best greedy order (size, best fit) pays 4.7% over peak live; an exact search
 * (MiniMalloc) packs them at peak live. */
static const char nograd[] = "hbmtrace 1\na 0 2000000000 0\na 1 200192 0\na 2 200000000 0\na 3 1000000000 0\n"
                             "a 4 1048576 0\na 5 33554432 0\nf 4\na 6 200000000 0\nf 2\na 7 1000000000 0\n"
                             "a 8 1048576 0\nf 8\nf 3\na 9 200000000 0\nf 6\na 10 1000000000 0\na 11 1048576 0\n"
                             "f 11\nf 7\n";

static trace t;
static char err[512];

static void read_nograd(void)
{
    assert_int_equal(trace_read_text_mem("nograd", nograd, strlen(nograd), &t, err, sizeof err), 0);
}

static void the_search_finds_what_the_greedy_misses(void **st)
{
    (void)st;
    read_nograd();
    plan p;
    plan_opts o = {0};
    assert_int_equal(plan_build(&t, &o, &p, err, sizeof err), 0);
    assert_int_equal(p.n, 12);
    assert_int_equal(p.peak_live, 4234803200ull); /* the sizes here are the snapshot's rounded to 512 */
    assert_true(p.greedy_height > p.peak_live_rounded * 104 / 100); /* the eight orders all pay over 4% */
    assert_int_equal(p.height, p.peak_live_rounded);                /* the search packs it exactly */
    assert_int_equal(plan_check(&p, err, sizeof err), 0);
    for (size_t i = 0; i < p.n; i++)
        assert_int_equal(p.b[i].alloc, i);
    plan_free(&p);
    trace_free(&t);
}

static void a_plan_with_overlapping_live_buffers_is_caught(void **st)
{
    (void)st;
    read_nograd();
    plan p;
    assert_int_equal(plan_build(&t, NULL, &p, err, sizeof err), 0);
    /* Buffers 0 and 1 live together from the start: put 1 inside 0. */
    p.b[1].offset = p.b[0].offset + 512;
    assert_int_equal(plan_check(&p, err, sizeof err), -1);
    assert_non_null(strstr(err, "allocations 0 and 1 live at the same time and overlap"));
    p.b[1].offset = p.height; /* above the height */
    assert_int_equal(plan_check(&p, err, sizeof err), -1);
    assert_non_null(strstr(err, "above the height"));
    plan_free(&p);
    trace_free(&t);
}

static void plans_are_repeatable_and_budgets_bound_the_work(void **st)
{
    (void)st;
    read_nograd();
    plan a, b;
    plan_opts o = {.budget = 5, .seed = 7};
    assert_int_equal(plan_build(&t, &o, &a, err, sizeof err), 0);
    assert_int_equal(plan_build(&t, &o, &b, err, sizeof err), 0);
    assert_true(a.evaluations <= 8 + 5);
    assert_int_equal(a.height, b.height);
    for (size_t i = 0; i < a.n; i++)
        assert_int_equal(a.b[i].offset, b.b[i].offset);
    assert_int_equal(plan_check(&a, err, sizeof err), 0);
    plan_free(&a);
    plan_free(&b);
    trace_free(&t);
    /* Sizes whose sum no device holds are refused, not wrapped around (a plan of 512 bytes for 2^64). */
    const char huge[] = "hbmtrace 1\na 1 18446744073709551615 0\na 2 4611686018427387904 0\nf 1\n";
    assert_int_equal(trace_read_text_mem("h", huge, strlen(huge), &t, err, sizeof err), 0);
    assert_int_equal(plan_build(&t, NULL, &a, err, sizeof err), -1);
    assert_non_null(strstr(err, "sum past 2^62 bytes"));
    trace_free(&t);
    /* No allocations: an empty plan. */
    const char empty[] = "hbmtrace 1\n";
    assert_int_equal(trace_read_text_mem("e", empty, strlen(empty), &t, err, sizeof err), 0);
    assert_int_equal(plan_build(&t, NULL, &a, err, sizeof err), 0);
    assert_int_equal(a.n, 0);
    assert_int_equal(a.height, 0);
    plan_free(&a);
    trace_free(&t);
}

/* Issue #28 item 15: `plan --budget 18446744073709551615` never finished: the planner took up to 100,000
 * evaluations of some n^2 steps each, whatever n. A budget is bounded by 100 times the default's work (4*10^11 / n^2
 * evaluations, at most 100,000) and a larger one is refused with that bound, before any search (the alarm turns the
 * old endless search into a failure). */
static void a_budget_past_its_bound_is_refused_before_the_search(void **st)
{
    (void)st;
    assert_int_equal(plan_budget_max(0), 100000);
    assert_int_equal(plan_budget_max(1000), 100000);
    assert_int_equal(plan_budget_max(7095), 7946);
    assert_int_equal(plan_budget_max(10000000), 1);
    /* 3000 allocations, 40 live at a time, of sizes the greedy orders do not pack to peak live. */
    char *text = malloc(3000 * 64), *p = text;
    uint64_t x = 12345;
    for (int i = 0; i < 3000; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        p += sprintf(p, "a %d %llu\n", i, (unsigned long long)((x >> 33) % 100000 + 1) * 512);
        if (i >= 40)
            p += sprintf(p, "f %d\n", i - 40);
    }
    (void)p;
    assert_int_equal(trace_read_text_mem("w", text, strlen(text), &t, err, sizeof err), 0);
    free(text);
    plan a;
    plan_opts o = {.budget = UINT64_MAX, .seed = 1};
    alarm(120);
    assert_int_equal(plan_build(&t, &o, &a, err, sizeof err), -1);
    alarm(0);
    assert_non_null(strstr(err, "--budget 18446744073709551615: at most 44444 for 3000 allocations"));
    trace_free(&t);
}

static void the_plan_file_lists_every_allocation(void **st)
{
    (void)st;
    read_nograd();
    plan p;
    assert_int_equal(plan_build(&t, NULL, &p, err, sizeof err), 0);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_int_equal(plan_write(&p, "nograd", f), 0);
    fclose(f);
    assert_true(!strncmp(text, "hbmplan 1\n", 10));
    char want[64];
    snprintf(want, sizeof want, "\nheight %llu\n", (unsigned long long)p.height);
    assert_non_null(strstr(text, want));
    snprintf(want, sizeof want, "\n11 %llu 1048576 16 17\n", (unsigned long long)p.b[11].offset);
    assert_non_null(strstr(text, want));
    free(text);
    plan_free(&p);
    trace_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_search_finds_what_the_greedy_misses),
        cmocka_unit_test(a_plan_with_overlapping_live_buffers_is_caught),
        cmocka_unit_test(plans_are_repeatable_and_budgets_bound_the_work),
        cmocka_unit_test(the_plan_file_lists_every_allocation),
        cmocka_unit_test(a_budget_past_its_bound_is_refused_before_the_search),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
