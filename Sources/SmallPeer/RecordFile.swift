// Files of length- and checksum-framed records, the small peer's on-disk format (docs/SMALLPEER.md).
//
//   +----------------------+----------------------+---------------------------+----
//   | length N (u32, BE)   | CRC-32 of payload    | N bytes: payload (CBOR)   | next record ...
//   |                      | (u32, BE, IEEE)      |                           |
//   +----------------------+----------------------+---------------------------+----
//
// A record is written with one `write` and made durable with `fsync` before the caller's
// operation returns. A crash (kill -9, power loss) can leave a torn last record: its length runs
// past the end of the file, or its checksum does not match. Reading stops at the first such
// record and the file is truncated there, so the next append follows the last whole record.

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A failed file operation or an unreadable file, with the path and errno where there is one.
public enum PeerStorageError: Error, Sendable, Equatable, CustomStringConvertible {
    case io(call: String, path: String, errno: Int32)
    /// Another process holds the directory's lock file.
    case locked(path: String)
    /// A whole record (its checksum matched) that does not decode: written by a newer version, or damaged.
    case corrupt(path: String, reason: String)

    public var description: String {
        switch self {
        case .io(let call, let path, let e): "\(call) \(path): \(String(cString: strerror(e)))"
        case .locked(let path): "\(path) is in use by another process (lock file held)"
        case .corrupt(let path, let why): "\(path) is unreadable: \(why)"
        }
    }
}

/// CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320), as zlib's `crc32`.
enum CRC32 {
    static let table: [UInt32] = (0..<256).map { i in
        var c = UInt32(i)
        for _ in 0..<8 { c = c & 1 != 0 ? 0xEDB8_8320 ^ (c >> 1) : c >> 1 }
        return c
    }

    static func checksum(_ bytes: some Collection<UInt8>) -> UInt32 {
        // Over raw memory when the collection is contiguous ([UInt8], ArraySlice): no iterator per byte.
        if let c = bytes.withContiguousStorageIfAvailable({ checksum(UnsafeRawBufferPointer($0)) }) { return c }
        var c: UInt32 = 0xFFFF_FFFF
        for b in bytes { c = table[Int((c ^ UInt32(b)) & 0xFF)] ^ (c >> 8) }
        return c ^ 0xFFFF_FFFF
    }

    static func checksum(_ raw: UnsafeRawBufferPointer) -> UInt32 {
        table.withUnsafeBufferPointer { t in
            var c: UInt32 = 0xFFFF_FFFF
            for b in raw { c = t[Int((c ^ UInt32(b)) & 0xFF)] ^ (c >> 8) }
            return c ^ 0xFFFF_FFFF
        }
    }
}

enum RecordFraming {
    static let headerBytes = 8
    /// Larger lengths are treated as damage: no record the peer writes comes near this.
    static let maxRecordBytes = 256 << 20

    static func frame(_ payload: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(payload.count + headerBytes)
        appendBE(UInt32(payload.count), to: &out)
        appendBE(CRC32.checksum(payload), to: &out)
        out.append(contentsOf: payload)
        return out
    }

    /// The whole records at the start of `bytes`, where the valid prefix ends, and whether what
    /// follows it is damage rather than a torn tail: a complete record whose checksum fails with
    /// more bytes after it. (Records are appended one at a time, each fsynced before the next, so
    /// a crash can only tear the last one.)
    static func split(_ bytes: [UInt8]) -> (records: [ArraySlice<UInt8>], validLength: Int, damagedBeforeEnd: Bool) {
        var records: [ArraySlice<UInt8>] = []
        var at = 0
        while bytes.count - at >= headerBytes {
            let length = Int(readBE(bytes, at)), crc = readBE(bytes, at + 4)
            guard length <= maxRecordBytes, bytes.count - at - headerBytes >= length else { break }
            let end = at + headerBytes + length
            let payload = bytes[(at + headerBytes)..<end]
            guard CRC32.checksum(payload) == crc else { return (records, at, end < bytes.count) }
            records.append(payload)
            at = end
        }
        return (records, at, false)
    }

    static func appendBE(_ v: UInt32, to out: inout [UInt8]) {
        out.append(UInt8(v >> 24)); out.append(UInt8((v >> 16) & 0xFF)); out.append(UInt8((v >> 8) & 0xFF)); out.append(UInt8(v & 0xFF))
    }

    static func readBE(_ b: [UInt8], _ at: Int) -> UInt32 {
        UInt32(b[at]) << 24 | UInt32(b[at + 1]) << 16 | UInt32(b[at + 2]) << 8 | UInt32(b[at + 3])
    }
}

/// Thin wrappers over POSIX file calls that retry EINTR and throw `PeerStorageError`.
enum FileOps {
    static func open(_ path: String, _ flags: Int32, mode: mode_t = 0o600) throws(PeerStorageError) -> Int32 {
        while true {
            let fd = Glibc.open(path, flags | O_CLOEXEC, mode)
            if fd >= 0 { return fd }
            if errno != EINTR { throw .io(call: "open", path: path, errno: errno) }
        }
    }

    static func exists(_ path: String) -> Bool { access(path, F_OK) == 0 }

    /// The whole file (files here are bounded by compaction; the caller checks sizes it trusts).
    static func readAll(_ path: String) throws(PeerStorageError) -> [UInt8] {
        let fd = try open(path, O_RDONLY)
        defer { close(fd) }
        var out: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n == 0 { return out }
            if n < 0 {
                if errno == EINTR { continue }
                throw .io(call: "read", path: path, errno: errno)
            }
            out.append(contentsOf: chunk[0..<n])
        }
    }

    static func writeAll(_ fd: Int32, _ bytes: [UInt8], path: String) throws(PeerStorageError) {
        var at = 0
        while at < bytes.count {
            let n = bytes.withUnsafeBytes { raw -> Int in
                guard let base = raw.baseAddress else { return 0 }
                return write(fd, base + at, raw.count - at)
            }
            if n < 0 {
                if errno == EINTR { continue }
                throw .io(call: "write", path: path, errno: errno)
            }
            at += n
        }
    }

    static func fsync(_ fd: Int32, path: String) throws(PeerStorageError) {
        while Glibc.fsync(fd) != 0 {
            if errno != EINTR { throw .io(call: "fsync", path: path, errno: errno) }
        }
    }

    static func truncate(_ fd: Int32, to length: Int, path: String) throws(PeerStorageError) {
        if ftruncate(fd, off_t(length)) != 0 { throw .io(call: "ftruncate", path: path, errno: errno) }
    }

    /// Makes a rename or a file creation in `directory` durable (POSIX: fsync the directory).
    static func syncDirectory(_ directory: String) throws(PeerStorageError) {
        let fd = try open(directory, O_RDONLY | O_DIRECTORY)
        defer { close(fd) }
        try fsync(fd, path: directory)
    }

    static func rename(_ from: String, _ to: String) throws(PeerStorageError) {
        if Glibc.rename(from, to) != 0 { throw .io(call: "rename", path: from, errno: errno) }
    }

    /// Writes `bytes` to `path` atomically: a temporary file, fsync, rename over `path`, fsync the directory.
    static func replace(_ path: String, with bytes: [UInt8], directory: String) throws(PeerStorageError) {
        let temporary = path + ".tmp"
        let fd = try open(temporary, O_WRONLY | O_CREAT | O_TRUNC)
        do {
            try writeAll(fd, bytes, path: temporary)
            try fsync(fd, path: temporary)
        } catch {
            close(fd)
            throw error
        }
        close(fd)
        try rename(temporary, path)
        try syncDirectory(directory)
    }

    static func makeDirectory(_ path: String) throws(PeerStorageError) {
        if mkdir(path, 0o700) != 0 && errno != EEXIST { throw .io(call: "mkdir", path: path, errno: errno) }
    }

    /// Takes an exclusive `flock` on `path` (created if needed); the lock lives as long as the fd.
    static func lock(_ path: String) throws(PeerStorageError) -> Int32 {
        let fd = try open(path, O_RDWR | O_CREAT)
        if flock(fd, LOCK_EX | LOCK_NB) != 0 {
            let e = errno
            close(fd)
            if e == EWOULDBLOCK { throw .locked(path: path) }
            throw .io(call: "flock", path: path, errno: e)
        }
        return fd
    }
}
