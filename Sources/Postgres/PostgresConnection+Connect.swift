import CLibPQ
import Glibc
import Sockets

extension PostgresConnection {
    // MARK: - Connect

    /// Opens a session without blocking the loop: `PQconnectStartParams` on a thread of its own
    /// (`BlockingCall`: it looks the first host's name up with the blocking `getaddrinfo`, which
    /// held the event loop — and every connection on it — for as long as DNS took), then
    /// `PQconnectPoll` driven by the loop's epoll, with `configuration.connectTimeout` enforced by
    /// a loop timer. (A later host of a multi-host URL is looked up by `PQconnectPoll` on the
    /// loop: only when the first one failed.)
    public static func connect(_ configuration: PostgresConfiguration, on loop: EventLoop) async throws -> PostgresConnection {
        let conn = PostgresConnection(loop: loop)
        let params = configuration.effectiveParameters
        let started = await BlockingCall.run { StartedConnection(handle: Self.startHandle(params)) }
        try await withCheckedThrowingContinuation { (cont: CheckedContinuation<Void, any Error>) in
            loop.execute { conn.startConnect(started.handle, configuration, cont) }
        }
        return conn
    }

    /// A libpq connection handle passed from the thread that created it to the loop that polls
    /// it. `@unchecked Sendable`: libpq allows a `PGconn` to move between threads as long as one
    /// thread uses it at a time, and after the hand-off only the loop does.
    struct StartedConnection: @unchecked Sendable {
        let handle: OpaquePointer?
    }

    static func startHandle(_ params: [PostgresConfiguration.Parameter]) -> OpaquePointer? {
        let keys = params.map { strdup($0.key) } + [nil]
        let values = params.map { strdup($0.value) } + [nil]
        defer {
            keys.forEach { free($0) }
            values.forEach { free($0) }
        }
        return keys.withUnsafeBufferPointer { k in
            values.withUnsafeBufferPointer { v in
                k.withMemoryRebound(to: UnsafePointer<CChar>?.self) { kp in
                    v.withMemoryRebound(to: UnsafePointer<CChar>?.self) { vp in
                        PQconnectStartParams(kp.baseAddress, vp.baseAddress, 0)
                    }
                }
            }
        }
    }

    func startConnect(_ handle: OpaquePointer?, _ configuration: PostgresConfiguration, _ cont: CheckedContinuation<Void, any Error>) {
        guard let handle else {
            cont.resume(throwing: PostgresError.connectionFailed("out of memory"))
            return
        }
        pg = handle
        // Server NOTICEs (e.g. "relation already exists, skipping") would go to stderr by default.
        PQsetNoticeProcessor(handle, { _, _ in }, nil)
        if PQstatus(handle) == CONNECTION_BAD {
            failConnect(PostgresError.connectionFailed(errorMessage()), cont)
            return
        }
        connectContinuation = cont
        connectTimer = loop.scheduleTimer(after: configuration.connectTimeout) { [weak self] in
            guard let self, let c = self.connectContinuation else { return }
            self.connectContinuation = nil
            self.failConnect(.connectionFailed("timed out after \(configuration.connectTimeout)"), c)
        }
        pollConnect(PGRES_POLLING_WRITING)
    }

    /// One step of the connect state machine; libpq may change sockets between steps.
    func pollConnect(_ status: PostgresPollingStatusType) {
        guard let pg, let cont = connectContinuation else { return }
        switch status {
        case PGRES_POLLING_OK:
            connectContinuation = nil
            if let t = connectTimer { loop.cancelTimer(t) }
            PQsetnonblocking(pg, 1)
            do {
                try watch(.readable, renew: true)
                cont.resume()
            } catch {
                failConnect(.connectionFailed("\(error)"), cont)
            }
        case PGRES_POLLING_FAILED:
            connectContinuation = nil
            failConnect(.connectionFailed(errorMessage()), cont)
        default:
            do {
                try watch(status == PGRES_POLLING_READING ? .readable : .writable, renew: true)
            } catch {
                connectContinuation = nil
                failConnect(.connectionFailed("\(error)"), cont)
            }
        }
    }

    func failConnect(_ error: PostgresError, _ cont: CheckedContinuation<Void, any Error>) {
        if let t = connectTimer { loop.cancelTimer(t) }
        teardown()
        cont.resume(throwing: error)
    }

    /// Registers (or re-registers, if libpq switched sockets) the session's socket for `interest`.
    ///
    /// `renew` registers afresh even when the descriptor number is unchanged. While connecting,
    /// libpq closes a socket that failed (one of several hosts or addresses: `host=a,b`, a name
    /// with IPv6 and IPv4 addresses) and opens the next, which usually gets the same, lowest free,
    /// number. Closing removed the old socket from epoll, so keeping the registration would wait
    /// on a socket epoll no longer watches, until the connect timeout
    /// (`PostgresConnectTests.secondHostOfAMultiHostURL`). A connect has a handful of steps, so
    /// renewing at each costs a few `epoll_ctl` calls per session.
    func watch(_ newInterest: Interest, renew: Bool = false) throws(IOError) {
        guard let pg else { return }
        let fd = PQsocket(pg)
        if let reg = registration, renew || reg.fd != fd {
            loop.deregister(reg)
            registration = nil
        }
        if let reg = registration {
            if newInterest != interest { try loop.modify(reg, interest: newInterest) }
        } else {
            registration = try loop.register(fd: fd, interest: newInterest) { [unowned self] r in self.onReady(r) }
        }
        interest = newInterest
    }
}
