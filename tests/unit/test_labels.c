/* test_labels.c: call-site labels (labels.c) and how history entries, blocks and snapshots carry them. */
#define _GNU_SOURCE /* memmem */
#include <unistd.h>

#include "helpers.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include "util/util.h"

/* A snapshot as hbm_snapshot_save writes its JSON. */
static void as_json(const hbm_snapshot *s, char *buf, size_t len)
{
    char path[] = "/tmp/hbm_labels_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    char err[256];
    assert_int_equal(hbm_snapshot_save(s, path, HBM_SNAPSHOT_JSON, err, sizeof err), HBM_OK);
    FILE *f = fopen(path, "r");
    size_t n = fread(buf, 1, len - 1, f);
    buf[n] = 0;
    fclose(f);
    unlink(path);
}

static void the_same_text_gives_the_same_id_and_many_texts_stay_distinct(void **state)
{
    (void)state;
    hbm_allocator *a = open_sim("sim:capacity=1GiB", "");
    enum { N = 20000 };
    static hbm_label ids[N];
    char text[64];
    for (int i = 0; i < N; i++) {
        snprintf(text, sizeof text, "step %d", i);
        assert_int_equal(hbm_label_intern(a, text, &ids[i]), HBM_OK);
        assert_int_not_equal(ids[i], 0);
    }
    for (int i = 0; i < N; i++) { /* again, after every rehash: the same ids */
        snprintf(text, sizeof text, "step %d", i);
        hbm_label again;
        assert_int_equal(hbm_label_intern(a, text, &again), HBM_OK);
        assert_int_equal(again, ids[i]);
    }
    for (int i = 1; i < N; i++)
        assert_int_not_equal(ids[i], ids[i - 1]);
    assert_int_equal(a->labels.n, N);
    assert_true(a->labels.nslot >= N * 4 / 3);
    hbm_destroy(a);
}

static void bad_labels_are_refused(void **state)
{
    (void)state;
    hbm_allocator *a = open_sim("sim:capacity=1GiB", "");
    char *big = malloc(HBM_LABEL_MAX + 2);
    memset(big, 'x', HBM_LABEL_MAX + 1);
    big[HBM_LABEL_MAX + 1] = 0;
    hbm_label id = 7;
    assert_int_equal(hbm_label_intern(a, big, &id), HBM_ERR_INVALID);
    assert_non_null(strstr(hbm_last_error(a), "at most 65536"));
    assert_int_equal(hbm_history_context(a, big), HBM_ERR_INVALID);
    free(big);
    assert_int_equal(hbm_label_intern(a, NULL, &id), HBM_ERR_INVALID);
    void *p = (void *)1;
    assert_int_equal(hbm_malloc_labeled(a, 4096, 0, 99, &p), HBM_ERR_INVALID); /* never interned */
    assert_null(p);
    assert_non_null(strstr(hbm_last_error(a), "label 99"));
    assert_int_equal(stats_of(a).allocation[0].current, 0);
    hbm_destroy(a);
}

static void a_call_label_goes_to_its_entries_its_block_and_its_frees(void **state)
{
    (void)state;
    hbm_allocator *a = open_sim("sim:capacity=1GiB", "");
    assert_int_equal(hbm_history_enable(a, 100), HBM_OK);
    hbm_label fwd, bwd;
    assert_int_equal(hbm_label_intern(a, "forward\tmodel.py\t10\ntrain\ttrain.py\t3", &fwd), HBM_OK);
    assert_int_equal(hbm_label_intern(a, "backward", &bwd), HBM_OK);
    assert_int_equal(hbm_history_context(a, "step"), HBM_OK);
    void *p, *q, *r;
    assert_int_equal(hbm_malloc_labeled(a, 30 * MiB, 0, fwd, &p), HBM_OK);
    assert_int_equal(hbm_malloc_labeled(a, 4096, 0, bwd, &q), HBM_OK);
    assert_int_equal(hbm_malloc_labeled(a, 8192, 0, 0, &r), HBM_OK); /* none of its own: the allocator's */
    assert_int_equal(hbm_history_context(a, "later"), HBM_OK);
    hbm_free(a, q);
    hbm_snapshot *s;
    assert_int_equal(hbm_snapshot_take(a, &s), HBM_OK);
    /* segment_alloc, alloc (p); segment_alloc, alloc (q); alloc (r); free_requested, free_completed (q) */
    assert_int_equal(s->ntrace, 7);
    assert_int_equal(s->trace[0].action, HBM_TRACE_SEGMENT_ALLOC);
    assert_string_equal(s->trace[0].context, "forward\tmodel.py\t10\ntrain\ttrain.py\t3");
    assert_string_equal(s->trace[1].context, s->trace[0].context);
    assert_string_equal(s->trace[3].context, "backward");
    assert_string_equal(s->trace[4].context, "step");
    assert_int_equal(s->trace[5].action, HBM_TRACE_FREE_REQUESTED);
    assert_string_equal(s->trace[5].context, "backward"); /* the allocation's, not "later" */
    assert_string_equal(s->trace[6].context, "backward");
    int seen = 0;
    for (size_t i = 0; i < s->nblocks; i++) {
        const hbm_snap_block *b = &s->blocks[i];
        if (b->addr == (uint64_t)(uintptr_t)p)
            seen += !strcmp(b->context, "forward\tmodel.py\t10\ntrain\ttrain.py\t3");
        else if (b->addr == (uint64_t)(uintptr_t)r)
            seen += !strcmp(b->context, "step");
        else if (b->state == HBM_BLOCK_INACTIVE)
            seen += b->context == NULL; /* a free block has no allocation */
    }
    assert_true(seen >= 3);
    hbm_snapshot_free(s);
    hbm_free(a, p);
    hbm_free(a, r);
    assert_valid(a);
    hbm_destroy(a);
}

/* torch.cuda.memory._record_memory_history() with no arguments asks for max_entries=sys.maxsize (torch/cuda/memory.py
 * v2.6:803-810, _record_memory_history_impl): the ring is not made that large up front; it grows as entries come,
 * keeps every entry while it can, and wraps at what was asked. */
static void any_history_size_is_accepted_and_the_ring_grows_as_entries_come(void **state)
{
    (void)state;
    hbm_allocator *a = open_sim("sim:capacity=1GiB", "");
    assert_int_equal(hbm_history_enable(a, SIZE_MAX), HBM_OK);
    assert_int_equal(hbm_history_enable(a, (size_t)INT64_MAX), HBM_OK); /* sys.maxsize */
    void *p;
    for (int i = 0; i < 3000; i++) {
        assert_int_equal(hbm_malloc(a, 4096, 0, &p), HBM_OK);
        assert_int_equal(hbm_free(a, p), HBM_OK);
    }
    hbm_snapshot *s;
    assert_int_equal(hbm_snapshot_take(a, &s), HBM_OK);
    assert_int_equal(s->ntrace, 1 + 3 * 3000); /* segment_alloc; alloc, free_requested, free_completed each */
    assert_int_equal(s->trace[0].action, HBM_TRACE_SEGMENT_ALLOC);
    hbm_snapshot_free(s);
    /* A small ring still wraps at its size, keeping the newest. */
    assert_int_equal(hbm_history_enable(a, 5), HBM_OK);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(hbm_malloc(a, 4096 * (size_t)(i + 1), 0, &p), HBM_OK);
        assert_int_equal(hbm_free(a, p), HBM_OK);
    }
    assert_int_equal(hbm_snapshot_take(a, &s), HBM_OK);
    assert_int_equal(s->ntrace, 5);
    assert_int_equal(s->trace[4].action, HBM_TRACE_FREE_COMPLETED);
    assert_int_equal(s->trace[4].size, 4 * 4096);
    hbm_snapshot_free(s);
    assert_valid(a);
    hbm_destroy(a);
}

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
/* Host memory runs out while the ring grows: it stops growing, says so once, keeps the newest entries, and the
 * allocator goes on serving. In a child with an address-space limit (the sanitizers reserve their shadow memory
 * up front, so not under them). */
static void a_history_that_cannot_grow_keeps_the_newest_entries(void **state)
{
    (void)state;
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        hbm_allocator *a = open_sim("sim:capacity=1GiB", "");
        if (hbm_history_enable(a, SIZE_MAX) != HBM_OK)
            _exit(10);
        struct rlimit lim;
        getrlimit(RLIMIT_AS, &lim);
        FILE *f = fopen("/proc/self/statm", "r");
        unsigned long pages = 0;
        if (!f || fscanf(f, "%lu", &pages) != 1)
            _exit(11);
        fclose(f);
        lim.rlim_cur = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + (64u << 20); /* 64 MiB more */
        if (setrlimit(RLIMIT_AS, &lim))
            _exit(12);
        void *p;
        for (long i = 0; i < 3000000; i++) /* 9 M entries: far past 64 MiB of ring */
            if (hbm_malloc(a, 4096, 0, &p) != HBM_OK || hbm_free(a, p) != HBM_OK)
                _exit(13);
        hbm_snapshot *s = NULL;
        /* Taking a snapshot copies the ring: give the limit back first. */
        lim.rlim_cur = lim.rlim_max;
        setrlimit(RLIMIT_AS, &lim);
        if (hbm_snapshot_take(a, &s) != HBM_OK)
            _exit(14);
        int ok = s->ntrace > 1024 && s->ntrace < 9000001 && s->trace[s->ntrace - 1].action == HBM_TRACE_FREE_COMPLETED;
        _exit(ok ? 0 : 15);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}
#endif

static void a_snapshot_outlives_its_allocator(void **state)
{
    (void)state;
    hbm_allocator *a = open_sim("sim:capacity=1GiB", "");
    assert_int_equal(hbm_history_enable(a, 10), HBM_OK);
    assert_int_equal(hbm_history_context(a, "optimizer.step"), HBM_OK);
    void *p = must_malloc(a, 4096, 0);
    (void)p;
    hbm_snapshot *s;
    assert_int_equal(hbm_snapshot_take(a, &s), HBM_OK);
    hbm_destroy(a); /* frees the allocator's label texts */
    assert_string_equal(s->trace[s->ntrace - 1].context, "optimizer.step");
    char buf[8192];
    as_json(s, buf, sizeof buf);
    assert_non_null(strstr(buf, "\"frames\":[{\"name\":\"optimizer.step\",\"filename\":\"\",\"line\":0}]"));
    hbm_snapshot_free(s);
}

static void frames_are_written_as_pytorch_frame_dicts(void **state)
{
    (void)state;
    hbm_allocator *a = open_sim("sim:capacity=1GiB", "");
    assert_int_equal(hbm_history_enable(a, 10), HBM_OK);
    hbm_label l;
    assert_int_equal(hbm_label_intern(a, "matmul\t/src/model.py\t42\n<module>\ttrain.py\t7", &l), HBM_OK);
    void *p;
    assert_int_equal(hbm_malloc_labeled(a, 4096, 0, l, &p), HBM_OK);
    hbm_snapshot *s;
    assert_int_equal(hbm_snapshot_take(a, &s), HBM_OK);
    char buf[8192];
    as_json(s, buf, sizeof buf);
    const char *want = "\"frames\":[{\"name\":\"matmul\",\"filename\":\"/src/model.py\",\"line\":42},"
                       "{\"name\":\"<module>\",\"filename\":\"train.py\",\"line\":7}]";
    /* Once for the block, once for the alloc entry. */
    const char *first = strstr(buf, want);
    assert_non_null(first);
    assert_non_null(strstr(first + 1, want));
    hbm_snapshot_free(s);
    hbm_free(a, p);
    hbm_destroy(a);
}

static void the_label_table_is_bounded_and_kept_labels_still_answer(void **state)
{
    (void)state;
    /* Issue #15 item 9: a label per training step grew the table without bound. */
    hbm_allocator *a = open_sim("sim:capacity=1GiB", "");
    assert_int_equal(hbm_history_enable(a, 10), HBM_OK);
    char text[64];
    hbm_label first = 0, id;
    for (int i = 0; i < HBM_LABELS_MAX; i++) {
        snprintf(text, sizeof text, "step %d", i);
        assert_int_equal(hbm_label_intern(a, text, &id), HBM_OK);
        if (i == 0)
            first = id;
    }
    assert_int_equal(hbm_label_intern(a, "step -1", &id), HBM_ERR_NOMEM);
    assert_non_null(strstr(hbm_last_error(a), "label table full: 1048576 labels"));
    assert_non_null(strstr(hbm_last_error(a), "label what repeats"));
    assert_int_equal(hbm_label_intern(a, "step 0", &id), HBM_OK); /* kept texts still answer */
    assert_int_equal(id, first);
    /* A refused allocator-wide label leaves the previous one in force. */
    assert_int_equal(hbm_history_context(a, "step 7"), HBM_OK);
    assert_int_equal(hbm_history_context(a, "a new phase"), HBM_ERR_NOMEM);
    void *p = must_malloc(a, 4096, 0);
    hbm_snapshot *s;
    assert_int_equal(hbm_snapshot_take(a, &s), HBM_OK);
    assert_string_equal(s->trace[s->ntrace - 1].context, "step 7");
    hbm_snapshot_free(s);
    hbm_free(a, p);
    hbm_destroy(a);
    /* The text bound: 1023 labels of 64 KiB fit in 64 MiB, the next does not. */
    a = open_sim("sim:capacity=1GiB", "");
    char *big = malloc(HBM_LABEL_MAX + 1);
    memset(big, 'x', HBM_LABEL_MAX);
    big[HBM_LABEL_MAX] = 0;
    for (int i = 0; i < 1023; i++) {
        snprintf(big, 16, "%015d", i); /* distinct texts of HBM_LABEL_MAX bytes */
        big[15] = 'x';
        assert_int_equal(hbm_label_intern(a, big, &id), HBM_OK);
    }
    snprintf(big, 16, "%015d", 1023);
    big[15] = 'x';
    assert_int_equal(hbm_label_intern(a, big, &id), HBM_ERR_NOMEM);
    assert_non_null(strstr(hbm_last_error(a), "bytes of text"));
    assert_int_equal(hbm_label_intern(a, "short", &id), HBM_OK); /* what still fits is kept */
    free(big);
    hbm_destroy(a);
}

static void labels_that_are_not_utf8_still_give_loadable_snapshots(void **state)
{
    (void)state;
    /* Issue #15 item 5: raw bytes made the pickle unloadable (Python decodes strings as strict UTF-8)
     * and the JSON invalid. They are written as U+FFFD; well-formed characters pass through. */
    hbm_allocator *a = open_sim("sim:capacity=1GiB", "");
    assert_int_equal(hbm_history_enable(a, 10), HBM_OK);
    assert_int_equal(hbm_history_context(a, "step\xff\xfe \xe6\xad\xa5 \xe6\xad"), HBM_OK); /* ..., 步, a cut 步 */
    void *p = must_malloc(a, 4096, 0);
    hbm_snapshot *s;
    assert_int_equal(hbm_snapshot_take(a, &s), HBM_OK);
    char buf[8192];
    as_json(s, buf, sizeof buf);
    assert_non_null(strstr(buf, "\"name\":\"step\\ufffd\\ufffd \xe6\xad\xa5 \\ufffd\\ufffd\""));
    char path[] = "/tmp/hbm_labels_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    char err[256];
    assert_int_equal(hbm_snapshot_save(s, path, HBM_SNAPSHOT_PICKLE, err, sizeof err), HBM_OK);
    FILE *f = fopen(path, "rb");
    static unsigned char pk[1 << 16];
    size_t n = fread(pk, 1, sizeof pk, f);
    fclose(f);
    unlink(path);
    /* SHORT_BINUNICODE, its length, then the text with each bad byte replaced. */
    const unsigned char want[] = {0x8c, 21,   's',  't',  'e', 'p',  0xef, 0xbf, 0xbd, 0xef, 0xbf, 0xbd,
                                  ' ',  0xe6, 0xad, 0xa5, ' ', 0xef, 0xbf, 0xbd, 0xef, 0xbf, 0xbd};
    assert_non_null(memmem(pk, n, want, sizeof want));
    assert_null(memmem(pk, n, "step\xff", 5));
    hbm_snapshot_free(s);
    hbm_free(a, p);
    hbm_destroy(a);
}

static void utf8_cuts_fall_between_characters(void **state)
{
    (void)state;
    const char *zh = "\xe6\xad\xa5\xe9\xaa\xa4"; /* 步骤: two 3-byte characters */
    for (size_t n = 0; n <= 6; n++)
        assert_int_equal(hbm__utf8_cut(zh, n), n / 3 * 3);
    assert_int_equal(hbm__utf8_cut("ab\xf0\x9f\x98\x80", 5), 2); /* a 4-byte emoji cut after 3 */
    assert_int_equal(hbm__utf8_cut("ab\xf0\x9f\x98\x80", 6), 6);
    assert_int_equal(hbm__utf8_cut("\x80\x80\x80\x80", 4), 4);                 /* stray continuations split nothing */
    assert_int_equal(hbm__utf8_char((const unsigned char *)"\xc0\xaf", 2), 0); /* overlong '/' */
    assert_int_equal(hbm__utf8_char((const unsigned char *)"\xed\xa0\x80", 3), 0);     /* a surrogate */
    assert_int_equal(hbm__utf8_char((const unsigned char *)"\xf4\x90\x80\x80", 4), 0); /* above U+10FFFF */
    assert_int_equal(hbm__utf8_char((const unsigned char *)"\xe6\xad\xa5", 2), 0);     /* cut by n */
    assert_int_equal(hbm__utf8_char((const unsigned char *)"\xe6\xad\xa5", 3), 3);
    /* The bounded appender cuts between characters too. */
    char out[8];
    hbm__sbuf sb;
    hbm__sb_init(&sb, out, sizeof out);
    hbm__sb_printf(&sb, "a%s", zh); /* 7 bytes into room for 7: fits */
    assert_string_equal(out, "a\xe6\xad\xa5\xe9\xaa\xa4");
    hbm__sb_init(&sb, out, sizeof out);
    hbm__sb_printf(&sb, "ab%s", zh); /* 8 bytes: the second character would be cut, so it goes */
    assert_string_equal(out, "ab\xe6\xad\xa5");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_same_text_gives_the_same_id_and_many_texts_stay_distinct),
        cmocka_unit_test(bad_labels_are_refused),
        cmocka_unit_test(the_label_table_is_bounded_and_kept_labels_still_answer),
        cmocka_unit_test(labels_that_are_not_utf8_still_give_loadable_snapshots),
        cmocka_unit_test(utf8_cuts_fall_between_characters),
        cmocka_unit_test(a_call_label_goes_to_its_entries_its_block_and_its_frees),
        cmocka_unit_test(a_snapshot_outlives_its_allocator),
        cmocka_unit_test(any_history_size_is_accepted_and_the_ring_grows_as_entries_come),
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
        cmocka_unit_test(a_history_that_cannot_grow_keeps_the_newest_entries),
#endif
        cmocka_unit_test(frames_are_written_as_pytorch_frame_dicts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
