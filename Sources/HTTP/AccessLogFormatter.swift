import Glibc

/// Formats access-log lines into one byte buffer it owns and reuses (`AccessLogBuffer` keeps one
/// per loop): no allocation per line, and plain stores instead of `Array.append`.
///
/// Why not `[UInt8].append`: a line is some thirty appends, and each paid for a uniqueness and
/// capacity check, a dynamic exclusivity check on the class that held the array, and the generic
/// byte-by-byte path for `String.UTF8View`; callgrind put the text line at ~7,500 instructions
/// (+30 % on a `GET /healthz`) and the JSON one at ~11,000. Here `append` reserves an upper bound
/// for the whole line once, then writes with a cursor.
///
/// Line shapes (fixed field order; the same as swift-log's text lines and the JSON log lines):
///
///     2026-11-26T13:50:00.123Z info bigpeer.access : method=GET path=/healthz status=200 duration_us=87 bytes=2 request_id=1a2b-1-42 peer=127.0.0.1:5000 [HTTP] request
///     {"time":"2026-11-26T13:50:00.123Z","level":"info","label":"bigpeer.access","message":"request","method":"GET","path":"/healthz","status":200,"duration_us":87,"bytes":2,"request_id":"1a2b-1-42","peer":"127.0.0.1:5000"}
struct AccessLogFormatter: ~Copyable {
    private let json: Bool
    /// Everything from the end of the time up to the method's value, label included.
    private let afterTime: [UInt8]
    private var base: UnsafeMutablePointer<UInt8>
    private var capacity: Int
    /// Bytes of whole lines in `base`.
    private(set) var count = 0
    /// `2026-11-26T13:50:00` for `second` (the date changes once a second, not per line).
    private var stamp: (UInt64, UInt64, UInt32) = (0, 0, 0)
    private var second = -1

    /// Fixed bytes a line has besides its time, numbers and escaped strings (both formats fit).
    private static let fixedBytes = 256

    init(json: Bool, label: String, initialCapacity: Int) {
        self.json = json
        afterTime = Array((json ? #"Z","level":"info","label":""# : "Z info ").utf8) + Self.escaped(label, json: json)
            + Array((json ? #"","message":"request","method":""# : " : method=").utf8)
        capacity = max(initialCapacity, 1024)
        base = .allocate(capacity: capacity)
    }

    deinit { base.deallocate() }

    /// Lends the formatted lines to `body`, then empties the buffer for the next ones.
    mutating func withLines(_ body: (UnsafeRawBufferPointer) -> Void) {
        body(UnsafeRawBufferPointer(start: base, count: count))
        count = 0
    }

    mutating func append(_ line: AccessLogBuffer.Line, now: timespec) {
        // Strings may grow six-fold when escaped (`\u0001`); numbers take at most 20 bytes each.
        let id = line.requestID
        let strings = line.method.rawValue.utf8.count + line.path.utf8.count + line.peer.utf8.count
            + (id.given?.utf8.count ?? HTTPRequest.processTag.utf8.count + 40)
        reserve(Self.fixedBytes + afterTime.count + 3 * 20 + (json ? 6 : 1) * strings)
        if now.tv_sec != second { second = now.tv_sec; stamp = Self.utcStamp(now.tv_sec) }
        var out = Cursor(base + count)
        if json { out.put(#"{"time":""#) }
        withUnsafeBytes(of: stamp) { out.put(UnsafeRawBufferPointer(rebasing: $0.prefix(19))) }
        out.put(0x2E)
        out.putThreeDigits(now.tv_nsec / 1_000_000)
        afterTime.withUnsafeBytes { out.put($0) }
        out.put(line.method.rawValue, json: json)
        out.put(json ? #"","path":""# : " path=")
        out.put(line.path, json: json)
        out.put(json ? #"","status":"# : " status=")
        out.putDecimal(line.status)
        out.put(json ? #","duration_us":"# : " duration_us=")
        out.putDecimal(max(0, line.durationMicroseconds))
        out.put(json ? #","bytes":"# : " bytes=")
        if line.bytes < 0 { out.put(json ? "null" : "stream") } else { out.putDecimal(line.bytes) }
        out.put(json ? #","request_id":""# : " request_id=")
        if let given = id.given {
            out.put(given, json: json)
        } else {
            out.put(HTTPRequest.processTag, json: false)
            out.put(0x2D)
            out.putDecimal(id.loop)
            out.put(0x2D)
            out.putDecimal(Int(truncatingIfNeeded: id.number))
        }
        out.put(json ? #"","peer":""# : " peer=")
        out.put(line.peer, json: json)
        out.put(json ? "\"}\n" : " [HTTP] request\n")
        count = out.next - base
    }

    /// Makes room for `bytes` more (a line longer than the buffer grows it; it stays grown).
    private mutating func reserve(_ bytes: Int) {
        guard count + bytes > capacity else { return }
        let grown = UnsafeMutablePointer<UInt8>.allocate(capacity: count + bytes)
        grown.initialize(from: base, count: count)
        base.deallocate()
        base = grown
        capacity = count + bytes
    }

    private static func escaped(_ text: String, json: Bool) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 6 * text.utf8.count)
        let n = out.withUnsafeMutableBufferPointer { buffer -> Int in
            guard let start = buffer.baseAddress else { return 0 }
            var cursor = Cursor(start)
            cursor.put(text, json: json)
            return cursor.next - start
        }
        return Array(out.prefix(n))
    }

    /// `YYYY-MM-DDTHH:MM:SS` in UTC (RFC 3339), as 19 bytes of the tuple.
    static func utcStamp(_ seconds: Int) -> (UInt64, UInt64, UInt32) {
        var t = time_t(seconds)
        var parts = tm()
        gmtime_r(&t, &parts)
        var stamp: (UInt64, UInt64, UInt32) = (0, 0, 0)
        withUnsafeMutableBytes(of: &stamp) { raw in
            guard let start = raw.baseAddress else { return }
            var out = Cursor(start.assumingMemoryBound(to: UInt8.self))
            out.putTwoDigits((Int(parts.tm_year) + 1900) / 100)
            out.putTwoDigits(Int(parts.tm_year) + 1900)
            out.put(0x2D)
            out.putTwoDigits(Int(parts.tm_mon) + 1)
            out.put(0x2D)
            out.putTwoDigits(Int(parts.tm_mday))
            out.put(0x54)
            out.putTwoDigits(Int(parts.tm_hour))
            out.put(0x3A)
            out.putTwoDigits(Int(parts.tm_min))
            out.put(0x3A)
            out.putTwoDigits(Int(parts.tm_sec))
        }
        return stamp
    }
}

/// A write position in memory the caller has reserved room in (`AccessLogFormatter.reserve`).
private struct Cursor {
    var next: UnsafeMutablePointer<UInt8>

    init(_ start: UnsafeMutablePointer<UInt8>) { next = start }

    @inline(__always) mutating func put(_ byte: UInt8) {
        next.pointee = byte
        next += 1
    }

    @inline(__always) mutating func put(_ literal: StaticString) {
        next.update(from: literal.utf8Start, count: literal.utf8CodeUnitCount)
        next += literal.utf8CodeUnitCount
    }

    @inline(__always) mutating func put(_ bytes: UnsafeRawBufferPointer) {
        guard let source = bytes.baseAddress else { return }
        next.update(from: source.assumingMemoryBound(to: UInt8.self), count: bytes.count)
        next += bytes.count
    }

    /// A string's bytes; in JSON the inside of a string: `"`, `\` and control bytes escaped,
    /// other bytes (UTF-8 included) as they are. `withUTF8` reaches a native string's bytes
    /// directly (the generic `withContiguousStorageIfAvailable` on a `Substring` does not).
    mutating func put(_ text: String, json: Bool) {
        var text = text
        text.withUTF8 { put($0, json: json) }
    }

    mutating func put(_ text: Substring, json: Bool) {
        var text = text
        text.withUTF8 { put($0, json: json) }
    }

    private mutating func put(_ bytes: UnsafeBufferPointer<UInt8>, json: Bool) {
        guard json else { return put(UnsafeRawBufferPointer(bytes)) }
        var at = next  // a local cursor: the loop keeps it in a register
        for b in bytes {
            if b >= 0x20 && b != 0x22 && b != 0x5C {
                at.pointee = b
                at += 1
            } else {
                next = at
                putEscaped(b)
                at = next
            }
        }
        next = at
    }

    private mutating func putEscaped(_ b: UInt8) {
        put(0x5C)
        if b >= 0x20 { return put(b) }
        put("u00")
        put(b >> 4 == 0 ? 0x30 : 0x31)
        let low = b & 0xF
        put(low < 10 ? 0x30 + low : 0x57 + low)  // 0x57 + 10 is `a`
    }

    /// `value` (≥ 0) in decimal.
    mutating func putDecimal(_ value: Int) {
        var v = UInt(max(0, value))
        var digits = 1
        var rest = v
        while rest >= 10 { rest /= 10; digits += 1 }
        next += digits
        var at = next
        repeat {
            at -= 1
            at.pointee = UInt8(truncatingIfNeeded: v % 10) + 0x30
            v /= 10
        } while v > 0
    }

    @inline(__always) mutating func putTwoDigits(_ value: Int) {
        put(UInt8(truncatingIfNeeded: value / 10 % 10) + 0x30)
        put(UInt8(truncatingIfNeeded: value % 10) + 0x30)
    }

    @inline(__always) mutating func putThreeDigits(_ value: Int) {
        put(UInt8(truncatingIfNeeded: value / 100 % 10) + 0x30)
        putTwoDigits(value)
    }
}
