/*
 * fake_memory.h: where device memory is, for the fake runtimes (fake_cuda.c, fake_acl.c): plain allocations, mapped
 * pages and pinned host buffers. Included by each after its state F, which has allocs[] (p, size), maps[] (va,
 * size, h), handles[] (mem) and hosts[] (p, size) of MAX entries; FM_HANDLE(h) is the handles[] index of a map's h.
 */
#ifndef HBM_FAKE_MEMORY_H
#define HBM_FAKE_MEMORY_H

#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

/* A physical handle's bytes: anonymous mapped memory, zero and costing no host memory until written, as a device's
 * page costs the test nothing it does not touch. (calloc gives that only while glibc serves it by mmap; once a few
 * large blocks are freed its threshold rises, and calloc takes them from the heap and zeroes them: 16% of the window
 * explorer's time, issue #38 item 8.) */
static inline unsigned char *handle_bytes(size_t size)
{
    void *p = mmap(NULL, size ? size : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static inline void handle_bytes_free(unsigned char *p, size_t size)
{
    if (p)
        munmap(p, size ? size : 1);
}

/* The pinned host buffer that holds [p, p + n), or -1. */
static long host_slot(uintptr_t p, size_t n)
{
    for (int i = 0; i < MAX; i++) {
        uintptr_t b = (uintptr_t)F.hosts[i].p;
        if (b && p >= b && n <= F.hosts[i].size && p - b <= F.hosts[i].size - n)
            return i;
    }
    return -1;
}

/* The bytes of device range [va, va + n) to or from host memory: an allocated block is host memory here, a mapped
 * page its handle's. -1 when part of it is neither allocated nor mapped. */
static int device_bytes(uintptr_t va, unsigned char *host, size_t n, int to_host)
{
    for (int i = 0; i < MAX; i++) {
        uintptr_t p = (uintptr_t)F.allocs[i].p;
        if (p && va >= p && va + n <= p + F.allocs[i].size) {
            to_host ? memcpy(host, (void *)va, n) : memcpy((void *)va, host, n);
            return 0;
        }
    }
    while (n) {
        int hit = -1;
        for (int i = 0; i < MAX && hit < 0; i++)
            if (F.maps[i].size && va >= F.maps[i].va && va < F.maps[i].va + F.maps[i].size)
                hit = i;
        if (hit < 0)
            return -1;
        size_t off = va - F.maps[hit].va, take = F.maps[hit].size - off < n ? F.maps[hit].size - off : n;
        unsigned char *mem = F.handles[FM_HANDLE(F.maps[hit].h)].mem + off;
        to_host ? memcpy(host, mem, take) : memcpy(mem, host, take);
        va += take, host += take, n -= take;
    }
    return 0;
}

/* [lo, hi) is inside one allocation, or mapped throughout (possibly by several mappings in a row). */
static int allocated(uintptr_t lo, uintptr_t hi)
{
    for (int i = 0; i < MAX; i++) {
        uintptr_t p = (uintptr_t)F.allocs[i].p;
        if (p && lo >= p && hi <= p + F.allocs[i].size)
            return 1;
    }
    for (uintptr_t at = lo; at < hi;) {
        int hit = 0;
        for (int i = 0; i < MAX && !hit; i++)
            if (F.maps[i].size && at >= F.maps[i].va && at < F.maps[i].va + F.maps[i].size) {
                at = F.maps[i].va + F.maps[i].size;
                hit = 1;
            }
        if (!hit)
            return 0;
    }
    return 1;
}

#endif
