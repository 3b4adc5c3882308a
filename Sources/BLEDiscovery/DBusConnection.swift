// A D-Bus client connection on one of our event loops: the sans-I/O `DBus` module (SASL EXTERNAL,
// message codec, exported-object table) driven by an AF_UNIX stream socket.
//
//   connect ─▶ "\0AUTH EXTERNAL <hex uid>" ─▶ OK ─▶ BEGIN, Hello ─▶ our unique name
//   bytes ─▶ DBusMessageParser ─▶ replies: the awaiting call │ method calls: DBusObjectTable │ signals: handlers
//
// **Threading.** Everything of a connection runs on its loop (`DBusConnectionCore`, which owns the
// socket, the pending calls and their timers, the exported objects and the signal handlers);
// `DBusConnection` is the thread-safe face that hops there. Signal handlers run on the loop.

import DBus
import Glibc
import Logging
import Sockets

public final class DBusConnection: Sendable {
    public struct Configuration: Sendable {
        /// How long a method call (and the handshake) may wait for its reply.
        public var callTimeout: Duration = .seconds(25)
        public var maxMessageSize = DBusLimits.defaultMaxMessageSize
        public init() {}
    }

    let core: LoopBound<DBusConnectionCore>
    /// Our name on the bus (`:1.42`), from Hello.
    public let uniqueName: String

    private init(core: LoopBound<DBusConnectionCore>, uniqueName: String) {
        self.core = core
        self.uniqueName = uniqueName
    }

    /// Connects to `address` (`unix:path=…`), authenticates and says Hello.
    public static func connect(address: String, loop: EventLoop, logger: Logger,
                               configuration: Configuration = Configuration()) async throws(DBusConnectionError) -> DBusConnection {
        let target = try DBusBusAddress(parsing: address)
        let core: LoopBound<DBusConnectionCore>
        do {
            core = try await loop.submit {
                LoopBound(try DBusConnectionCore(address: target, loop: loop, logger: logger, configuration: configuration), loop: loop)
            }
        } catch let e as DBusConnectionError {
            throw e
        } catch {
            throw .closed("\(error)")
        }
        do {
            let name = try await withCheckedThrowingContinuation { (c: CheckedContinuation<String, any Error>) in
                loop.execute { core.value.start(onReady: c) }
            }
            return DBusConnection(core: core, uniqueName: name)
        } catch {
            throw error as? DBusConnectionError ?? .closed("\(error)")
        }
    }

    /// Sends `message` and waits for its reply; an error reply throws `.errorReply`.
    public func call(_ message: DBusMessage, timeout: Duration? = nil) async throws(DBusConnectionError) -> DBusMessage {
        let core = self.core
        do {
            return try await withCheckedThrowingContinuation { (c: CheckedContinuation<DBusMessage, any Error>) in
                core.loop.execute { core.value.call(message, timeout: timeout, continuation: c) }
            }
        } catch {
            throw error as? DBusConnectionError ?? .closed("\(error)")
        }
    }

    /// A method call to `destination`, awaited.
    public func call(_ destination: String, _ path: String, _ interface: String, _ member: String,
                     _ body: [DBusValue] = [], timeout: Duration? = nil) async throws(DBusConnectionError) -> DBusMessage {
        try await call(.methodCall(destination: destination, path: path, interface: interface, member: member, body: body), timeout: timeout)
    }

    public func export(path: String, interfaces: [DBusInterface]) async throws(DBusConnectionError) {
        try await onLoop { core throws(DBusConnectionError) in
            do throws(DBusError) { try core.objects.export(path: path, interfaces: interfaces) } catch { throw .protocolError(error) }
        }
    }

    public func exportObjectManager(at path: String) async throws(DBusConnectionError) {
        try await onLoop { core throws(DBusConnectionError) in
            do throws(DBusError) { try core.objects.exportObjectManager(at: path) } catch { throw .protocolError(error) }
        }
    }

    public func unexport(path: String) async {
        try? await onLoop { core in core.objects.unexport(path: path) }
    }

    /// Runs `handler` on the loop for every signal that reaches this connection (the bus sends
    /// only those matching a rule added with `addMatch`, and those addressed to us).
    public func onSignal(_ handler: @escaping @Sendable (DBusMessage) -> Void) async {
        try? await onLoop { core in core.signalHandlers.append(handler) }
    }

    /// Runs `handler` on the loop once, with the reason, when the connection closes (the bus went
    /// away, a protocol error, or `close()`); at once when it is already closed. Whoever registered
    /// objects with BlueZ must register them again on a new connection.
    public func onClose(_ handler: @escaping @Sendable (String) -> Void) async {
        try? await onLoop { core in core.addCloseHandler(handler) }
    }

    /// `org.freedesktop.DBus.AddMatch`: asks the bus for the signals matching `rule`.
    public func addMatch(_ rule: String) async throws(DBusConnectionError) {
        _ = try await call("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "AddMatch", [.string(rule)])
    }

    /// Whether `name` has an owner on the bus.
    public func nameHasOwner(_ name: String) async throws(DBusConnectionError) -> Bool {
        let reply = try await call("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "NameHasOwner", [.string(name)])
        return reply.body.first?.boolValue ?? false
    }

    /// Fails every pending call and closes the socket.
    public func close() async {
        try? await onLoop { core in core.close(reason: "closed by us") }
    }

    private func onLoop<T: Sendable>(_ body: @escaping @Sendable (DBusConnectionCore) throws(DBusConnectionError) -> T) async throws(DBusConnectionError) -> T {
        let core = self.core
        do {
            return try await core.loop.submit { try body(core.value) }
        } catch {
            throw error as? DBusConnectionError ?? .closed("\(error)")
        }
    }
}
