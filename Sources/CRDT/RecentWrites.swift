// Which paths recent events were stored at, so `delta(since:)` for a recent version vector visits
// only those paths instead of the whole document (O(delta), not O(document)).
//
// Claim kept true at all times: every stored event of site s whose dot is above `floor[s]` (any
// dot when s has no floor entry) sits at one of `paths`. So when `since` covers `floor`, every event
// the receiver lacks is at a listed path, and extracting just those slots gives the same delta as
// walking the whole tree.
//
//   created empty            floor = [:]            paths = []   (nothing stored yet)
//   decoded                  floor = versionVector  paths = []   (everything stored is <= floor)
//   local write / merge      paths += written paths (`record`, then `settle` once the vector has the dots)
//   more than `maxPaths`     floor = versionVector  paths = []   (after the write: only later events listed)
//   reset snapshot merged    floor = versionVector  paths = []
//
// The typical server write (load a document, apply one operation, send `delta(since:)` the vector
// it had when loaded) is always served from here. The index is local bookkeeping: not encoded, not
// part of equality, and empty for documents that are only read.

struct RecentWrites: Sendable {
    /// Above this many paths the index is dropped (bounded memory per cached document).
    static let maxPaths = 64

    private(set) var floor = VersionVector()
    /// Paths in the order written (no two neighbours equal).
    private(set) var paths: [[String]] = []

    /// Set when more than `maxPaths` were recorded; `settle` then moves the floor up.
    private var overflowed = false

    /// Events are being stored at `path` (call `settle` once the version vector includes them).
    /// Only a repeat of the last path is skipped (O(1)); other repeats take a place in the list.
    mutating func record(_ path: ArraySlice<String>) {
        if overflowed || paths.last?.elementsEqual(path) == true { return }
        if paths.count >= Self.maxPaths {
            overflowed = true
            paths = []
            return
        }
        paths.append(Array(path))
    }

    /// The version vector now includes every event recorded.
    mutating func settle(versionVector: VersionVector) {
        if overflowed { forget(versionVector: versionVector) }
    }

    /// Keeps no paths; only events above `versionVector` will be listed from now on.
    mutating func forget(versionVector: VersionVector) {
        floor = versionVector
        paths = []
        overflowed = false
    }

    /// Whether every event a replica at `since` lacks is at one of `paths`.
    func serves(_ since: VersionVector) -> Bool { since.covers(floor) }
}

extension Document {
    /// A copy of the events at the recently written paths that `vv` does not contain, in the shape
    /// `extract(root, unseenBy:)` would give (nil if there are none).
    func extractRecent(unseenBy vv: VersionVector) -> Slot? {
        var out = Slot()
        var done = Set<[String]>()
        for path in recent.paths where done.insert(path).inserted {
            guard let stored = slot(at: FieldPath(path)) else { continue }
            var own = stored
            own.children = SlotChildren()
            guard let events = Self.extract(own, unseenBy: vv) else { continue }
            Self.place(events, at: path[...], in: &out)
        }
        return out.isEmpty ? nil : out
    }

    private static func place(_ events: Slot, at path: ArraySlice<String>, in slot: inout Slot) {
        guard let key = path.first else {
            let children = slot.children
            slot = events
            slot.children = children
            return
        }
        place(events, at: path.dropFirst(), in: &slot.children[key, default: Slot()])
    }
}
