import CEpoll
import Glibc

/// Bytes waiting to be written to one socket, in order.
///
/// Small writes are appended to the last chunk (so a pipelined batch of responses leaves in one
/// `write`); large ones are queued as their own chunk without copying. Fully written small chunks
/// are recycled as the next staging buffer, so a keep-alive connection that writes one response at
/// a time allocates nothing here after its first response.
struct OutputQueue {
    private var chunks: [[UInt8]] = []
    /// Bytes of `chunks[0]` already written.
    private var headOffset = 0
    private var spare: [UInt8] = []
    private(set) var count = 0
    /// Whether the last chunk may be appended to (it is a staging chunk, not a caller's array).
    private var lastIsStaging = false

    /// Chunks at least this large are queued as-is instead of being copied into the staging chunk.
    static let copyThreshold = 16 * 1024
    /// A staging chunk is not grown past this; a new one starts.
    static let stagingLimit = 64 * 1024
    /// Recycled buffers larger than this are freed rather than kept by an idle connection.
    static let spareKeepLimit = 4 * 1024

    var isEmpty: Bool { count == 0 }

    mutating func append(_ bytes: [UInt8]) {
        guard !bytes.isEmpty else { return }
        if bytes.count >= Self.copyThreshold {
            chunks.append(bytes)
            lastIsStaging = false
            count += bytes.count
        } else {
            bytes.withUnsafeBytes { append(copying: $0) }
        }
    }

    mutating func append(copying bytes: UnsafeRawBufferPointer) {
        guard bytes.count > 0 else { return }
        appendStaging { $0.append(contentsOf: bytes) }
    }

    /// Lets a serializer write straight into the staging chunk (no intermediate array).
    mutating func appendStaging(_ body: (inout [UInt8]) -> Void) {
        if !lastIsStaging || chunks[chunks.count - 1].count >= Self.stagingLimit {
            var fresh = spare
            spare = []
            fresh.removeAll(keepingCapacity: true)
            chunks.append(fresh)
            lastIsStaging = true
        }
        let last = chunks.count - 1
        let before = chunks[last].count
        body(&chunks[last])
        count += chunks[last].count - before
    }

    /// Writes as much as the socket takes with one `send` or `sendmsg` (gathering, like `writev`). Returns bytes written, or
    /// `.wouldBlock`.
    mutating func writePlain(fd: Int32) throws(IOError) -> IOResult<Int> {
        guard !isEmpty else { return .processed(0) }
        let n: IOResult<Int>
        if chunks.count == 1 {
            let off = headOffset
            n = try chunks[0].withUnsafeBytes { raw in
                Result { () throws(IOError) -> IOResult<Int> in
                    try Syscall.nonBlocking("send") { Glibc.send(fd, raw.baseAddress! + off, raw.count - off, Int32(MSG_NOSIGNAL)) }
                }
            }.get()
        } else {
            n = try writeVector(fd: fd)
        }
        if case .processed(let written) = n { consume(written) }
        return n
    }

    private mutating func writeVector(fd: Int32) throws(IOError) -> IOResult<Int> {
        let n = min(chunks.count, 64)
        return try withUnsafeTemporaryAllocation(of: iovec.self, capacity: n) { (iov) throws(IOError) -> IOResult<Int> in
            try Self.pin(chunks, index: 0, count: n, headOffset: headOffset, iov: iov) { () throws(IOError) -> IOResult<Int> in
                var msg = msghdr()
                msg.msg_iov = iov.baseAddress
                msg.msg_iovlen = n
                // sendmsg rather than writev: MSG_NOSIGNAL turns a vanished peer into EPIPE, not SIGPIPE.
                return try Syscall.nonBlocking("sendmsg") { Glibc.sendmsg(fd, &msg, Int32(MSG_NOSIGNAL)) }
            }
        }
    }

    /// Fills `iov` while every chunk's storage is pinned by a nested `withUnsafeBytes` (at most 64
    /// deep), then runs `body` inside the innermost one: no pointer outlives its closure.
    private static func pin<R>(
        _ chunks: [[UInt8]], index: Int, count: Int, headOffset: Int, iov: UnsafeMutableBufferPointer<iovec>,
        _ body: () throws(IOError) -> R
    ) throws(IOError) -> R {
        if index == count { return try body() }
        return try chunks[index].withUnsafeBytes { raw in
            let off = index == 0 ? headOffset : 0
            iov[index] = iovec(iov_base: UnsafeMutableRawPointer(mutating: raw.baseAddress! + off), iov_len: raw.count - off)
            return Result { () throws(IOError) -> R in
                try pin(chunks, index: index + 1, count: count, headOffset: headOffset, iov: iov, body)
            }
        }.get()
    }

    /// Offers the queued bytes, head first, to `write` (TLS), which returns how much it took.
    mutating func writeEach(_ write: (UnsafeRawBufferPointer) -> Int) {
        while !isEmpty {
            let n = chunks[0].withUnsafeBytes { raw in write(UnsafeRawBufferPointer(rebasing: raw[headOffset...])) }
            if n <= 0 { return }
            consume(n)
        }
    }

    /// Drops everything (the connection is closing).
    mutating func removeAll() {
        chunks = []
        spare = []
        lastIsStaging = false
        headOffset = 0
        count = 0
    }

    private mutating func consume(_ n: Int) {
        var n = n
        count -= n
        while n > 0 {
            let left = chunks[0].count - headOffset
            if n < left { headOffset += n; return }
            n -= left
            let done = chunks.removeFirst()
            headOffset = 0
            if chunks.isEmpty { lastIsStaging = false }
            if done.capacity <= Self.spareKeepLimit && spare.capacity == 0 { spare = done }
        }
    }
}
