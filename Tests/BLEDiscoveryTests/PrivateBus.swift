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
    /// The BlueZ stand-in while it runs.
    private let fakePID = MutexBox<pid_t?>(nil)
    let loops: EventLoopGroup
    /// Set once the daemon is reaped, so its pid (free for reuse then) is never signalled again.
    private let daemonReaped = MutexBox(false)

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
        loops = try EventLoopGroup(threads: 1)
        if withBlueZ { try await startBlueZ() }
    }

    /// Starts the BlueZ stand-in (again: a restarted bluetoothd) and returns once it owns org.bluez.
    func startBlueZ() async throws {
        let run = UInt64.random(in: 0...UInt64.max)
        let fakeOut = directory.path + "/fake-\(run).out", fakeErr = directory.path + "/fake-\(run).err"
        let pid = try TestCommand.spawn(StandIn.python, [StandIn.fakeBlueZ, address], stdoutPath: fakeOut, stderrPath: fakeErr)
        fakePID.withLock { $0 = pid }
        let ready = await eventually { ((try? String(contentsOfFile: fakeOut, encoding: .utf8)) ?? "").contains("ready") }
        if !ready { throw ServerProcessError.spawn("fake_bluez.py did not start: \((try? String(contentsOfFile: fakeErr, encoding: .utf8)) ?? "")") }
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
        // Taken out first, so a reaped pid (free for reuse) is never signalled.
        guard let pid = fakePID.withLock({ p in defer { p = nil }; return p }) else { return }
        kill(pid, SIGKILL)
        _ = await TestCommand.wait(pid)
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
