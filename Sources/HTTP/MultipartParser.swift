// multipart/form-data (RFC 7578) on the multipart syntax of RFC 2046 §5.1.1, parsed without I/O:
//
//   multipart-body := [preamble CRLF] dash-boundary transport-padding CRLF
//                     body-part *encapsulation
//                     close-delimiter transport-padding [CRLF epilogue]
//   dash-boundary  := "--" boundary                 (boundary: 1–70 bchars, not ending in space)
//   encapsulation  := delimiter transport-padding CRLF body-part
//   delimiter      := CRLF dash-boundary
//   close-delimiter := delimiter "--"
//   body-part      := MIME-part-headers CRLF [octets]
//
// The parser treats the body as if it began with CRLF, so the first dash-boundary is found by the
// same `delimiter` search as every later one. Part content is emitted as it is scanned, keeping
// back only `delimiter.count - 1` bytes that could be the start of a delimiter split across reads,
// so memory stays bounded however large a part is.

/// What the multipart parser found in the bytes it has.
public enum MultipartEvent: Sendable {
    case needMoreData
    /// A part begins; its header fields (RFC 7578 §4.2: `Content-Disposition` names it).
    case partHead(HTTPHeaders)
    /// Content of the current part (any number of these, in order).
    case data([UInt8])
    /// The current part is complete.
    case partEnd
    /// The close-delimiter: the body is complete (anything after is epilogue, ignored).
    case end
}

public enum MultipartError: Error, Sendable, Equatable, CustomStringConvertible {
    case truncated
    case malformedDelimiter
    case malformedHeaders
    case headersTooLarge
    case tooManyParts

    public var description: String {
        switch self {
        case .truncated: "the multipart body ends before its close-delimiter"
        case .malformedDelimiter: "a multipart boundary line is malformed"
        case .malformedHeaders: "a multipart part's header section is malformed"
        case .headersTooLarge: "a multipart part's header section is too large"
        case .tooManyParts: "the multipart body has too many parts"
        }
    }
}

/// A sans-I/O multipart parser: `feed` bytes, call `next()` until `.needMoreData`; `finish()` when
/// the input ends. After an error it stays failed.
public struct MultipartParser: Sendable {
    public struct Limits: Sendable {
        public var maxHeaderBytes = 16 * 1024
        public var maxParts = 64
        public init() {}
    }

    enum State: Sendable, Equatable { case preamble, afterDelimiter, headers, content, epilogue, failed(MultipartError) }

    private let delimiter: [UInt8]
    private let limits: Limits
    private var buffer: [UInt8] = [0x0D, 0x0A]  // the virtual CRLF before the first dash-boundary
    private var position = 0
    private var parts = 0
    private(set) var state = State.preamble

    /// - Parameter boundary: from the `Content-Type` (see `boundary(fromContentType:)`).
    public init(boundary: String, limits: Limits = Limits()) {
        delimiter = Array("\r\n--\(boundary)".utf8)
        self.limits = limits
    }

    public mutating func feed(_ bytes: [UInt8]) {
        if position > 64 * 1024 || position == buffer.count {
            buffer.removeFirst(position)
            position = 0
        }
        buffer.append(contentsOf: bytes)
    }

    /// The input ended: an error unless the close-delimiter was seen.
    public mutating func finish() throws(MultipartError) {
        if case .failed(let e) = state { throw e }
        guard state == .epilogue else { try fail(.truncated) }
    }

    public mutating func next() throws(MultipartError) -> MultipartEvent {
        switch state {
        case .failed(let e):
            throw e
        case .epilogue:
            position = buffer.count
            return .needMoreData
        case .preamble:
            guard let at = find(delimiter, from: position) else {
                position = max(position, buffer.count - (delimiter.count - 1))  // discard preamble
                return .needMoreData
            }
            position = at + delimiter.count
            state = .afterDelimiter
            return try next()
        case .afterDelimiter:
            return try afterDelimiter()
        case .headers:
            return try headers()
        case .content:
            if let at = find(delimiter, from: position) {
                if at > position {
                    defer { position = at }
                    return .data(Array(buffer[position..<at]))
                }
                position = at + delimiter.count
                state = .afterDelimiter
                return .partEnd
            }
            let safe = buffer.count - (delimiter.count - 1)
            guard safe > position else { return .needMoreData }
            defer { position = safe }
            return .data(Array(buffer[position..<safe]))
        }
    }

    /// After a delimiter: `--` closes the body; else transport padding (LWSP) then CRLF, then a part.
    private mutating func afterDelimiter() throws(MultipartError) -> MultipartEvent {
        var i = position
        guard i + 2 <= buffer.count else { return .needMoreData }
        if buffer[i] == 0x2D && buffer[i + 1] == 0x2D {
            position = i + 2
            state = .epilogue
            return .end
        }
        while i < buffer.count, buffer[i] == 0x20 || buffer[i] == 0x09 {
            i += 1
            if i - position > 256 { try fail(.malformedDelimiter) }
        }
        guard i + 2 <= buffer.count else { return .needMoreData }
        guard buffer[i] == 0x0D, buffer[i + 1] == 0x0A else { try fail(.malformedDelimiter) }
        parts += 1
        guard parts <= limits.maxParts else { try fail(.tooManyParts) }
        position = i + 2
        state = .headers
        return try next()
    }

    /// Header fields up to the empty line (RFC 2046 §5.1.1; field syntax as in RFC 5322 without folding).
    private mutating func headers() throws(MultipartError) -> MultipartEvent {
        let end: Int
        if buffer.count - position >= 2, buffer[position] == 0x0D, buffer[position + 1] == 0x0A {
            end = position  // no header fields
        } else if let at = find([0x0D, 0x0A, 0x0D, 0x0A], from: position) {
            end = at + 2
        } else {
            if buffer.count - position > limits.maxHeaderBytes { try fail(.headersTooLarge) }
            return .needMoreData
        }
        guard end - position <= limits.maxHeaderBytes else { try fail(.headersTooLarge) }
        var fields = HTTPHeaders()
        var lineStart = position
        while lineStart < end {
            guard let lineEnd = find([0x0D, 0x0A], from: lineStart), lineEnd < end else { try fail(.malformedHeaders) }
            let line = buffer[lineStart..<lineEnd]
            // Values may hold any bytes (CR LF ends the line). More lenient than HTTP on purpose: form
            // field names come from arbitrary user data (RFC 7578 §5.1) and clients send them raw;
            // the part is delimited by the boundary, so there is no smuggling risk. Users of a value
            // validate it for their purpose (the upload route keeps only a printable media type).
            guard let colon = line.firstIndex(of: UInt8(ascii: ":")), colon > lineStart,
                  line[lineStart..<colon].allSatisfy(ByteClass.isTchar)
            else { try fail(.malformedHeaders) }
            let name = String(decoding: line[lineStart..<colon], as: UTF8.self)
            let value = String(decoding: line[(colon + 1)...], as: UTF8.self)
            fields.add(name, String(trimOWS(value[...])))
            lineStart = lineEnd + 2
        }
        position = end + 2
        state = .content
        return .partHead(fields)
    }

    private func find(_ needle: [UInt8], from start: Int) -> Int? {
        guard let first = needle.first, buffer.count - start >= needle.count else { return nil }
        var i = start
        let last = buffer.count - needle.count
        while i <= last {
            if buffer[i] == first {
                var j = 1
                while j < needle.count && buffer[i + j] == needle[j] { j += 1 }
                if j == needle.count { return i }
            }
            i += 1
        }
        return nil
    }

    private mutating func fail(_ e: MultipartError) throws(MultipartError) -> Never {
        state = .failed(e)
        throw e
    }

    // MARK: - Header helpers

    /// The `boundary` parameter of a `multipart/form-data` media type (RFC 7578 §4.1, RFC 2046
    /// §5.1.1: 1–70 bchars, not ending in a space), or nil if the type or boundary is invalid.
    public static func boundary(fromContentType value: String) -> String? {
        let (type, parameters) = parameters(of: value)
        guard type == "multipart/form-data", let b = parameters["boundary"], (1...70).contains(b.utf8.count), b.last != " " else { return nil }
        let bchars = Set("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ'()+_,-./:=? ".utf8)
        return b.utf8.allSatisfy(bchars.contains) ? b : nil
    }

    /// Splits `type; name=value; name="quoted \" value"` into the lowercased first token and its
    /// parameters (names lowercased; RFC 9110 §5.6.6). Malformed parameters are skipped.
    public static func parameters(of value: String) -> (String, [String: String]) {
        var chars = Substring(value)
        func token() -> Substring {
            let t = chars.prefix { $0 != ";" && $0 != "=" }
            chars = chars.dropFirst(t.count)
            return trimOWS(t)
        }
        let type = token().lowercased()
        var out: [String: String] = [:]
        while chars.first == ";" {
            chars = chars.dropFirst()
            let name = token().lowercased()
            guard chars.first == "=" else { continue }
            chars = chars.dropFirst()
            while chars.first == " " || chars.first == "\t" { chars = chars.dropFirst() }
            var v = ""
            if chars.first == "\"" {
                chars = chars.dropFirst()
                var closed = false
                while let c = chars.first {
                    chars = chars.dropFirst()
                    if c == "\\", let n = chars.first { v.append(n); chars = chars.dropFirst(); continue }
                    if c == "\"" { closed = true; break }
                    v.append(c)
                }
                guard closed else { break }
                chars = chars.drop { $0 != ";" }
            } else {
                v = String(token())
            }
            if !name.isEmpty && out[name] == nil { out[name] = v }
        }
        return (type, out)
    }
}
