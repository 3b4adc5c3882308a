#ifndef C_ATOMIC_COUNTERS_H
#define C_ATOMIC_COUNTERS_H
// Relaxed atomic operations on plain uint64_t cells, for metrics: Swift's `Atomic` cannot live in
// an array, and a metric family is a contiguous array of cells allocated once. Relaxed ordering:
// a scrape needs each cell's value, not an order between cells.
#include <stdint.h>

static inline void bp_cell_add(uint64_t *cell, uint64_t value) {
    __atomic_fetch_add(cell, value, __ATOMIC_RELAXED);
}

// For a cell only one thread writes (a loop's own shard): a plain load and store, no locked
// instruction; readers on other threads still see whole values.
static inline void bp_cell_add_owned(uint64_t *cell, uint64_t value) {
    __atomic_store_n(cell, __atomic_load_n(cell, __ATOMIC_RELAXED) + value, __ATOMIC_RELAXED);
}

static inline void bp_cell_store(uint64_t *cell, uint64_t value) {
    __atomic_store_n(cell, value, __ATOMIC_RELAXED);
}

static inline uint64_t bp_cell_load(const uint64_t *cell) {
    return __atomic_load_n(cell, __ATOMIC_RELAXED);
}

#endif
