// Thread naming and scheduling requests, for the event loops (Sockets) and the evaluation
// threads (DQL): prctl and syscall are variadic, which Swift cannot call.
#pragma once
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/resource.h>  // getpriority
#include <sys/syscall.h>   // SYS_sched_setattr
#include <unistd.h>

// Names the calling thread (at most 15 characters), for thread dumps and /proc/PID/task/*/comm.
static inline int bp_set_thread_name(const char *name) {
    return prctl(PR_SET_NAME, (unsigned long)name, 0, 0, 0);
}

// Asks the scheduler for a time slice of `nanoseconds` for the calling thread (sched_setattr(2),
// policy SCHED_OTHER, nice unchanged); 0 asks for the kernel's default again. On Linux 6.12 and
// later (EEVDF) a waking task whose slice is shorter than the running task's preempts it at once
// instead of waiting for that task's slice to run out. Older kernels accept and ignore it; a
// kernel without sched_setattr returns -1 with ENOSYS. glibc has no wrapper, hence the syscall.
// Threads inherit the slice of the thread that creates them.
struct bp_sched_attr {
    uint32_t size;
    uint32_t sched_policy;
    uint64_t sched_flags;
    int32_t sched_nice;
    uint32_t sched_priority;
    uint64_t sched_runtime;
    uint64_t sched_deadline;
    uint64_t sched_period;
};
static inline int bp_thread_request_slice(uint64_t nanoseconds) {
    struct bp_sched_attr attr = {0};
    attr.size = sizeof(attr);
    attr.sched_policy = 0;  // SCHED_OTHER
    attr.sched_nice = getpriority(PRIO_PROCESS, 0);
    attr.sched_runtime = nanoseconds;
    return (int)syscall(SYS_sched_setattr, 0, &attr, 0);
}

