/*
 * trace.h: one in-memory event list for every trace format. Importers fill
 * it; replay feeds it to the public API. Ids are resolved to dense slots at
 * read time so replay needs no hashing.
 */
#ifndef HBM_TOOLS_TRACE_H
#define HBM_TOOLS_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "hbmalloc.h"
#include "u64map.h"

/* EV_PENDING: the block is freed while other streams still use it (PyTorch's free_requested of a block with
 * record_stream uses); its EV_FREE, later, is when that use completed (free_completed), and carries `pended`.
 * EV_SLEEP / EV_WAKE: a tagged private pool put to sleep / woken (hbm_pool_sleep, hbm_pool_wake; docs/SLEEP.md).
 * EV_POOL: the allocations that follow go into a private pool (hbm_mempool_begin_thread), or back to the default
 * pools. */
typedef enum trace_kind {
    EV_ALLOC = 0,
    EV_FREE = 1,
    EV_EMPTY_CACHE = 2,
    EV_STEP = 3,
    EV_PENDING = 4,
    EV_SLEEP = 5,
    EV_WAKE = 6,
    EV_POOL = 7
} trace_kind;

/* 24 bytes: a trace of N bytes holds up to N/2 events (a text line "e" is two bytes), and the readers keep their
 * memory under 16 bytes per input byte (docs/RELIABILITY.md). */
typedef struct trace_event {
    uint64_t size;      /* EV_ALLOC: bytes requested; EV_SLEEP / EV_WAKE: the pool's bytes the recording gave back /
                            mapped again (0: not said) */
    hbm_stream stream;  /* EV_ALLOC: stream; EV_SLEEP / EV_WAKE / EV_POOL: the pool, an index in t->pools + 1 (0: the
                            default pools; a sleep or wake of pool 0 is one the trace cannot place: drawn, not
                            replayed) */
    uint32_t slot : 28; /* EV_ALLOC / EV_FREE / EV_PENDING: dense index of the block's id (TRACE_MAX_SLOTS);
                            EV_SLEEP / EV_WAKE: the pool's tag, an index in t->meta.texts (0: not said; trace_tag) */
    uint32_t kind : 3;
    uint32_t pended : 1; /* EV_FREE: the block's free was requested earlier (EV_PENDING): this completes it;
                            EV_SLEEP / EV_WAKE: the pool keeps a backup (its live bytes copied to host memory and
                            back) */
    uint32_t line;       /* source line, for messages */
} trace_event;

/* A private pool the trace names (text traces: `u`, `z`, `w`), by its number in the trace. */
typedef struct trace_pool {
    uint64_t number; /* as the trace writes it */
    uint32_t tag;    /* its tag (t->meta.texts), from its sleeps and wakes; 0: never slept (an untagged pool) */
    int backup;
    uint32_t line; /* where the trace gives its tag (else where it first names it) */
} trace_pool;

#define TRACE_MAX_SLOTS ((size_t)1 << 28) /* blocks live at once: more is refused as out of host memory */
/* No device has more bytes: a larger size (or sum of sizes on one device) in a file or a log is refused. */
#define TRACE_MAX_BYTES (1ll << 48)

/* The state a recording began in (PyTorch snapshots whose history starts mid-run), worked back from the
 * snapshot's segments at the end through the history: the segments reserved and the blocks live then. */
typedef struct trace_seed_block {
    uint64_t offset; /* from its segment's start */
    uint64_t size;   /* the block (rounded) */
    uint64_t requested;
    uint32_t slot; /* its slot in the events */
} trace_seed_block;

typedef struct trace_seed_segment {
    uint64_t size;
    hbm_stream stream;
    int small;         /* the small pool's (2 MiB) */
    uint32_t first, n; /* its blocks in seed_blocks, by offset */
} trace_seed_segment;

/* What the recording allocator itself did, when the trace says (PyTorch snapshots). */
typedef struct trace_recorded {
    int present;            /* segment events were in the trace */
    int64_t peak_reserved;  /* its peak reserved bytes over the trace */
    int64_t end_reserved;   /* reserved at the end (sum of the snapshot's segments) */
    int64_t start_reserved; /* reserved when the recording began (end minus the segment events) */
    uint64_t segments_end;
    int device; /* the snapshot's device read (named, or its only one) */
    int has_settings;
    char settings[400];         /* what it ran: from the snapshot's parsed allocator_settings fields */
    char settings_raw[256];     /* the PYTORCH_CUDA_ALLOC_CONF string it recorded */
    char settings_dropped[256]; /* entries of that string not applied: settings read from a file never name files */
    uint64_t preexisting;       /* blocks live when recording began: the first `preexisting` events allocate them */
    uint64_t freed_preexisting; /* of those, freed during the recording */
    uint64_t skipped_frees;     /* frees of blocks the history cannot place (not replayable) */
    uint64_t oom_events;
    uint64_t releases; /* runs of segment frees that released every cached segment: replayed as empty_cache */
    /* The start state, when it could be worked out (nseed_segments > 0 or start_reserved == 0). */
    trace_seed_segment *seed_segments;
    size_t nseed_segments;
    trace_seed_block *seed_blocks;
    size_t nseed_blocks;
    int seedable;         /* the start state is complete: a replay can begin from it */
    int blind;            /* the history records allocations but no segment events: the start is unknown */
    char start_note[300]; /* why not, when not */
    /* An hbmalloc snapshot's memory outside hbmalloc when it was taken (src/io/snapshot.c: device_used_bytes,
     * outside_bytes, outside_process_bytes, outside_others_bytes; -1: unknown); has_outside: the keys were there. */
    int has_outside;
    int64_t device_used, outside, outside_process, outside_others;
} trace_recorded;

/* What a recording says about its events besides what replay needs (trace_meta.c): when each happened and each
 * allocation's stack. Events past n, and events it says nothing of, read 0 / NULL. */
typedef struct trace_meta {
    uint64_t *time_us; /* per event: microseconds since the epoch (PyTorch snapshots' time_us), 0: not said */
    uint32_t *stack;   /* per event: an index into texts, 0: none */
    size_t n, cap;     /* events covered */
    int any_time, any_stack;
    char **texts; /* the distinct stacks: frames innermost first, "name\tfile\tline" joined by '\n' */
    size_t ntexts, cap_texts;
    u64map index;     /* a stack's hash -> its index */
    size_t scanned;   /* characters of stack text read to intern them: readers intern a stack once per distinct
                          frames, not once per allocation (the tests' measure of the work) */
    uint64_t dropped; /* frames lists whose stack was not kept: the stack text built passed the readers' bound */
} trace_meta;

typedef struct trace {
    trace_event *ev;
    size_t n, cap;
    size_t nslots;                   /* slots needed: the most blocks live at once */
    size_t nstreams;                 /* distinct streams seen */
    uint64_t allocs, frees, pending; /* pending: EV_PENDING events */
    uint64_t sleeps, wakes;          /* EV_SLEEP, EV_WAKE events */
    uint64_t unplaced;               /* of them, those of a pool the trace does not name (drawn, not replayed) */
    trace_pool *pools;               /* the private pools the trace names: pool k + 1 of the events is pools[k] */
    size_t npools;
    const char *format; /* "hbmtrace", "pytorch-snapshot", "rmm-csv", "lifetimes-csv" */
    size_t bytes;       /* of the file read (trace_read_any): what the memory bound of docs/RELIABILITY.md is for */
    trace_recorded rec;
    trace_meta meta;
} trace;

/* Event i's time and stack (an allocation's frames, as hbm_label_intern takes them). 0, or -1 when host memory ran
 * out. */
int trace_meta_set(trace *t, size_t i, uint64_t time_us, const char *stack);
/* A stack kept once however many events name it: its index in texts, or 0 when host memory ran out. */
uint32_t trace_meta_intern(trace *t, const char *stack);
/* Event i's time and stack by index (trace_meta_intern's, 0: none). 0, or -1 when host memory ran out. */
int trace_meta_set_index(trace *t, size_t i, uint64_t time_us, uint32_t stack);
uint64_t trace_time(const trace *t, size_t i);
/* An EV_SLEEP / EV_WAKE event's tag ("" when the trace does not say). */
const char *trace_tag(const trace *t, const trace_event *e);
const char *trace_stack(const trace *t, size_t i);
void trace_meta_free(trace_meta *m);

/* Builds a trace from (key, event) pairs, resolving keys (ids, addresses) to slots. */
typedef struct trace_builder trace_builder;
trace_builder *tb_new(trace *t);
/* A builder whose keys are 0 .. nkeys-1 (row numbers): 8 bytes a key instead of a hash table's 34 or more. */
trace_builder *tb_new_dense(trace *t, size_t nkeys);
/* 0, or -1 (key already live: *line_of_live gets its line) or -2 (out of memory). */
int tb_alloc(trace_builder *b, uint64_t key, uint64_t size, hbm_stream stream, uint32_t line, uint32_t *line_of_live);
/* 0, or -1 (key not live) or -2 (out of memory). */
int tb_free(trace_builder *b, uint64_t key, uint32_t line);
/* The free of a live key requested while other streams use it (it stays live until tb_free): 0, or -1 (key not
 * live), -2 (out of memory) or -3 (its free was requested already). */
int tb_pending(trace_builder *b, uint64_t key, uint32_t line);
int tb_is_live(trace_builder *b, uint64_t key);
/* Hash cells looked at so far (the resource test: a small multiple of the operations, whatever the keys). */
size_t tb_probes(const trace_builder *b);
int tb_empty_cache(trace_builder *b, uint32_t line);
int tb_step(trace_builder *b, uint32_t line);
/* A pool's sleep (wake 0) or wake (1): pool as EV_SLEEP's stream (0: not said), tag an index in t->meta.texts (0: not
 * said; then backup 0 means not said either). 0 or -2. */
int tb_nap(trace_builder *b, int wake, uint32_t pool, uint64_t bytes, uint32_t tag, int backup, uint32_t line);
/* The allocations that follow go into pool (0: the default pools). 0 or -2. */
int tb_pool(trace_builder *b, uint32_t pool, uint32_t line);
void tb_finish(trace_builder *b); /* frees the builder; the trace keeps the events */

void trace_init(trace *t);
void trace_free(trace *t);
/* Read hbmalloc's text format (docs/TRACE_FORMAT.md). Returns 0, or -1 with
 * "path:line:column: message" in err. */
int trace_read_text(const char *path, trace *t, char *err, size_t errlen);
int trace_read_text_mem(const char *name, const char *data, size_t len, trace *t, char *err, size_t errlen);
/* A snapshot's device when none is named: its only one. One of several is not guessed: the message lists them
 * ("devices: 0, 1") and asks for --device. */
#define TRACE_DEVICE_ANY (-1)
/* A PyTorch memory snapshot pickle (device's history; device 0-63, or TRACE_DEVICE_ANY). */
int trace_read_pickle_mem(const char *name, const unsigned char *data, size_t len, int device, trace *t, char *err,
                          size_t errlen);
/* The same snapshot as JSON (hbm_snapshot_save's HBM_SNAPSHOT_JSON; json.dump of torch.cuda.memory._snapshot()). */
int trace_read_json_mem(const char *name, const unsigned char *data, size_t len, int device, trace *t, char *err,
                        size_t errlen);
/* RMM logging_resource_adaptor CSV (Thread,Time,Action,Pointer,Size,Stream). */
int trace_read_rmm_mem(const char *name, const char *data, size_t len, trace *t, char *err, size_t errlen);
/* Tensor-lifetime CSV (id,lower,upper,size[,...]): allocation at lower, free at upper. */
int trace_is_lifetimes(const char *data, size_t len);
int trace_read_lifetimes_mem(const char *name, const char *data, size_t len, trace *t, char *err, size_t errlen);
/* Any supported format, told apart by content; an empty, compressed or binary file is refused with what it is and
 * what to do. device: a snapshot's (TRACE_DEVICE_ANY: its only one); other formats have one device. */
int trace_read_any(const char *path, int device, trace *t, char *err, size_t errlen);
/* Text lines end in LF, CRLF or a CR alone (every reader: a CR never drops the rest of its line). The start of the
 * next line after p. */
const char *trace_next_line(const char *p, const char *end);
/* 3 when data begins with a UTF-8 byte order mark (read as nothing), else 0. */
size_t trace_bom(const char *data, size_t len);
/* What an open file is when it is no file to read ("a directory", "a device": /dev/zero never ends, "a socket"),
 * NULL for a regular file or a pipe. */
const char *trace_not_a_file(int fd);
/* Read a whole file (bounded); 0 or -1 with a message. */
int trace_slurp(const char *path, unsigned char **data, size_t *len, char *err, size_t errlen);

#endif
