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
// Bluetooth L2CAP (BlueZ kernel sockets, no libbluetooth; /usr/include/bluetooth need not exist).
// Laid out as the kernel's include/net/bluetooth/l2cap.h and bluetooth.h define them:
//   struct sockaddr_l2 { sa_family_t l2_family; __le16 l2_psm; bdaddr_t l2_bdaddr; __le16 l2_cid; __u8 l2_bdaddr_type; };
//   typedef struct { __u8 b[6]; } __packed bdaddr_t;     (the address byte-reversed: b[0] is its last octet)
//   struct bt_security { __u8 level; __u8 key_size; };
// The static_asserts hold the ABI: 14 bytes, fields at 0, 2, 4, 10, 12.
#define BP_AF_BLUETOOTH 31
#define BP_BTPROTO_L2CAP 0
#define BP_SOL_BLUETOOTH 274
#define BP_BT_SECURITY 4
#define BP_BT_SNDMTU 12
#define BP_BT_RCVMTU 13
#define BP_BDADDR_LE_PUBLIC 1
#define BP_BDADDR_LE_RANDOM 2
struct bp_sockaddr_l2 {
    uint16_t l2_family;    // sa_family_t
    uint16_t l2_psm;       // little-endian
    uint8_t l2_bdaddr[6];  // little-endian (reversed)
    uint16_t l2_cid;       // little-endian
    uint8_t l2_bdaddr_type;
};
_Static_assert(sizeof(struct bp_sockaddr_l2) == 14, "sockaddr_l2 is 14 bytes");
_Static_assert(__builtin_offsetof(struct bp_sockaddr_l2, l2_psm) == 2, "l2_psm at 2");
_Static_assert(__builtin_offsetof(struct bp_sockaddr_l2, l2_bdaddr) == 4, "l2_bdaddr at 4");
_Static_assert(__builtin_offsetof(struct bp_sockaddr_l2, l2_cid) == 10, "l2_cid at 10");
_Static_assert(__builtin_offsetof(struct bp_sockaddr_l2, l2_bdaddr_type) == 12, "l2_bdaddr_type at 12");
struct bp_bt_security { uint8_t level; uint8_t key_size; };
_Static_assert(sizeof(struct bp_bt_security) == 2, "bt_security is 2 bytes");
#endif
