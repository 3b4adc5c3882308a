#ifndef BIGPEER_CEPOLL_H
#define BIGPEER_CEPOLL_H
// No _GNU_SOURCE here: it changes how glibc headers declare shared types (fd_set's fields), and
// this module must agree with Swift's Glibc module, which includes the same headers without it.
// Glibc's Swift overlay does not expose these headers; this target does.
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <malloc.h>  // malloc_trim: give freed heap back to the kernel (HeapTrim)
#include <fcntl.h>
#include <errno.h>
#include <unistd.h>
#include <signal.h>
#include <sys/prctl.h>

// Names the calling thread (at most 15 characters), for thread dumps; prctl is variadic, which
// Swift cannot call.
static inline int bp_set_thread_name(const char *name) {
    return prctl(PR_SET_NAME, (unsigned long)name, 0, 0, 0);
}

// epoll_event is packed on x86_64; Swift mis-sizes packed structs, so access it through C.
static inline int bp_epoll_ctl(int epfd, int op, int fd, uint32_t events, uint64_t data) {
    struct epoll_event ev;
    ev.events = events;
    ev.data.u64 = data;
    return epoll_ctl(epfd, op, fd, &ev);
}

// Waits and copies results into two plain arrays (events, data) so Swift never touches the packed struct.
static inline int bp_epoll_wait(int epfd, uint32_t *events, uint64_t *data, int max, int timeout_ms) {
    struct epoll_event evs[256];
    if (max > 256) max = 256;
    int n = epoll_wait(epfd, evs, max, timeout_ms);
    for (int i = 0; i < n; i++) { events[i] = evs[i].events; data[i] = evs[i].data.u64; }
    return n;
}

static inline int bp_errno(void) { return errno; }

// accept4 is a GNU extension: declared by hand instead of defining _GNU_SOURCE (see above).
extern int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags);
static inline int bp_accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags) { return accept4(fd, addr, len, flags); }
// UDP with the packet's interface (CEpoll.c: needs _GNU_SOURCE, which this header must not set).
// bp_udp_enable_pktinfo: IP_PKTINFO / IPV6_RECVPKTINFO on. bp_udp_recv: one datagram with the
// index of the interface it arrived on and its destination address (-1 and errno on failure, -2
// when it was truncated). bp_udp_send: leaves by interface `ifindex` (0: the kernel's choice),
// from `source` when given (an address of that interface).
int bp_udp_enable_pktinfo(int fd, int family);
long bp_udp_recv(int fd, void *buf, unsigned long len, struct sockaddr_storage *from, socklen_t *fromlen,
                 int *ifindex, struct sockaddr_storage *dst);
int bp_enter_network_namespace(const char *path);
long bp_udp_send(int fd, const void *buf, unsigned long len, const struct sockaddr *to, socklen_t tolen, int ifindex,
                 const struct sockaddr_storage *source);
#endif
