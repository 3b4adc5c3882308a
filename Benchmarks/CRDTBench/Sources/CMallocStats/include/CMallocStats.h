// Heap accounting for the memory-per-document measurement (docs/PERFORMANCE.md, "CRDT").
// glibc's mallinfo2 is declared in <malloc.h>, which the Swift Glibc module does not export.
#ifndef CMALLOCSTATS_H
#define CMALLOCSTATS_H
#include <stddef.h>

/// Bytes currently handed out by malloc (arena chunks in use + mmapped blocks), chunk headers included.
size_t bp_heap_in_use(void);

#endif
