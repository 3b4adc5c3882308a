import DBus
import Glibc
import Logging
import Sockets

/// The loop-owned state of one `DBusConnection` (see there).
final class DBusConnectionCore: ConnectionDelegate {
    private enum Phase {
        case authenticating(DBusAuthClient)
        case greeting
        case running
        case closed(String)
    }

    let loop: EventLoop
    let logger: Logger
    let configuration: DBusConnection.Configuration
    private let socket: TCPConnection
    private var phase: Phase = .authenticating(DBusAuthClient())
    private var parser: DBusMessageParser
    private var nextSerial: UInt32 = 1
    /// Calls awaiting their reply, by serial; the timer fails the call when no reply comes.
    private var pending: [UInt32: (reply: (Result<DBusMessage, any Error>) -> Void, timer: TimerID)] = [:]
    private var onReady: CheckedContinuation<String, any Error>?
    private var handshakeTimer: TimerID?
    var objects = DBusObjectTable()
    var signalHandlers: [@Sendable (DBusMessage) -> Void] = []
    private var closeHandlers: [@Sendable (String) -> Void] = []

    init(address: DBusBusAddress, loop: EventLoop, logger: Logger, configuration: DBusConnection.Configuration) throws {
        self.loop = loop
        self.logger = logger
        self.configuration = configuration
        parser = DBusMessageParser(maxMessageSize: configuration.maxMessageSize)
        let fd = try address.connectSocket()
        do {
            socket = try TCPConnection(acceptedFD: fd, remoteAddress: nil, loop: loop)
        } catch {
            Syscall.close(fd)
            throw error
        }
    }

    func start(onReady: CheckedContinuation<String, any Error>) {
        self.onReady = onReady
        socket.delegate = self
        do { try socket.start() } catch {
            close(reason: "\(error)")
            return
        }
        handshakeTimer = loop.scheduleTimer(after: configuration.callTimeout) { [weak self] in
            self?.handshakeTimer = nil
            self?.close(reason: "the bus did not finish the handshake in time", error: .timedOut("the handshake"))
        }
        socket.write(DBusAuthClient.initialBytes(uid: getuid()))
    }

    // MARK: - Calls

    func call(_ message: DBusMessage, timeout: Duration?, continuation: CheckedContinuation<DBusMessage, any Error>) {
        call(message, timeout: timeout) { continuation.resume(with: $0) }
    }

    private func call(_ message: DBusMessage, timeout: Duration?, reply: @escaping (Result<DBusMessage, any Error>) -> Void) {
        if case .closed(let why) = phase {
            reply(.failure(DBusConnectionError.closed(why)))
            return
        }
        var message = message
        message.flags.remove(.noReplyExpected)
        let serial: UInt32
        do { serial = try send(message) } catch {
            reply(.failure(DBusConnectionError.protocolError(error)))
            return
        }
        let what = "\(message.interface ?? "").\(message.member ?? "")"
        let timer = loop.scheduleTimer(after: timeout ?? configuration.callTimeout) { [weak self] in
            guard let self, let entry = self.pending.removeValue(forKey: serial) else { return }
            entry.reply(.failure(DBusConnectionError.timedOut(what)))
        }
        pending[serial] = (reply, timer)
    }

    /// Encodes and writes `message` with the next serial (the bus refuses serial 0).
    @discardableResult
    private func send(_ message: DBusMessage) throws(DBusError) -> UInt32 {
        let serial = nextSerial
        nextSerial = nextSerial == UInt32.max ? 1 : nextSerial + 1
        socket.write(try message.encode(serial: serial))
        return serial
    }

    // MARK: - Input

    func connection(_ connection: TCPConnection, didRead bytes: UnsafeRawBufferPointer) {
        switch phase {
        case .closed:
            return
        case .authenticating(var auth):
            do {
                switch try auth.receive(bytes) {
                case .needMoreData:
                    phase = .authenticating(auth)
                case .send(let reply):
                    phase = .authenticating(auth)
                    socket.write(reply)
                case .authenticated(let begin, _, let leftover):
                    socket.write(begin)
                    phase = .greeting
                    parser.append(leftover)
                    sayHello()
                    drainMessages()
                }
            } catch {
                close(reason: "\(error)", error: .protocolError(error))
            }
        case .greeting, .running:
            parser.append(bytes)
            drainMessages()
        }
    }

    private func sayHello() {
        let hello = DBusMessage.methodCall(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                                           interface: "org.freedesktop.DBus", member: "Hello")
        call(hello, timeout: nil) { [weak self] result in
            guard let self else { return }
            switch result {
            case .success(let reply):
                guard let name = reply.body.first?.stringValue else {
                    self.close(reason: "Hello returned no name")
                    return
                }
                self.phase = .running
                if let t = self.handshakeTimer { self.loop.cancelTimer(t) }
                self.handshakeTimer = nil
                self.onReady?.resume(returning: name)
                self.onReady = nil
            case .failure(let e):
                self.close(reason: "Hello failed: \(e)", error: e as? DBusConnectionError)
            }
        }
    }

    private func drainMessages() {
        while true {
            if case .closed = phase { return }
            if !drainOne() { return }
        }
    }

    /// Handles the next buffered message; false when there is none or the stream failed.
    private func drainOne() -> Bool {
        let message: DBusMessage
        do {
            guard let m = try parser.next() else { return false }
            message = m
        } catch {
            close(reason: "\(error)", error: .protocolError(error))
            return false
        }
        switch message.kind {
        case .methodReturn, .error:
            guard let serial = message.replySerial else { return true }
            let result: Result<DBusMessage, any Error> = message.kind == .error
                ? .failure(DBusConnectionError.errorReply(name: message.errorName ?? "", message: message.errorMessage ?? ""))
                : .success(message)
            if let entry = pending.removeValue(forKey: serial) {
                loop.cancelTimer(entry.timer)
                entry.reply(result)
            }
        case .methodCall:
            if let reply = objects.handle(message) {
                do { try send(reply) } catch { logger.warning("D-Bus: cannot encode a reply", metadata: ["error": "\(error)"]) }
            }
        case .signal:
            for handler in signalHandlers { handler(message) }
        }
        return true
    }

    // MARK: - Closing

    func connectionDidClose(_ connection: TCPConnection, error: (any Error)?) {
        close(reason: error.map { "\($0)" } ?? "the bus closed the connection")
    }

    func addCloseHandler(_ handler: @escaping @Sendable (String) -> Void) {
        if case .closed(let why) = phase { handler(why) } else { closeHandlers.append(handler) }
    }

    func close(reason: String, error: DBusConnectionError? = nil) {
        if case .closed = phase { return }
        phase = .closed(reason)
        let failure = error ?? .closed(reason)
        if let t = handshakeTimer { loop.cancelTimer(t) }
        handshakeTimer = nil
        onReady?.resume(throwing: failure)
        onReady = nil
        let calls = pending
        pending = [:]
        for (_, entry) in calls {
            loop.cancelTimer(entry.timer)
            entry.reply(.failure(failure))
        }
        socket.close()
        let handlers = closeHandlers
        closeHandlers = []
        signalHandlers = []
        for handler in handlers { handler(reason) }
    }
}

