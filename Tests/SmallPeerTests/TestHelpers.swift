import BigPeerTestSupport
import Foundation
@testable import SmallPeer
import Values

/// A fresh temporary directory for one test's peer; removed by `cleanup`.
struct TempDirectory {
    let path: String

    init(_ name: String = #function) {
        let safe = name.filter { $0.isLetter || $0.isNumber }
        path = NSTemporaryDirectory() + "smallpeer-\(safe)-\(UUID().uuidString)"
        try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    func cleanup() { try? FileManager.default.removeItem(atPath: path) }
    func sub(_ name: String) -> String { path + "/" + name }
}

/// A wall clock that only moves when told (HLC timestamps become predictable).
final class ManualWallClock: Sendable {
    private let millis: MutexBox<UInt64>
    init(_ start: UInt64 = 1_700_000_000_000) { millis = MutexBox(start) }
    func advance(_ ms: UInt64 = 1) { millis.withLock { $0 += ms } }
    var read: @Sendable () -> UInt64 { { [millis] in millis.withLock { $0 } } }
}

/// Opens a peer directory, waiting up to 10 s for its lock. Other tests in this process spawn
/// processes (`bigpeer serve`, `bigpeer peer`): between a spawn's fork and its exec the child holds
/// a copy of every descriptor, close-on-exec ones included, so a directory's `flock` can outlive a
/// test's `close()` by that long (a reopen failed so once in CI, under load). A lock really held,
/// or leaked, stays held past the wait and still fails.
func openPeer(_ path: String, site: UInt64? = nil, strict: Bool = true, clock: ManualWallClock? = nil) throws -> SmallPeer {
    var c = SmallPeer.Configuration()
    c.site = site
    c.strictMode = strict
    if let clock { c.wallClock = clock.read }
    let deadline = ContinuousClock.now + .seconds(10)
    while true {
        do {
            return try SmallPeer(directory: path, configuration: c)
        } catch {
            guard case .storage(.locked) = error, ContinuousClock.now < deadline else { throw error }
            usleep(10_000)
        }
    }
}

/// Values of a SELECT, for short assertions.
func rows(_ peer: SmallPeer, _ q: String, _ args: [String: Value] = [:]) throws -> [Value] {
    try peer.execute(q, arguments: args).items
}

import CRDT

enum CRDTFixtures {
    static func document(_ id: String) throws -> Document {
        var doc = try Document(id: .string(id))
        var r = Replica(site: SiteID(3), wallClock: { 1000 })
        _ = try doc.upsert(["_id": .string(id), "v": .int(1)], replica: &r)
        return doc
    }

    static func edit(_ doc: Document) throws -> Document {
        var d = doc
        var r = Replica(site: SiteID(4), wallClock: { 2000 })
        _ = try d.set("v", to: .int(2), replica: &r)
        return d
    }
}
