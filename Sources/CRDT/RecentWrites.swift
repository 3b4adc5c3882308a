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
//   local write / merge      entries += written paths (`record`, then `settle` once the vector has the
//                            dots); a local write's entry carries its dot, so a receiver that has it
//                            skips the path without visiting it
//   more than `maxPaths`     floor = versionVector  paths = []   (after the write: only later events listed)
//   reset snapshot merged    floor = versionVector  paths = []
//
// The typical server write (load a document, apply one operation, send `delta(since:)` the vector
// it had when loaded) is always served from here. The index is local bookkeeping: not encoded, not
// part of equality, and empty for documents that are only read.

struct RecentWrites: Sendable {
    /// Above this many entries the index is dropped (bounded memory per cached document).
    static let maxPaths = 64

    /// Events were stored at `path`; a local write also says which (`site`, newest `dot`), so a
    /// receiver that has them can skip the path without looking at the slot. Merged events: nil.
    struct Entry: Sendable, Equatable {
        var path: [String]
        var dot: (site: SiteID, dot: HLCTimestamp)?

        static func == (a: Entry, b: Entry) -> Bool {
            a.path == b.path && a.dot?.site == b.dot?.site && a.dot?.dot == b.dot?.dot
        }
    }

    private(set) var floor = VersionVector()
    /// In the order written; a repeat of the last path by the same writer updates it in place.
    private(set) var entries: [Entry] = []

    /// Set when more than `maxPaths` were recorded; `settle` then moves the floor up.
    private var overflowed = false

    var paths: [[String]] { entries.map(\.path) }

    /// Events are being stored at `path` (call `settle` once the version vector includes them).
    /// `meta` is the local write's event record, nil for merged events.
    mutating func record(_ path: ArraySlice<String>, meta: Meta?) {
        if overflowed { return }
        if let last = entries.last, last.path.elementsEqual(path) {
            switch (last.dot, meta) {
            case (nil, _): return  // already always extracted
            case (let d?, let m?) where d.site == m.site:
                entries[entries.count - 1].dot = (m.site, max(d.dot, m.dot))
                return
            case (_?, nil):
                entries[entries.count - 1].dot = nil
                return
            default: break
            }
        }
        if entries.count >= Self.maxPaths {
            overflowed = true
            entries = []
            return
        }
        entries.append(Entry(path: Array(path), dot: meta.map { ($0.site, $0.dot) }))
    }

    /// The version vector now includes every event recorded.
    mutating func settle(versionVector: VersionVector) {
        if overflowed { forget(versionVector: versionVector) }
    }

    /// Keeps no paths; only events above `versionVector` will be listed from now on.
    mutating func forget(versionVector: VersionVector) {
        floor = versionVector
        entries = []
        overflowed = false
    }

    /// Whether every event a replica at `since` lacks is at one of the listed paths.
    func serves(_ since: VersionVector) -> Bool { since.covers(floor) }
}

extension Document {
    /// A copy of the events at the recently written paths that `vv` does not contain, in the shape
    /// `extract(root, unseenBy:)` would give (nil if there are none).
    func extractRecent(unseenBy vv: VersionVector) -> Slot? {
        var out = Slot()
        var done = Set<[String]>()
        for entry in recent.entries {
            // Every event a local write stored here has the entry's site and a dot <= its dot.
            if let d = entry.dot, vv.contains(d.site, d.dot) { continue }
            let path = entry.path
            guard done.insert(path).inserted else { continue }
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
