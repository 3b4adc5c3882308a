// Our D-Bus client against the real dbus-daemon on a private bus.

import BigPeerTestSupport
import DBus
import Glibc
import Logging
import Sockets
import Testing
@testable import BLEDiscovery

@Suite("D-Bus connection", .enabled(if: StandIn.missing == nil, "\(StandIn.missing ?? "")"))
struct DBusConnectionTests {
    @Test func helloGivesAUniqueName_andCallsGetReplies() async throws {
        let bus = try await PrivateBus(withBlueZ: false)
        let connection = try await bus.connect()
        #expect(connection.uniqueName.hasPrefix(":1."))
        let id = try await connection.call("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "GetId")
        #expect(id.body.first?.stringValue?.count == 32)
        #expect(try await connection.nameHasOwner("org.freedesktop.DBus"))
        #expect(try await connection.nameHasOwner("org.bluez") == false)
        await connection.close()
        await bus.stop()
    }

    @Test func errorRepliesThrow_andAClosedConnectionFailsCalls() async throws {
        let bus = try await PrivateBus(withBlueZ: false)
        let connection = try await bus.connect()
        await #expect(throws: DBusConnectionError.self) {
            _ = try await connection.call("org.example.Nobody", "/", "org.example.I", "M")
        }
        do {
            _ = try await connection.call("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "NoSuchMethod")
            Issue.record("no error")
        } catch .errorReply(let name, _) {
            #expect(name == "org.freedesktop.DBus.Error.UnknownMethod")
        }
        await connection.close()
        await #expect(throws: DBusConnectionError.closed("closed by us")) {
            _ = try await connection.call("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "GetId")
        }
        await bus.stop()
    }

    @Test func theBusGoingAway_closesTheConnection_andPendingCallsFail() async throws {
        let bus = try await PrivateBus(withBlueZ: true)
        let connection = try await bus.connect()
        let closed = MutexBox<String?>(nil)
        await connection.onClose { reason in closed.withLock { $0 = reason } }
        let hung = Task { try await connection.call("org.bluez", "/org/bigpeer/fake", "org.bigpeer.FakeBlueZ", "Hang") }
        #expect(await eventually { (try? await bus.report(connection)["hung"] as? Int) == 1 }, "the stand-in holds the call")
        await bus.killDaemon()
        await #expect(throws: DBusConnectionError.self) { _ = try await hung.value }
        #expect(await eventually { closed.withLock { $0 } != nil }, "onClose ran")
        await #expect(throws: DBusConnectionError.self) { _ = try await connection.nameHasOwner("org.bluez") }
        await bus.stop()
    }

    @Test func exportedObjectsAnswerOtherClients() async throws {
        let bus = try await PrivateBus(withBlueZ: false)
        let server = try await bus.connect()
        let client = try await bus.connect()
        try await server.exportObjectManager(at: "/app")
        try await server.export(path: "/app/thing", interfaces: [DBusInterface(name: "x.Thing", properties: ["N": .uint32(5)],
                                                                                methods: ["Echo": { .success($0.body) }])])
        let echo = try await client.call(server.uniqueName, "/app/thing", "x.Thing", "Echo", [.string("hi"), .int64(-1)])
        #expect(echo.body == [.string("hi"), .int64(-1)])
        let n = try await client.call(server.uniqueName, "/app/thing", DBusStandardInterface.properties, "Get", [.string("x.Thing"), .string("N")])
        #expect(n.body == [.variant(.uint32(5))])
        let managed = try await client.call(server.uniqueName, "/app", DBusStandardInterface.objectManager, "GetManagedObjects")
        #expect(managed.body.first?.dictionaryEntries?.map(\.key) == [.objectPath("/app/thing")])
        await client.close()
        await server.close()
        await bus.stop()
    }

    @Test func aCallWithoutReply_timesOut() async throws {
        let bus = try await PrivateBus(withBlueZ: true)
        let connection = try await bus.connect()
        // The stand-in's Hang never replies.
        await #expect(throws: DBusConnectionError.timedOut("org.bigpeer.FakeBlueZ.Hang")) {
            _ = try await connection.call("org.bluez", "/org/bigpeer/fake", "org.bigpeer.FakeBlueZ", "Hang", timeout: .milliseconds(50))
        }
        // The connection still works afterwards, and a late reply would find no caller.
        #expect(try await connection.nameHasOwner("org.bluez"))
        await connection.close()
        await bus.stop()
    }

    @Test func aBusThatNeverAnswersTheHandshake_timesOut() async throws {
        let dir = try TemporaryDirectory("silent")
        let listener = try SilentUnixListener(path: dir.path + "/bus")
        let loops = try EventLoopGroup(threads: 1)
        var configuration = DBusConnection.Configuration()
        configuration.callTimeout = .milliseconds(50)
        await #expect(throws: DBusConnectionError.timedOut("the handshake")) {
            _ = try await DBusConnection.connect(address: "unix:path=\(dir.path)/bus", loop: loops.loops[0], logger: Logger(label: "test"),
                                                 configuration: configuration)
        }
        listener.close()
        loops.shutdown()
    }
}

/// A listening AF_UNIX socket that never accepts: connects complete (the kernel queues them), and
/// nothing is ever answered.
struct SilentUnixListener {
    let fd: Int32

    init(path: String) throws {
        fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &addr.sun_path) { raw in
            for (i, b) in path.utf8.enumerated() { raw[i] = b }
        }
        let rc = withUnsafePointer(to: &addr) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard rc == 0, listen(fd, 4) == 0 else { throw IOError(call: "bind/listen", errno: errno) }
    }

    func close() { Glibc.close(fd) }
}
