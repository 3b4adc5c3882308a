// The target's header is mostly inline functions; this file holds what needs _GNU_SOURCE
// (struct in_pktinfo, struct in6_pktinfo, IPV6_RECVPKTINFO), kept out of the header on purpose
// (see CEpoll.h).
#define _GNU_SOURCE
#include <sys/socket.h>
#include <netinet/in.h>
#include <string.h>
#include <errno.h>

int bp_udp_enable_pktinfo(int fd, int family) {
    int one = 1;
    if (family == AF_INET6) return setsockopt(fd, IPPROTO_IPV6, IPV6_RECVPKTINFO, &one, sizeof one);
    return setsockopt(fd, IPPROTO_IP, IP_PKTINFO, &one, sizeof one);
}

long bp_udp_recv(int fd, void *buf, unsigned long len, struct sockaddr_storage *from, socklen_t *fromlen,
                 int *ifindex, struct sockaddr_storage *dst) {
    char control[256];
    struct iovec iov = { .iov_base = buf, .iov_len = len };
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_name = from;
    msg.msg_namelen = sizeof *from;
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ssize_t n = recvmsg(fd, &msg, MSG_DONTWAIT);
    if (n < 0) return -1;
    *fromlen = msg.msg_namelen;
    *ifindex = 0;
    memset(dst, 0, sizeof *dst);
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_PKTINFO) {
            struct in_pktinfo info;
            memcpy(&info, CMSG_DATA(c), sizeof info);
            *ifindex = info.ipi_ifindex;
            struct sockaddr_in *d = (struct sockaddr_in *)dst;
            d->sin_family = AF_INET;
            d->sin_addr = info.ipi_addr;
        } else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_PKTINFO) {
            struct in6_pktinfo info;
            memcpy(&info, CMSG_DATA(c), sizeof info);
            *ifindex = (int)info.ipi6_ifindex;
            struct sockaddr_in6 *d = (struct sockaddr_in6 *)dst;
            d->sin6_family = AF_INET6;
            d->sin6_addr = info.ipi6_addr;
        }
    }
    if (msg.msg_flags & MSG_TRUNC) { errno = EMSGSIZE; return -2; }
    return (long)n;
}

long bp_udp_send(int fd, const void *buf, unsigned long len, const struct sockaddr *to, socklen_t tolen, int ifindex,
                 const struct sockaddr_storage *source) {
    char control[64];
    memset(control, 0, sizeof control);
    struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_name = (void *)to;
    msg.msg_namelen = tolen;
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (ifindex > 0) {
        msg.msg_control = control;
        struct cmsghdr *c;
        if (to->sa_family == AF_INET6) {
            msg.msg_controllen = CMSG_SPACE(sizeof(struct in6_pktinfo));
            c = CMSG_FIRSTHDR(&msg);
            c->cmsg_level = IPPROTO_IPV6;
            c->cmsg_type = IPV6_PKTINFO;
            c->cmsg_len = CMSG_LEN(sizeof(struct in6_pktinfo));
            struct in6_pktinfo info;
            memset(&info, 0, sizeof info);
            info.ipi6_ifindex = (unsigned)ifindex;
            if (source && source->ss_family == AF_INET6) info.ipi6_addr = ((const struct sockaddr_in6 *)source)->sin6_addr;
            memcpy(CMSG_DATA(c), &info, sizeof info);
        } else {
            msg.msg_controllen = CMSG_SPACE(sizeof(struct in_pktinfo));
            c = CMSG_FIRSTHDR(&msg);
            c->cmsg_level = IPPROTO_IP;
            c->cmsg_type = IP_PKTINFO;
            c->cmsg_len = CMSG_LEN(sizeof(struct in_pktinfo));
            struct in_pktinfo info;
            memset(&info, 0, sizeof info);
            info.ipi_ifindex = ifindex;
            if (source && source->ss_family == AF_INET) info.ipi_spec_dst = ((const struct sockaddr_in *)source)->sin_addr;
            memcpy(CMSG_DATA(c), &info, sizeof info);
        }
    }
    return (long)sendmsg(fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
}

#include <sched.h>
#include <fcntl.h>
#include <unistd.h>

// Moves the calling thread into the network namespace at `path` (/var/run/netns/NAME): sockets it
// creates afterwards belong to that namespace (tests only: they put an event loop's thread there).
int bp_enter_network_namespace(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = setns(fd, CLONE_NEWNET);
    int saved = errno;
    close(fd);
    errno = saved;
    return rc;
}
