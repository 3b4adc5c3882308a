import CEpoll
import Glibc

/// A listening SEQPACKET socket (L2CAP or the AF_UNIX stand-in) registered on one loop; each
/// accepted descriptor (non-blocking, close-on-exec) goes to `onAccept` on that loop.
///
/// An L2CAP listener bound with PSM 0 gets a dynamic PSM from the kernel: `psm` is the one to
/// publish (advertisement service data, the GATT PSM characteristic).
public final class PacketListener {
    public let loop: EventLoop
    public let fd: Int32
    public let address: PacketLinkAddress
    /// The PSM the channel listens on (L2CAP; nil for the stand-in).
    public let psm: UInt16?
    private var registration: Registration?
    private var closed = false
    private let onAccept: (Int32) -> Void

    /// Creates the socket, binds, listens and registers it on `loop`. Must run on `loop`.
    public init(address: PacketLinkAddress, options: PacketSocketOptions = PacketSocketOptions(), loop: EventLoop,
                onAccept: @escaping (Int32) -> Void) throws(PacketSocketError) {
        loop.assertInLoop()
        self.loop = loop
        self.address = address
        self.onAccept = onAccept
        let fd = try PacketSockets.open(for: address, options: options)
        do {
            if case .unixStandIn(let path) = address { unlink(path) }
            _ = try Syscall.call("bind(\(address))") { PacketSockets.withSockaddr(address) { bind(fd, $0, $1) } }
            _ = try Syscall.call("listen") { listen(fd, 64) }
        } catch {
            Syscall.close(fd)
            if case .l2cap = address { throw PacketSockets.classify(error) }
            throw .io(error)
        }
        self.fd = fd
        if case .l2cap = address { psm = PacketSockets.boundL2CAPAddress(of: fd)?.psm } else { psm = nil }
        do {
            registration = try loop.register(fd: fd, interest: .readable) { [weak self] _ in self?.acceptAll() }
        } catch {
            Syscall.close(fd)
            throw .io(error)
        }
    }

    private func acceptAll() {
        while registration != nil {
            let fd = bp_accept4(self.fd, nil, nil, Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue))
            guard fd >= 0 else {
                let e = bp_errno()
                if e == EMFILE || e == ENFILE { pauseAccepting() }  // level-triggered epoll would spin
                return  // EAGAIN, or a connection that died in the backlog
            }
            onAccept(fd)
        }
    }

    /// Out of descriptors: stop watching for 100 ms (as `TCPListener` does).
    private func pauseAccepting() {
        guard let registration else { return }
        loop.deregister(registration)
        self.registration = nil
        loop.scheduleTimer(after: .milliseconds(100)) { [weak self] in
            guard let self, !self.closed else { return }
            self.registration = try? self.loop.register(fd: self.fd, interest: .readable) { [weak self] _ in self?.acceptAll() }
        }
    }

    public func close() {
        guard !closed else { return }
        closed = true
        if let registration { loop.deregister(registration) }
        registration = nil
        Syscall.close(fd)
        if case .unixStandIn(let path) = address { unlink(path) }
    }
}
