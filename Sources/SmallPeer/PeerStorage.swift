// The small peer's directory: a lock file, a snapshot, and an append-only log of commits.
//
//   DIR/LOCK           flock(LOCK_EX) while a process has the peer open
//   DIR/snapshot       header(gen g) commit* end(n)     written to snapshot.tmp, fsynced, renamed
//   DIR/log            header(gen g) commit*            appended and fsynced per commit
//
// Open: snapshot (if any) then the log, if the log's generation equals the snapshot's (a log of an
// older generation is already contained in the snapshot: a crash hit between the two renames of a
// compaction). A torn tail of the log is cut off. Compaction writes the state as a snapshot of
// generation g+1, then a fresh log of generation g+1; each step is atomic (rename).

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Owns the files of one peer directory. Not thread-safe: the peer calls it under its lock.
final class PeerStorage {
    let directory: String
    private(set) var header: FileHeader
    private var logFD: Int32
    private let lockFD: Int32
    /// Bytes in the log after its header: compaction starts when this outgrows the snapshot.
    private(set) var logBytes = 0
    private(set) var snapshotBytes = 0
    /// A torn tail found and cut off at open (for tests and logs).
    private(set) var truncatedBytesAtOpen = 0
    /// Set when the files are in a state further appends must not build on (a failed write could
    /// not be cut off, or a compaction stopped between its two renames); every later write fails.
    private var broken: PeerStorageError?

    var logPath: String { directory + "/log" }
    var snapshotPath: String { directory + "/snapshot" }

    private init(directory: String, header: FileHeader, logFD: Int32, lockFD: Int32) {
        self.directory = directory
        self.header = header
        self.logFD = logFD
        self.lockFD = lockFD
    }

    deinit {
        close(logFD)
        close(lockFD)  // releases the flock
    }

    /// Opens (or creates) `directory`; returns the storage and the commits to replay, in order.
    static func open(_ directory: String, newSite: () -> UInt64) throws(PeerStorageError) -> (PeerStorage, [Commit]) {
        try FileOps.makeDirectory(directory)
        let lockFD = try FileOps.lock(directory + "/LOCK")
        do {
            return try openLocked(directory, lockFD: lockFD, newSite: newSite)
        } catch {
            close(lockFD)
            throw error
        }
    }

    private static func openLocked(_ directory: String, lockFD: Int32, newSite: () -> UInt64) throws(PeerStorageError) -> (PeerStorage, [Commit]) {
        let snapshotPath = directory + "/snapshot", logPath = directory + "/log"
        var commits: [Commit] = []
        var header: FileHeader?
        var snapshotBytes = 0
        if FileOps.exists(snapshotPath) {
            let bytes = try FileOps.readAll(snapshotPath)
            snapshotBytes = bytes.count
            let (records, valid, _) = RecordFraming.split(bytes)
            guard valid == bytes.count else { throw .corrupt(path: snapshotPath, reason: "damaged record at offset \(valid)") }
            let decoded = try decode(records, path: snapshotPath)
            guard case .header(let h)? = decoded.first else { throw .corrupt(path: snapshotPath, reason: "no header") }
            guard case .end(let n)? = decoded.last else { throw .corrupt(path: snapshotPath, reason: "no end record") }
            for case .commit(let c) in decoded { commits.append(c) }
            guard n == commits.count else { throw .corrupt(path: snapshotPath, reason: "end record counts \(n) commits, found \(commits.count)") }
            header = h
        }
        var logCommits: [Commit] = []
        var logBytes = 0
        var truncated = 0
        var logUsable = false
        if FileOps.exists(logPath) {
            let bytes = try FileOps.readAll(logPath)
            let (records, valid, damaged) = RecordFraming.split(bytes)
            if damaged { throw .corrupt(path: logPath, reason: "damaged record at offset \(valid) with records after it (not a torn tail)") }
            truncated = bytes.count - valid
            if let first = records.first, case .header(let h) = try decodeOne(first, path: logPath) {
                if let snapshotHeader = header {
                    guard h.site == snapshotHeader.site else { throw .corrupt(path: logPath, reason: "site id differs from the snapshot's") }
                    logUsable = h.generation == snapshotHeader.generation
                } else {
                    header = h
                    logUsable = true
                }
                if logUsable {
                    for record in try decode(Array(records.dropFirst()), path: logPath) {
                        guard case .commit(let c) = record else { throw .corrupt(path: logPath, reason: "a header or end record inside the log") }
                        logCommits.append(c)
                    }
                    logBytes = valid - RecordFraming.headerBytes - records[records.startIndex].count
                }
            } else if !bytes.isEmpty {
                // The log is created whole (temporary file, fsync, rename): a log without a readable
                // header is damage, not a torn write. Starting over would drop its commits silently.
                throw .corrupt(path: logPath, reason: records.isEmpty ? "no readable header record" : "the first record is not a header")
            }
            if logUsable && truncated > 0 {
                let fd = try FileOps.open(logPath, O_WRONLY)
                defer { Glibc.close(fd) }
                try FileOps.truncate(fd, to: valid, path: logPath)
                try FileOps.fsync(fd, path: logPath)
            }
        }
        let h = header ?? FileHeader(site: newSite(), generation: 0)
        if !logUsable {
            // A new peer, or a log left behind by a compaction that finished its snapshot: start a fresh log.
            try FileOps.replace(logPath, with: RecordFraming.frame(PeerRecordCodec.encode(h)), directory: directory)
            truncated = 0
        }
        let fd = try FileOps.open(logPath, O_WRONLY | O_APPEND)
        let storage = PeerStorage(directory: directory, header: h, logFD: fd, lockFD: lockFD)
        storage.logBytes = logBytes
        storage.snapshotBytes = snapshotBytes
        storage.truncatedBytesAtOpen = truncated
        return (storage, commits + logCommits)
    }

    private static func decode(_ records: [ArraySlice<UInt8>], path: String) throws(PeerStorageError) -> [PeerRecord] {
        var out: [PeerRecord] = []
        out.reserveCapacity(records.count)
        for r in records { out.append(try decodeOne(r, path: path)) }
        return out
    }

    private static func decodeOne(_ record: ArraySlice<UInt8>, path: String) throws(PeerStorageError) -> PeerRecord {
        do { return try PeerRecordCodec.decode(record) } catch { throw .corrupt(path: path, reason: "\(error)") }
    }

    /// Appends one commit and makes it durable. On failure the log may hold a torn record; the
    /// caller discards the change in memory, and the next open cuts the tail (and a later append
    /// after a failed one first cuts it here, see `pendingTruncation`).
    func append(_ commit: Commit) throws(PeerStorageError) {
        if let broken { throw broken }
        let framed = RecordFraming.frame(PeerRecordCodec.encode(commit))
        let before = logBytes
        do {
            try FileOps.writeAll(logFD, framed, path: logPath)
            try FileOps.fsync(logFD, path: logPath)
        } catch {
            // Cut whatever part of the record reached the file, so later appends stay readable
            // (a torn record in the middle would hide every commit after it at the next open).
            let headerLength = RecordFraming.frame(PeerRecordCodec.encode(header)).count
            do { try FileOps.truncate(logFD, to: headerLength + before, path: logPath) } catch { broken = error }
            throw error
        }
        logBytes += framed.count
    }

    /// Whether the log has grown enough that rewriting the state is worth it.
    var wantsCompaction: Bool { logBytes > max(1 << 20, snapshotBytes) }

    /// Writes `commits` (the whole current state) as the snapshot of the next generation, then
    /// starts an empty log of that generation.
    func compact(_ commits: [Commit]) throws(PeerStorageError) {
        if let broken { throw broken }
        let next = FileHeader(site: header.site, generation: header.generation + 1)
        var bytes = RecordFraming.frame(PeerRecordCodec.encode(next))
        for c in commits { bytes += RecordFraming.frame(PeerRecordCodec.encode(c)) }
        bytes += RecordFraming.frame(PeerRecordCodec.encodeEnd(count: UInt64(commits.count)))
        try FileOps.replace(snapshotPath, with: bytes, directory: directory)
        // From here the snapshot alone is the state; the old log is ignored at open (older generation).
        header = next
        snapshotBytes = bytes.count
        let fd: Int32
        do {
            try FileOps.replace(logPath, with: RecordFraming.frame(PeerRecordCodec.encode(next)), directory: directory)
            fd = try FileOps.open(logPath, O_WRONLY | O_APPEND)
        } catch {
            // Appends to the old log would be ignored at the next open: refuse them.
            broken = error
            throw error
        }
        close(logFD)
        logFD = fd
        logBytes = 0
    }
}
