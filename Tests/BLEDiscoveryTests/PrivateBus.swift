// A private D-Bus for the tests: its own `dbus-daemon` on a socket in a temporary directory
// (never the system bus), optionally with the BlueZ stand-in (fake_bluez.py) owning org.bluez.

import BigPeerTestSupport
import DBus
import Foundation
import Glibc
import Logging
import Sockets
@testable import BLEDiscovery

enum StandIn {
    static let daemon = "/usr/bin/dbus-daemon"
    static let python = "/usr/bin/python3"
    static let fakeBlueZ = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("fake_bluez.py").path

    /// Why the stand-in tests cannot run here, or nil when they can.
    static let missing: String? = {
        guard access(daemon, X_OK) == 0 else { return "dbus-daemon is not installed (Debian package dbus)" }
        guard access(python, X_OK) == 0 else { return "/usr/bin/python3 is not installed" }
        guard system("\(python) -c 'import dbus, gi' >/dev/null 2>&1") == 0 else {
            return "python3-dbus or python3-gi is not installed (Debian packages python3-dbus, python3-gi)"
        }
        return nil
    }()
}

final class PrivateBus: Sendable {
    let directory: TemporaryDirectory
    let address: String
    let daemonPID: pid_t
    let fakePID: pid_t?
    let loops: EventLoopGroup
    /// Set once the daemon is reaped, so its pid (free for reuse then) is never signalled again.
    private let daemonReaped = MutexBox(false)
    private let fakeReaped = MutexBox(false)

    /// Starts the bus and, with `withBlueZ`, the stand-in; returns once both are ready.
    init(withBlueZ: Bool) async throws {
        directory = try TemporaryDirectory("dbus")
        address = "unix:path=\(directory.path)/bus"
        let config = try directory.write("bus.conf", """
            <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
             "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
            <busconfig>
              <type>session</type>
              <listen>\(address)</listen>
              <auth>EXTERNAL</auth>
              <policy context="default">
                <allow send_destination="*" eavesdrop="true"/>
                <allow eavesdrop="true"/>
                <allow own="*"/>
              </policy>
            </busconfig>
            """)
        let daemonOut = directory.path + "/daemon.out"
        daemonPID = try TestCommand.spawn(StandIn.daemon, ["--config-file=\(config)", "--nofork", "--print-address=1"],
                                          stdoutPath: daemonOut, stderrPath: directory.path + "/daemon.err")
        // The daemon prints its address once it listens.
        let printed = await eventually { ((try? String(contentsOfFile: daemonOut, encoding: .utf8)) ?? "").contains("unix:") }
        if !printed { throw ServerProcessError.spawn("dbus-daemon did not start") }
        if withBlueZ {
            let fakeOut = directory.path + "/fake.out"
            fakePID = try TestCommand.spawn(StandIn.python, [StandIn.fakeBlueZ, address], stdoutPath: fakeOut, stderrPath: directory.path + "/fake.err")
            let ready = await eventually { ((try? String(contentsOfFile: fakeOut, encoding: .utf8)) ?? "").contains("ready") }
            if !ready { throw ServerProcessError.spawn("fake_bluez.py did not start: \((try? String(contentsOfFile: directory.path + "/fake.err", encoding: .utf8)) ?? "")") }
        } else {
            fakePID = nil
        }
        loops = try EventLoopGroup(threads: 1)
    }

    var loop: EventLoop { loops.loops[0] }

    func connect() async throws -> DBusConnection {
        try await DBusConnection.connect(address: address, loop: loop, logger: Logger(label: "test"))
    }

    /// What the stand-in recorded, as JSON.
    func report(_ connection: DBusConnection) async throws -> [String: Any] {
        let reply = try await connection.call("org.bluez", "/org/bigpeer/fake", "org.bigpeer.FakeBlueZ", "Report")
        let text = reply.body.first?.stringValue ?? "{}"
        return try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any] ?? [:]
    }

    /// Ends the BlueZ stand-in alone: the bus sees org.bluez lose its owner.
    func killBlueZ() async {
        guard let fakePID, !fakeReaped.withLock({ $0 }) else { return }
        kill(fakePID, SIGKILL)
        _ = await TestCommand.wait(fakePID)
        fakeReaped.withLock { $0 = true }
    }

    /// Ends the bus alone (the loops keep running, so connections see it go).
    func killDaemon() async {
        guard !daemonReaped.withLock({ $0 }) else { return }
        kill(daemonPID, SIGKILL)
        _ = await TestCommand.wait(daemonPID)
        daemonReaped.withLock { $0 = true }
    }

    /// SIGKILL: a SIGTERM sent from the test process left the daemon running (not looked into
    /// further), and nothing here needs a clean exit.
    func stop() async {
        await killBlueZ()
        await killDaemon()
        loops.shutdown()
    }
}
