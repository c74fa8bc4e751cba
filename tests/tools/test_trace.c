/* test_trace.c: hbmalloc's text trace format; every malformed line is rejected with line and column. */
#include "helpers.h"
#include <unistd.h>

#include "trace/trace.h"

static trace t;
static char err[512];

static int read_str(const char *s) { return trace_read_text_mem("t", s, strlen(s), &t, err, sizeof err); }

static void bad(const char *s, const char *where, const char *what)
{
    if (read_str(s) == 0)
        fail_msg("accepted: %s", s);
    if (!strstr(err, where) || !strstr(err, what))
        fail_msg("'%s' gave '%s', expected '%s' and '%s'", s, err, where, what);
}

static void reads_events_and_resolves_ids_to_reused_slots(void **st)
{
    (void)st;
    assert_int_equal(
        read_str("hbmtrace 1\n# c\na 10 4096\na 11 100 7\nf 10\n\na 12 5  # trailing comment\ne\nf 11\nf 12"), 0);
    assert_int_equal(t.n, 7);
    assert_int_equal(t.allocs, 3);
    assert_int_equal(t.frees, 3);
    assert_int_equal(t.nslots, 2); /* at most two blocks live at once */
    assert_int_equal(t.nstreams, 2);
    assert_int_equal(t.ev[0].kind, EV_ALLOC);
    assert_int_equal(t.ev[0].size, 4096);
    assert_int_equal(t.ev[1].stream, 7);
    assert_int_equal(t.ev[2].kind, EV_FREE);
    assert_int_equal(t.ev[2].slot, t.ev[0].slot);
    assert_int_equal(t.ev[3].slot, t.ev[0].slot); /* id 12 reuses id 10's slot */
    assert_int_equal(t.ev[3].line, 7);
    assert_int_equal(t.ev[4].kind, EV_EMPTY_CACHE);
    trace_free(&t);
    assert_int_equal(read_str(""), 0);
    assert_int_equal(t.n, 0);
    trace_free(&t);
    assert_int_equal(read_str("a 0 1\r\nf 0\r\n"), 0); /* CRLF files */
    trace_free(&t);
}

/* `p ID`: a block freed while another stream still uses it; its `f` completes the free later. */
static void pending_frees_are_read_and_completed_by_their_free(void **st)
{
    (void)st;
    assert_int_equal(read_str("a 1 4096\na 2 100\np 1\nf 2\na 3 512\nf 1\nf 3\n"), 0);
    assert_int_equal(t.n, 7);
    assert_int_equal(t.pending, 1);
    assert_int_equal(t.frees, 3);
    assert_int_equal(t.ev[2].kind, EV_PENDING);
    assert_int_equal(t.ev[2].slot, t.ev[0].slot);
    assert_int_equal(t.ev[3].pended, 0); /* block 2 was freed outright */
    assert_int_equal(t.ev[5].kind, EV_FREE);
    assert_true(t.ev[5].pended);                      /* block 1's free completes */
    assert_int_not_equal(t.ev[4].slot, t.ev[0].slot); /* block 1 is live until then: its slot is not reused */
    trace_free(&t);
    bad("p 4\n", "t:1:3:", "pending free of block id 4, which is not live");
    bad("a 4 10\np 4\np 4\n", "t:3:3:", "pending already");
    bad("a 4 10\np 4\na 4 10\n", "t:3:3:", "already live (allocated on line 1)");
    bad("a 4 10\np 4\nf 4\nf 4\n", "t:4:3:", "not live");
    bad("a 4 10\np\n", "t:2:2:", "expected a block id");
}

static void malformed_lines_name_line_and_column(void **st)
{
    (void)st;
    bad("a 1 100\nx 2\n", "t:2:1:", "unknown event");
    bad("a 1\n", "t:1:4:", "expected a size");
    bad("a 1 -5\n", "t:1:5:", "must not be negative");
    bad("a 1 12k\n", "t:1:7:", "decimal number");
    bad("a 1 99999999999999999999\n", "t:1:5:", "64 bits");
    bad("a 1 10 0 9\n", "t:1:10:", "unexpected text");
    bad("a 1 10\na 1 20\n", "t:2:3:", "already live (allocated on line 1)");
    bad("f 3\n", "t:1:3:", "not live");
    bad("a 1 10\nf 1\nf 1\n", "t:3:3:", "not live");
    bad("hbmtrace 2\n", "t:1:1:", "unsupported hbmtrace version");
    bad("alloc 1 2\n", "t:1:1:", "unknown event");
}

/* Every 64-bit id is a key: 0 and UINT64_MAX too (the map once kept id + 1, so UINT64_MAX looked empty). */
static void every_id_is_a_key(void **st)
{
    (void)st;
    trace_init(&t);
    trace_builder *b = tb_new(&t);
    assert_non_null(b);
    assert_int_equal(tb_alloc(b, UINT64_MAX, 512, 0, 1, NULL), 0);
    assert_int_equal(tb_alloc(b, 0, 1024, 0, 2, NULL), 0);
    assert_true(tb_is_live(b, UINT64_MAX));
    uint32_t at = 0;
    assert_int_equal(tb_alloc(b, UINT64_MAX, 512, 0, 3, &at), -1); /* already live, since line 1 */
    assert_int_equal(at, 1);
    assert_int_equal(tb_free(b, UINT64_MAX, 4), 0);
    assert_false(tb_is_live(b, UINT64_MAX));
    assert_int_equal(tb_free(b, 0, 5), 0);
    tb_finish(b);
    assert_int_equal(t.n, 4);
    trace_free(&t);
    /* In the text format as well. */
    const char *text = "a 18446744073709551615 512\nf 18446744073709551615\n";
    assert_int_equal(trace_read_text_mem("t", text, strlen(text), &t, err, sizeof err), 0);
    assert_int_equal(t.n, 2);
    trace_free(&t);
}

/* Work per operation stays small whatever the ids: addresses that differ only in high bits (multiples of 2^47,
 * which the old hash sent to one cell) cost no more probes than dense ids. A count, not a time. */
static void lookups_stay_constant_whatever_the_ids(void **st)
{
    (void)st;
    const size_t n = 100000;
    for (int kind = 0; kind < 3; kind++) {
        trace_init(&t);
        trace_builder *b = tb_new(&t);
        for (size_t i = 0; i < n; i++) {
            uint64_t key = kind == 0 ? i : kind == 1 ? (uint64_t)i << 47 : 0x7f0000000000ull + ((uint64_t)i << 21);
            assert_int_equal(tb_alloc(b, key, 512, 0, (uint32_t)i, NULL), 0);
        }
        for (size_t i = 0; i < n; i += 2) {
            uint64_t key = kind == 0 ? i : kind == 1 ? (uint64_t)i << 47 : 0x7f0000000000ull + ((uint64_t)i << 21);
            assert_int_equal(tb_free(b, key, (uint32_t)i), 0);
        }
        size_t probes = tb_probes(b);
        tb_finish(b);
        trace_free(&t);
        if (probes > 4 * (n + n / 2))
            fail_msg("ids of kind %d: %zu probes for %zu operations", kind, probes, n + n / 2);
    }
}

static void missing_file_is_an_error(void **st)
{
    (void)st;
    assert_int_equal(trace_read_text("/nonexistent/x.trace", &t, err, sizeof err), -1);
    assert_non_null(strstr(err, "cannot open"));
}

/* Issue #28 item 14: a CR alone ended an event and dropped the rest of its line, so a file with CR-only line ends
 * (classic Mac OS, some Windows tools) replayed its first event only; a UTF-8 byte order mark gave "unknown
 * event". Lines end in LF, CRLF or a CR alone, in every reader; a BOM is read as nothing. */
static void cr_only_line_ends_and_a_byte_order_mark_lose_no_event(void **st)
{
    (void)st;
    assert_int_equal(read_str("a 1 100\ra 2 200\rf 1\rf 2\r"), 0);
    assert_int_equal(t.n, 4);
    assert_int_equal(t.ev[3].line, 4);
    trace_free(&t);
    assert_int_equal(read_str("hbmtrace 1\r\na 1 100\r\n\r\nf 1\ra 2 5 # c\re\n"), 0); /* mixed, comments */
    assert_int_equal(t.n, 3 + 1);
    assert_int_equal(t.ev[3].kind, EV_EMPTY_CACHE);
    assert_int_equal(t.ev[3].line, 6);
    trace_free(&t);
    bad("a 1 100\rgarbage\n", "t:2:1:", "unknown event"); /* what follows a CR is a line: read, never dropped */
    assert_int_equal(read_str("\xef\xbb\xbfhbmtrace 1\na 1 100\nf 1\n"), 0);
    assert_int_equal(t.n, 2);
    trace_free(&t);
    bad("\xef\xbb\xbf\xef\xbb\xbf"
        "a 1 100\n",
        "t:1:1:", "unknown event"); /* one mark, at the start only */
    /* The CSV readers, told apart by content after the mark. */
    char path[] = "/tmp/hbm-test-trace-XXXXXX";
    const char *csv[] = {"\xef\xbb\xbfid,lower,upper,size\r0,0,2,100\r1,1,3,200\r2,2,4,300\r",
                         "\xef\xbb\xbfThread,Time,Action,Pointer,Size,Stream\r1,0,allocate,0x1000,100,0\r"
                         "1,1,allocate,0x2000,200,0\r1,2,free,0x1000,100,0\r"};
    const size_t events[] = {6, 3};
    for (int k = 0; k < 2; k++) {
        int fd = mkstemp(path);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, csv[k], strlen(csv[k])), (ssize_t)strlen(csv[k]));
        close(fd);
        if (trace_read_any(path, 0, &t, err, sizeof err))
            fail_msg("%s", err);
        assert_int_equal(t.n, events[k]);
        trace_free(&t);
        unlink(path);
        strcpy(path + strlen(path) - 6, "XXXXXX");
    }
}

/* Issue #28 item 11: a line "e" is two bytes and one event; at 32 bytes an event, a file of them took 17 bytes of
 * memory per byte, past the readers' bound of 16 (docs/RELIABILITY.md). */
static void an_event_takes_24_bytes(void **st)
{
    (void)st;
    assert_int_equal(sizeof(trace_event), 24);
    trace_event e = {.slot = TRACE_MAX_SLOTS - 1, .kind = EV_PENDING, .pended = 1};
    assert_int_equal(e.slot, TRACE_MAX_SLOTS - 1);
    assert_int_equal(e.kind, EV_PENDING);
}

/* Pools that sleep (docs/TRACE_FORMAT.md): `u` routes the allocations that follow into a private pool, `z` and `w`
 * put one to sleep and wake it, with the recording's bytes, its tag (escaped) and whether it keeps a backup. */
static void pools_sleeps_and_wakes_are_read_with_their_tags(void **st)
{
    (void)st;
    assert_int_equal(read_str("u 7\na 1 4096\nu 0\na 2 100\nz 7 20971520 weights backup\nf 2\n"
                              "w 7 20971520 weights backup\nu 9\na 3 10\nz 9 0 kv%20cache%25\nw 9 0 kv%20cache%25\n"
                              "z 0 2097152 -  # a sleep the trace cannot place\n"),
                     0);
    assert_int_equal(t.n, 12);
    assert_int_equal(t.npools, 2);
    assert_int_equal(t.pools[0].number, 7);
    assert_string_equal(t.meta.texts[t.pools[0].tag], "weights");
    assert_true(t.pools[0].backup);
    assert_int_equal(t.pools[1].number, 9);
    assert_string_equal(t.meta.texts[t.pools[1].tag], "kv cache%");
    assert_false(t.pools[1].backup);
    assert_int_equal(t.ev[0].kind, EV_POOL);
    assert_int_equal(t.ev[0].stream, 1); /* pool 7 is the first the trace names */
    assert_int_equal(t.ev[2].kind, EV_POOL);
    assert_int_equal(t.ev[2].stream, 0);
    const trace_event *z = &t.ev[4], *w = &t.ev[6], *z0 = &t.ev[11];
    assert_int_equal(z->kind, EV_SLEEP);
    assert_int_equal(z->stream, 1);
    assert_int_equal(z->size, 20971520);
    assert_true(z->pended);
    assert_string_equal(trace_tag(&t, z), "weights");
    assert_int_equal(w->kind, EV_WAKE);
    assert_string_equal(trace_tag(&t, w), "weights");
    assert_string_equal(trace_tag(&t, &t.ev[9]), "kv cache%");
    assert_false(t.ev[9].pended);
    assert_int_equal(z0->kind, EV_SLEEP);
    assert_int_equal(z0->stream, 0);
    assert_string_equal(trace_tag(&t, z0), "");
    assert_int_equal(t.sleeps, 3);
    assert_int_equal(t.wakes, 2);
    assert_int_equal(t.unplaced, 1);
    assert_int_equal(t.allocs, 3);
    trace_free(&t);
    /* A tag of 63 bytes (hbm_pool_tag's most), escapes of any byte but NUL; "%2D" is the tag "-", not "not said". */
    char line[200];
    snprintf(line, sizeof line, "z 3 0 %063d\nw 3 0 %063d\nz 4 0 %%2D\n", 0, 0);
    assert_int_equal(read_str(line), 0);
    assert_int_equal(strlen(trace_tag(&t, &t.ev[0])), 63);
    assert_string_equal(trace_tag(&t, &t.ev[2]), "-");
    trace_free(&t);
}

static void malformed_pool_lines_name_line_and_column(void **st)
{
    (void)st;
    bad("u 1\na 1 10\nz 1 0 w\na 2 10\n", "t:4:1:", "allocation into pool 1, asleep since line 3 (its 'w' wakes it");
    bad("z 1 0 w\nw 1 0 w backup\n", "t:2:3:", "pool 1 is 'w' (line 1): a pool keeps its tag and its backup");
    bad("z 1 0 w\nz 1 0 x\n", "t:2:3:", "a pool keeps its tag");
    bad("z 1 0 -\n", "t:1:3:", "a pool the trace names needs its tag");
    bad("z 1 0\n", "t:1:6:", "expected the pool's tag");
    bad("z 1\n", "t:1:4:", "expected the pool's bytes");
    bad("z x 0 w\n", "t:1:3:", "expected a pool number");
    bad("z 1 0 a%zz\n", "t:1:8:", "two hex digits");
    bad("z 1 0 a%00\n", "t:1:8:", "not 00");
    bad("z 1 0 a%4\n", "t:1:8:", "two hex digits");
    bad("z 1 0 w backups\n", "t:1:9:", "expected 'backup' or the end of the line");
    bad("z 1 0 w backup x\n", "t:1:16:", "unexpected text");
    bad("u\n", "t:1:2:", "expected a pool number");
    bad("u 1 2\n", "t:1:5:", "unexpected text");
    char line[200];
    snprintf(line, sizeof line, "z 3 0 %064d\n", 0);
    bad(line, "t:1:7:", "a tag is at most 63 bytes");
    /* Awake again, or in another pool, allocations go on. */
    assert_int_equal(read_str("u 1\nz 1 0 w\nu 0\na 1 10\nw 1 0 w\nu 1\na 2 10\n"), 0);
    trace_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reads_events_and_resolves_ids_to_reused_slots),
        cmocka_unit_test(malformed_lines_name_line_and_column),
        cmocka_unit_test(pending_frees_are_read_and_completed_by_their_free),
        cmocka_unit_test(every_id_is_a_key),
        cmocka_unit_test(lookups_stay_constant_whatever_the_ids),
        cmocka_unit_test(missing_file_is_an_error),
        cmocka_unit_test(cr_only_line_ends_and_a_byte_order_mark_lose_no_event),
        cmocka_unit_test(an_event_takes_24_bytes),
        cmocka_unit_test(pools_sleeps_and_wakes_are_read_with_their_tags),
        cmocka_unit_test(malformed_pool_lines_name_line_and_column),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
