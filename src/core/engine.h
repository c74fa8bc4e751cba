/* engine.h: the caching engine (engine.c): block objects, split and coalesce, segments, release, errors. */
#ifndef HBM_CORE_ENGINE_H
#define HBM_CORE_ENGINE_H

#include "core/types.h"


/* Where hbm_malloc / hbm_free copy a failure's message for the calling thread, under the allocator's lock
 * (devices.c sets it around its calls); NULL: nowhere. */
extern __thread char *hbm__err_sink;
extern __thread size_t hbm__err_sink_len;

/* A new whole segment of `size` bytes on the device: one free block, in no tree. */
hbm_status hbm__segment_new(hbm_allocator *a, hbm__pool *p, hbm_stream stream, size_t size, hbm__block **out);
/* BLOCK_SLAB more block objects on the spare list (engine.c). */
hbm_status hbm__add_slab(hbm_allocator *a);
/* A block object off the spare list, its fields as they were (NULL when host memory ran out). */
static inline hbm__block *hbm__block_take(hbm_allocator *a)
{
    if (__builtin_expect(!a->spare_blocks, 0) && hbm__add_slab(a) != HBM_OK)
        return NULL;
    hbm__block *b = a->spare_blocks;
    a->spare_blocks = b->next;
    a->nspare_blocks--;
    return b;
}
/* The state of a block object that holds nothing yet, but for what hbm__block_blank's caller sets itself. */
static inline void hbm__block_blank(hbm__block *b)
{
    b->node = (hbm__rb){0}; /* free, in no tree: the free side's fields */
    b->gc_base = 0;
    b->allocated = b->in_tree = false;
    b->mapped = true;
    b->event_count = 0;
    b->loose = false;
}
/* A block object off the spare list, blank (NULL when host memory ran out). Inline: every split takes one. */
static inline hbm__block *hbm__block_new(hbm_allocator *a)
{
    hbm__block *b = hbm__block_take(a);
    if (!b)
        return NULL;
    hbm__block_blank(b);
    b->prev = b->next = NULL;
    b->seg = NULL;
    b->stream = 0;
    b->addr = 0;
    b->size = 0;
    return b;
}
void hbm__block_recycle(hbm_allocator *a, hbm__block *b);
/* Cuts the first `size` bytes of b into a new block, linked in before it; b keeps the rest. Trees and statistics
 * are the caller's; a spare block object must be in hand (hbm__ensure_spares). */
static inline hbm__block *hbm__split_front(hbm_allocator *a, hbm__block *b, size_t size)
{
    hbm__block *f = hbm__block_take(a); /* each field set once: the split is on the fast path */
    hbm__block_blank(f);
    f->seg = b->seg;
    f->stream = b->stream;
    f->addr = b->addr;
    f->size = size;
    f->prev = b->prev;
    if (f->prev)
        f->prev->next = f;
    else
        b->seg->head = f;
    f->next = b;
    b->prev = f;
    b->addr += size;
    b->size -= size;
    return f;
}
/* Cuts b at `at` bytes from its start: b keeps the front, a new block (returned, linked in after it) the rest.
 * Trees and statistics are the caller's; a spare block object must be in hand (hbm__ensure_spares). */
static inline hbm__block *hbm__split_back(hbm_allocator *a, hbm__block *b, size_t at)
{
    hbm__block *back = hbm__block_take(a);
    hbm__block_blank(back);
    back->seg = b->seg;
    back->stream = b->stream;
    back->addr = b->addr + at;
    back->size = b->size - at;
    back->prev = b;
    back->next = b->next;
    if (back->next)
        back->next->prev = back;
    b->next = back;
    b->size = at;
    return back;
}
/* Keep n block objects in hand so a split cannot fail half-way. */
hbm_status hbm__ensure_spares(hbm_allocator *a, int n);
/* Merge src into dst when src is a free neighbour in the same mapped state; returns bytes absorbed. */
size_t hbm__try_merge(hbm_allocator *a, hbm__pool *p, hbm__block *dst, hbm__block *src);

/* Whole free segments of the default pools back to the device, no device sync (engine.c): the step plan's region
 * takes their place. */
void hbm__release_cached(hbm_allocator *a);
/* Return a whole-segment free block (in its pool's tree) to the device; on a device error it stays cached. */
hbm_status hbm__release_block(hbm_allocator *a, hbm__block *b);

/* A free block outside every tree, counted as free (a loose one, unlinked), coalesced into its pool's tree
 * (engine.c): the block that holds its range. */
hbm__block *hbm__settle_free(hbm_allocator *a, hbm__block *b);
/* Splices src, a neighbour outside every tree, into dst; returns the bytes absorbed (engine.c). */
size_t hbm__absorb(hbm_allocator *a, hbm__block *dst, hbm__block *src);
/* Release a pool's cached segments (engine.c). */
hbm_status hbm__release_pool(hbm_allocator *a, hbm__pool *p);
/* Free a block whose free was requested and whose events completed (engine.c). */
void hbm__free_block(hbm_allocator *a, hbm__block *b);

/* Round a request as PyTorch's round_size does. */
size_t hbm__round_size(const hbm__conf *c, size_t size);
/* Size of a new segment for a rounded request (get_allocation_size). */
size_t hbm__allocation_size(const hbm__conf *c, size_t size);
/* Apply a memory fraction (0..1) with the lock held. */
hbm_status hbm__set_fraction_locked(hbm_allocator *a, double fraction);
/* Return every segment to the device and free all bookkeeping (hbm_destroy). */
void hbm__engine_teardown(hbm_allocator *a);
/* release_cached_blocks: pending frees waited for, the whole free segments and pages of the default pools and of
 * released private pools back to the device (empty_cache; the OOM retry; a wake that found the device full). */
hbm_status hbm__release_cached_blocks(hbm_allocator *a);
/* Set the last error text (printf-style). */
void hbm__set_error(hbm_allocator *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends text to hbm_warning's (after "; " when there is one already). */
void hbm__warning_add(hbm_allocator *a, const char *text);
/* At a segment change or an OOM: the published record, if any, follows (a device call was just made: the copy is
 * free). Through the pointer io/publish.c sets: the engine names nothing above it. */
static inline void hbm__published(hbm_allocator *a)
{
    if (__builtin_expect(a->pub != NULL, 0))
        a->pub_update(a);
}

#endif
