#include "CMallocStats.h"
#include <malloc.h>

size_t bp_heap_in_use(void) {
    struct mallinfo2 m = mallinfo2();
    return m.uordblks + m.hblkhd;
}
