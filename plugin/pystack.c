/*
 * pystack.c: the label of an allocation made by the framework: the Python call
 * stack (PyTorch's _record_memory_history(stacks="python")) and the helper's
 * label() category, as an hbmalloc label (frames innermost first, each
 * "name<TAB>filename<TAB>line"; the category first, as a frame of its own).
 *
 * The CPython API is looked up in the process at run time (dlsym), so the
 * plug-in links no libpython and works where there is no Python (no stacks
 * then). As PyTorch's CapturedTraceback does, the stack is taken outside the
 * allocator's lock, with the GIL taken for the walk. Stacks are cached by
 * their frames' (code object, line): a hit costs the GIL, the walk and a hash;
 * the text is built once per distinct stack. Cached code objects are held
 * (a reference each), so an address in the cache always means the same code.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "torch_plugin.h"
#include "util.h"

#define MAX_FRAMES 64
#define MAX_CACHED 65536 /* distinct stacks kept; past it, a stack's text is built on every call */
#define DEV_IDS 4        /* label ids kept per cached stack, for this many devices */

/* ---- the CPython API, found at run time ---- */

typedef struct py_api {
    int (*IsInitialized)(void);
    int (*IsFinalizing)(void);
    int (*GILState_Ensure)(void);
    void *(*GILState_GetThisThreadState)(void);
    void (*GILState_Release)(int);
    void *(*Eval_GetFrame)(void);   /* borrowed */
    void *(*Frame_GetBack)(void *); /* new reference (3.9+) */
    void *(*Frame_GetCode)(void *); /* new reference (3.9+) */
    int (*Frame_GetLineNumber)(void *);
    void *(*Object_GetAttrString)(void *, const char *);
    const char *(*Unicode_AsUTF8)(void *);
    void (*IncRef)(void *);
    void (*DecRef)(void *);
    void (*Err_Clear)(void);
} py_api;

static py_api py;
static bool py_ok;
static pthread_once_t py_once = PTHREAD_ONCE_INIT;

static void py_load(void)
{
    void *h = RTLD_DEFAULT;
#define GET(field, name) *(void **)&py.field = dlsym(h, name)
    GET(IsInitialized, "Py_IsInitialized");
    GET(IsFinalizing, "Py_IsFinalizing");
    if (!py.IsFinalizing)
        GET(IsFinalizing, "_Py_IsFinalizing"); /* before 3.13 */
    GET(GILState_Ensure, "PyGILState_Ensure");
    GET(GILState_GetThisThreadState, "PyGILState_GetThisThreadState");
    GET(GILState_Release, "PyGILState_Release");
    GET(Eval_GetFrame, "PyEval_GetFrame");
    GET(Frame_GetBack, "PyFrame_GetBack");
    GET(Frame_GetCode, "PyFrame_GetCode");
    GET(Frame_GetLineNumber, "PyFrame_GetLineNumber");
    GET(Object_GetAttrString, "PyObject_GetAttrString");
    GET(Unicode_AsUTF8, "PyUnicode_AsUTF8");
    GET(IncRef, "Py_IncRef");
    GET(DecRef, "Py_DecRef");
    GET(Err_Clear, "PyErr_Clear");
#undef GET
    py_ok = py.IsInitialized && py.GILState_Ensure && py.GILState_GetThisThreadState && py.GILState_Release &&
            py.Eval_GetFrame && py.Frame_GetBack && py.Frame_GetCode && py.Frame_GetLineNumber &&
            py.Object_GetAttrString && py.Unicode_AsUTF8 && py.IncRef && py.DecRef && py.Err_Clear;
}

/* ---- switches and the per-thread category ---- */

static volatile int stacks_on;
static __thread char *thread_label; /* label(): the category of this thread's allocations */

void hbm_torch__stacks_enable(int on)
{
    if (on)
        pthread_once(&py_once, py_load);
    stacks_on = on && py_ok;
}

HBM_TORCH_EXPORT int hbm_torch_set_label(const char *name);
HBM_TORCH_EXPORT const char *hbm_torch_get_label(void);
HBM_TORCH_EXPORT int hbm_torch_stacks_available(void);

/* The category of the calling thread's allocations (NULL or "" clears it). */
HBM_TORCH_EXPORT int hbm_torch_set_label(const char *name)
{
    char *copy = NULL;
    if (name && *name) {
        size_t n = strlen(name);
        if (n > 4096 || !(copy = malloc(n + 1)))
            return -1;
        for (size_t i = 0; i <= n; i++) /* the label format's separators cannot occur inside a frame */
            copy[i] = name[i] == '\n' || name[i] == '\t' ? ' ' : name[i];
    }
    free(thread_label);
    thread_label = copy;
    return 0;
}

HBM_TORCH_EXPORT const char *hbm_torch_get_label(void) { return thread_label ? thread_label : ""; }

/* 1 when Python stacks can be taken in this process. */
HBM_TORCH_EXPORT int hbm_torch_stacks_available(void)
{
    pthread_once(&py_once, py_load);
    return py_ok && py.IsInitialized();
}

/* ---- the stack cache ---- */

typedef struct stack {
    uint64_t hash;
    int nframes;
    void *code[MAX_FRAMES]; /* held references */
    int line[MAX_FRAMES];
    char *category; /* thread_label when taken, part of the key */
    char *text;
    int dev[DEV_IDS]; /* device + 1, 0: empty */
    hbm_label id[DEV_IDS];
} stack;

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static stack **slots;
static size_t nslots, ncached;

static uint64_t mix(uint64_t h, uint64_t v) { return (h ^ v) * 0x100000001b3ull; }

static bool same(const stack *s, uint64_t hash, void *const *code, const int *line, int n, const char *category)
{
    if (s->hash != hash || s->nframes != n || memcmp(s->code, code, (size_t)n * sizeof *code) ||
        memcmp(s->line, line, (size_t)n * sizeof *line))
        return false;
    return (!s->category && !category) || (s->category && category && !strcmp(s->category, category));
}

/* A frame's text field: the attribute as UTF-8, tabs and newlines blanked. */
static void put_attr(hbm__sbuf *sb, void *code, const char *attr)
{
    void *o = py.Object_GetAttrString(code, attr);
    const char *u = o ? py.Unicode_AsUTF8(o) : NULL;
    if (!u)
        py.Err_Clear();
    for (const char *c = u ? u : "?"; *c; c++)
        hbm__sb_printf(sb, "%c", *c == '\t' || *c == '\n' ? ' ' : *c);
    if (o)
        py.DecRef(o);
}

static char *build_text(void *const *code, const int *line, int n, const char *category)
{
    size_t cap = (size_t)n * 1000 + (category ? strlen(category) : 0) + 64; /* within HBM_LABEL_MAX */
    char *buf = malloc(cap);
    if (!buf)
        return NULL;
    hbm__sbuf sb;
    hbm__sb_init(&sb, buf, cap);
    if (category)
        hbm__sb_printf(&sb, "%s", category);
    for (int i = 0; i < n; i++) {
        if (sb.len)
            hbm__sb_printf(&sb, "\n");
        put_attr(&sb, code[i], "co_name");
        hbm__sb_printf(&sb, "\t");
        put_attr(&sb, code[i], "co_filename");
        hbm__sb_printf(&sb, "\t%d", line[i]);
    }
    return buf;
}

static int cache_grow(void)
{
    size_t n = nslots ? nslots * 2 : 1024;
    stack **s = calloc(n, sizeof *s);
    if (!s)
        return -1;
    for (size_t i = 0; i < nslots; i++)
        if (slots[i]) {
            size_t j = slots[i]->hash & (n - 1);
            while (s[j])
                j = (j + 1) & (n - 1);
            s[j] = slots[i];
        }
    free(slots);
    slots = s;
    nslots = n;
    return 0;
}

/* The label id of a stack on allocator a (device d), interning its text the first time. GIL held. */
static hbm_label label_of(hbm_allocator *a, int device, void *const *code, const int *line, int n, const char *category)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < n; i++)
        h = mix(mix(h, (uint64_t)(uintptr_t)code[i]), (uint64_t)line[i]);
    for (const char *c = category; c && *c; c++)
        h = mix(h, (unsigned char)*c);
    hbm_label id = 0;
    pthread_mutex_lock(&cache_lock);
    stack *s = NULL;
    size_t j = 0;
    if (nslots) {
        for (j = h & (nslots - 1); slots[j]; j = (j + 1) & (nslots - 1))
            if (same(slots[j], h, code, line, n, category)) {
                s = slots[j];
                break;
            }
    }
    if (s) {
        for (int k = 0; k < DEV_IDS; k++)
            if (s->dev[k] == device + 1) {
                id = s->id[k];
                break;
            }
        if (!id && hbm_label_intern(a, s->text, &id) == HBM_OK)
            for (int k = 0; k < DEV_IDS; k++)
                if (!s->dev[k]) {
                    s->dev[k] = device + 1;
                    s->id[k] = id;
                    break;
                }
        pthread_mutex_unlock(&cache_lock);
        return id;
    }
    char *text = build_text(code, line, n, category);
    if (!text) {
        pthread_mutex_unlock(&cache_lock);
        return 0;
    }
    if (hbm_label_intern(a, text, &id) != HBM_OK)
        id = 0;
    if (ncached < MAX_CACHED && ((ncached + 1) * 2 <= nslots || cache_grow() == 0) && (s = calloc(1, sizeof *s))) {
        s->hash = h;
        s->nframes = n;
        memcpy(s->code, code, (size_t)n * sizeof *code);
        memcpy(s->line, line, (size_t)n * sizeof *line);
        for (int i = 0; i < n; i++)
            py.IncRef(code[i]);
        s->category = category ? strdup(category) : NULL;
        s->text = text;
        s->dev[0] = device + 1;
        s->id[0] = id;
        for (j = h & (nslots - 1); slots[j];)
            j = (j + 1) & (nslots - 1);
        slots[j] = s;
        ncached++;
    } else {
        free(text);
    }
    pthread_mutex_unlock(&cache_lock);
    return id;
}

/* The thread's category alone (stacks off, or no Python on this thread). */
static hbm_label category_label(hbm_allocator *a)
{
    hbm_label id = 0;
    if (thread_label && hbm_label_intern(a, thread_label, &id) != HBM_OK)
        id = 0;
    return id;
}

hbm_label hbm_torch__call_label(hbm_allocator *a, int device)
{
    /* A thread Python never ran on (torch's autograd and NCCL threads) has no frames: no GIL for it. */
    if (!stacks_on || !py.IsInitialized() || (py.IsFinalizing && py.IsFinalizing()) ||
        !py.GILState_GetThisThreadState())
        return category_label(a);
    int gil = py.GILState_Ensure();
    void *code[MAX_FRAMES];
    int line[MAX_FRAMES], n = 0;
    void *f = py.Eval_GetFrame();
    if (f)
        py.IncRef(f);
    while (f && n < MAX_FRAMES) {
        code[n] = py.Frame_GetCode(f);
        line[n] = py.Frame_GetLineNumber(f);
        n++;
        void *back = py.Frame_GetBack(f);
        py.DecRef(f);
        f = back;
    }
    if (f)
        py.DecRef(f);
    hbm_label id = n || thread_label ? label_of(a, device, code, line, n, thread_label) : 0;
    for (int i = 0; i < n; i++)
        py.DecRef(code[i]);
    py.GILState_Release(gil);
    return id;
}
