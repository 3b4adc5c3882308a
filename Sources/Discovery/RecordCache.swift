// The browser's record cache (RFC 6762 §10): records per interface, name and type, with TTL
// expiry, goodbyes and cache-flush removing records 1 s later, refresh points at 80, 85, 90 and
// 95 % of the TTL (§5.2), and a hard bound on how many records it holds (python-zeroconf keeps
// 10,000): when full, new records are refused and counted, never an unbounded scan to evict.

struct RecordSetKey: Hashable, Sendable {
    var interface: InterfaceID
    var name: DNSName
    var type: DNSRecordType
}

struct CacheEntry: Sendable {
    var record: DNSResourceRecord
    var receivedAt: Int64
    var expiresAt: Int64
    /// Refresh queries sent for this copy (0…4).
    var refreshesSent = 0
    /// Per-record spread of the refresh points (RFC 6762 §5.2: "plus a random variation of 2%").
    var refreshJitter: Int64 = 0

    var ttlMillis: Int64 { Int64(record.ttl) * 1000 }

    /// When the next refresh query for this record is due, nil after four or after a goodbye.
    var nextRefresh: Int64? {
        guard refreshesSent < 4, record.ttl > 0, expiresAt == receivedAt + ttlMillis else { return nil }
        return receivedAt + ttlMillis * Int64(80 + 5 * refreshesSent) / 100 + refreshJitter
    }

    /// §7.1: a known answer only while more than half its TTL remains.
    func isKnownAnswer(now: Int64) -> Bool { record.ttl > 0 && (expiresAt - now) * 2 > ttlMillis }
}

struct RecordCache: Sendable {
    enum Insertion: Equatable { case added, refreshed, goodbye, ignored, full }

    let limit: Int
    private(set) var sets: [RecordSetKey: [DNSRecordData: CacheEntry]] = [:]
    private(set) var count = 0
    /// No expiry or refresh point lies before this (it may lie before the true earliest one).
    private(set) var nextDue: Int64?

    init(limit: Int) { self.limit = limit }

    func entries(_ key: RecordSetKey) -> [CacheEntry] { sets[key].map { Array($0.values) } ?? [] }

    /// True when the set holds this rdata, unexpired.
    func holds(_ key: RecordSetKey, _ data: DNSRecordData, now: Int64) -> Bool {
        (sets[key]?[data]?.expiresAt ?? .min) > now
    }

    /// Live records of a set, most recently received first.
    func live(_ key: RecordSetKey, now: Int64) -> [DNSResourceRecord] {
        entries(key).filter { $0.expiresAt > now }.sorted { $0.receivedAt > $1.receivedAt }.map(\.record)
    }

    /// Stores a record heard on an interface; `jitter` (0…20 ‰) spreads its refresh points.
    /// `flushed` lists the sets already flushed by this
    /// packet, so a packet flushes each set once however many records it carries.
    mutating func insert(_ record: DNSResourceRecord, on interface: InterfaceID, now: Int64, jitter: Int64,
                         flushed: inout Set<RecordSetKey>) -> Insertion {
        let key = RecordSetKey(interface: interface, name: record.name, type: record.type)
        var set = sets[key] ?? [:]
        if record.ttl == 0 {
            // §10.1: a goodbye removes the record one second later.
            guard var entry = set[record.data] else { return .ignored }
            entry.expiresAt = min(entry.expiresAt, now + 1000)
            set[record.data] = entry
            sets[key] = set
            noteDeadline(entry)
            return .goodbye
        }
        if record.cacheFlush, !flushed.contains(key) {
            // §10.2: copies of this set received more than a second ago go one second from now.
            flushed.insert(key)
            for (data, var entry) in set where entry.receivedAt < now - 1000 && data != record.data {
                entry.expiresAt = min(entry.expiresAt, now + 1000)
                set[data] = entry
                noteDeadline(entry)
            }
        }
        let entry = CacheEntry(record: record, receivedAt: now, expiresAt: now + Int64(record.ttl) * 1000,
                               refreshJitter: Int64(record.ttl) * jitter)
        let result: Insertion
        if set[record.data] != nil {
            result = .refreshed
        } else if count >= limit {
            sets[key] = set.isEmpty ? nil : set
            return .full
        } else {
            count += 1
            result = .added
        }
        set[record.data] = entry
        sets[key] = set
        noteDeadline(entry)
        return result
    }

    /// Removes expired records and marks the refreshes due by `now` as sent, in one pass over the
    /// cache, which runs only when `nextDue` has come: what was removed, and the sets to refresh.
    mutating func advance(now: Int64) -> (expired: [DNSResourceRecord], refresh: [RecordSetKey]) {
        guard let due = nextDue, due <= now else { return ([], []) }
        var expired: [DNSResourceRecord] = [], refresh: [RecordSetKey] = []
        var next: Int64?
        for (key, set) in sets {
            var kept = set
            var refreshed = false
            for (data, var entry) in set {
                if entry.expiresAt <= now {
                    kept[data] = nil
                    expired.append(entry.record)
                    continue
                }
                if (entry.nextRefresh ?? .max) <= now {
                    // Points passed together (a long sleep) are one refresh.
                    while (entry.nextRefresh ?? .max) <= now { entry.refreshesSent += 1 }
                    kept[data] = entry
                    refreshed = true
                }
                let entryDue = min(entry.expiresAt, entry.nextRefresh ?? .max)
                next = min(next ?? entryDue, entryDue)
            }
            if refreshed { refresh.append(key) }
            if kept.count != set.count || refreshed { sets[key] = kept.isEmpty ? nil : kept }
        }
        count -= expired.count
        nextDue = next
        return (expired, refresh)
    }

    /// Forgets an interface's records; returns them.
    mutating func removeInterface(_ interface: InterfaceID) -> [DNSResourceRecord] {
        var removed: [DNSResourceRecord] = []
        for key in sets.keys where key.interface == interface {
            removed += sets[key]?.values.map(\.record) ?? []
            sets[key] = nil
        }
        count -= removed.count
        return removed
    }

    private mutating func noteDeadline(_ entry: CacheEntry) {
        let due = min(entry.expiresAt, entry.nextRefresh ?? .max)
        nextDue = min(nextDue ?? due, due)
    }
}
