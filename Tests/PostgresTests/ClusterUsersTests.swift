import BigPeerTestSupport
import Foundation
import Glibc
import Testing
@testable import Postgres

/// Who uses a private cluster (`ClusterUsers`): registrations held by live holders count, those
/// of holders that are gone — released, deinitialised or SIGKILLed — do not, and are removed.
@Suite struct ClusterUsersTests {
    @Test func liveRegistrationsCountAndThoseOfKilledHoldersAreRemoved() async throws {
        let dir = NSTemporaryDirectory() + "bigpeer-users-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let users = ClusterUsers(dataDirectory: dir)
        #expect(users.liveUsers() == 0)

        let a = try users.register()
        var b: ClusterUsers.Registration? = try users.register()
        #expect(try users.exclusively { users.liveUsers() } == 2)
        a.release()
        a.release()  // idempotent
        #expect(users.liveUsers() == 1)
        b = nil  // deinit releases
        #expect(b == nil && users.liveUsers() == 0)

        // Another process holds a registration, then is SIGKILLed: the kernel drops its lock, and
        // the next count finds the file, takes the lock, and removes it.
        let stale = users.directory + "/killed.lock"
        let probe = open(stale, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        defer { close(probe) }
        // One process (the shell, then the sleep it becomes, same pid) holds the lock on its fd 9.
        let holder = try TestCommand.spawn("/bin/sh", ["-c", "exec 9>\"$0\" && /usr/bin/flock 9 && exec sleep 600", stale],
                                           stdoutPath: "/dev/null", stderrPath: "/dev/null")
        // Until it holds it (probing with our own descriptor; counting could remove the file
        // between the holder opening it and locking it).
        _ = await eventually(within: .seconds(30)) {
            guard flock(probe, LOCK_EX | LOCK_NB) == 0 else { return true }
            flock(probe, LOCK_UN)
            return false
        }
        #expect(users.liveUsers() == 1)
        kill(holder, SIGKILL)
        _ = await TestCommand.wait(holder)
        #expect(users.liveUsers() == 0)
        #expect(!FileManager.default.fileExists(atPath: stale))
    }
}
