import CEpoll
import Glibc
import Synchronization

/// Listening socket options.
public struct ListenOptions: Sendable {
    /// `listen(2)` backlog.
    public var backlog: Int32 = 1024
    /// `SO_REUSEPORT`: lets one listening socket per loop share the port, so the kernel spreads
    /// new connections over the loops with no acceptor hop.
    public var reusePort = false
    /// `IPV6_V6ONLY` for IPv6 listeners (off: `::` also accepts IPv4-mapped peers).
    public var v6Only = false
    /// How long accepting pauses after `EMFILE`/`ENFILE` (out of descriptors).
    public var descriptorExhaustionPause: Duration = .milliseconds(100)

    public init() {}
}

/// A non-blocking listening TCP socket registered on one loop. Every accepted descriptor is passed
/// to `onAccept` on that loop (already non-blocking, close-on-exec, TCP_NODELAY).
///
/// `EMFILE`/`ENFILE`: level-triggered epoll would report the pending connection again at once and
/// spin, so the listener deregisters itself and re-arms after `descriptorExhaustionPause`.
public final class TCPListener {
    public let loop: EventLoop
    public let fd: Int32
    public let localAddress: SocketAddress
    private let options: ListenOptions
    private var registration: Registration?
    private var pauseTimer: TimerID?
    private var closed = false
    private let onAccept: (Int32, SocketAddress) -> Void
    /// Times accepting was paused for lack of descriptors (for tests and metrics).
    public private(set) var exhaustionPauses = 0

    /// Creates the socket, binds, listens and registers it on `loop`. Must run on `loop`.
    public init(
        address: SocketAddress, options: ListenOptions = ListenOptions(), loop: EventLoop,
        onAccept: @escaping (Int32, SocketAddress) -> Void
    ) throws(IOError) {
        loop.assertInLoop()
        self.loop = loop
        self.options = options
        self.onAccept = onAccept
        let fd = try SocketOps.streamSocket(family: address.family)
        do {
            try SocketOps.setOption(fd, SOL_SOCKET, SO_REUSEADDR, 1)
            if options.reusePort { try SocketOps.setOption(fd, SOL_SOCKET, SO_REUSEPORT, 1) }
            if address.family == AF_INET6 {
                try SocketOps.setOption(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, options.v6Only ? 1 : 0)
            }
            _ = try Syscall.call("bind(\(address))") { address.withSockaddr { bind(fd, $0, $1) } }
            _ = try Syscall.call("listen") { listen(fd, options.backlog) }
            localAddress = try SocketAddress.local(of: fd)
        } catch {
            Syscall.close(fd)
            throw error
        }
        self.fd = fd
        try arm()
    }

    private func arm() throws(IOError) {
        registration = try loop.register(fd: fd, interest: .readable) { [unowned self] _ in self.acceptAll() }
    }

    /// Accepts until the backlog is empty (bounded per wake-up so one busy listener cannot starve
    /// the loop's established connections).
    private func acceptAll() {
        for _ in 0..<256 {
            guard !closed else { return }
            var storage = sockaddr_storage()
            var len = socklen_t(MemoryLayout<sockaddr_storage>.size)
            let result = withUnsafeMutableBytes(of: &storage) { raw in
                Result { () throws(IOError) -> IOResult<Int32> in
                    try Syscall.nonBlocking("accept4") {
                        bp_accept4(fd, raw.baseAddress!.assumingMemoryBound(to: sockaddr.self), &len,
                                Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue))
                    }
                }
            }
            switch result {
            case .success(.wouldBlock):
                return
            case .success(.processed(let client)):
                SocketOps.setNoDelay(client)
                onAccept(client, SocketAddress(storage: storage, length: len))
            case .failure(let error):
                switch error.errno {
                case EMFILE, ENFILE, ENOBUFS, ENOMEM:
                    pauseAccepting()
                    return
                default:
                    // ECONNABORTED, EPROTO, EPERM (firewall): that one connection failed; go on.
                    continue
                }
            }
        }
    }

    private func pauseAccepting() {
        guard let reg = registration else { return }
        exhaustionPauses += 1
        loop.deregister(reg)
        registration = nil
        pauseTimer = loop.scheduleTimer(after: options.descriptorExhaustionPause) { [weak self] in
            guard let self, !self.closed else { return }
            self.pauseTimer = nil
            try? self.arm()
        }
    }

    /// Stops accepting and closes the socket. Idempotent. Must run on the loop.
    public func close() {
        loop.assertInLoop()
        guard !closed else { return }
        closed = true
        if let reg = registration { loop.deregister(reg) }
        if let t = pauseTimer { loop.cancelTimer(t) }
        registration = nil
        Syscall.close(fd)
    }
}
