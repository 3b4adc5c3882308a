import Glibc
import Sockets

/// A response a handler returns. `body` is either bytes (sent with `Content-Length`, in the same
/// write as the head) or a stream (sent chunked, pulled with backpressure).
public struct HTTPResponse: Sendable {
    public var status: HTTPStatus
    public var headers: HTTPHeaders
    public var body: HTTPResponseBody

    public init(status: HTTPStatus = .ok, headers: HTTPHeaders = HTTPHeaders(), body: HTTPResponseBody = .bytes([])) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    public init(status: HTTPStatus = .ok, contentType: String, body: [UInt8]) {
        self.init(status: status, headers: ["Content-Type": contentType], body: .bytes(body))
    }

    public static func text(_ text: String, status: HTTPStatus = .ok) -> HTTPResponse {
        HTTPResponse(status: status, contentType: "text/plain; charset=utf-8", body: Array(text.utf8))
    }

    public static func json(_ bytes: [UInt8], status: HTTPStatus = .ok) -> HTTPResponse {
        HTTPResponse(status: status, contentType: "application/json", body: bytes)
    }

    /// The JSON error body of an error the server raises itself (no route, a malformed or late
    /// request): `{"error":{"description":"...","requestId":"...","status":404}}`, the error
    /// object of Ditto's HTTP API that BigPeer's routes answer with too (docs/API.md, "Errors").
    /// Members in sorted key order, as the Values serializer writes them. `requestId` is absent
    /// when the request was never read.
    public static func error(_ status: HTTPStatus, message: String, requestID: String? = nil) -> HTTPResponse {
        var out = #"{"error":{"description":"#
        appendJSONString(message, to: &out)
        if let requestID {
            out += #","requestId":"#
            appendJSONString(requestID, to: &out)
        }
        out += #","status":"# + String(status.code) + "}}"
        return .json(Array(out.utf8), status: status)
    }
}

/// The content of a response.
public enum HTTPResponseBody: Sendable {
    case bytes([UInt8])
    /// Produced by the closure, which runs on the connection's loop (task executor preference)
    /// and may suspend on `writer.write` when the peer is slow. Sent with chunked coding.
    case stream(@Sendable (HTTPBodyWriter) async throws -> Void)
    /// A stream of exactly `length` bytes, sent with `Content-Length` instead of chunked coding
    /// (downloads: clients see the size up front, and `HEAD` reports it without running the
    /// producer). Writing more than `length`, or finishing with fewer, closes the connection, so
    /// a wrong body is never taken for a complete one.
    case sizedStream(length: Int, @Sendable (HTTPBodyWriter) async throws -> Void)
}

/// Appends `s` as a JSON string literal (RFC 8259 §7).
func appendJSONString(_ s: String, to out: inout String) {
    out.append("\"")
    for scalar in s.unicodeScalars {
        switch scalar {
        case "\"": out.append("\\\"")
        case "\\": out.append("\\\\")
        case "\n": out.append("\\n")
        case "\r": out.append("\\r")
        case "\t": out.append("\\t")
        case let c where c.value < 0x20:
            let hex = String(c.value, radix: 16)
            out.append("\\u" + String(repeating: "0", count: 4 - hex.count) + hex)
        default: out.unicodeScalars.append(scalar)
        }
    }
    out.append("\"")
}

/// Serializes response heads straight into a connection's output buffer.
enum ResponseHeadWriter {
    static let crlf: [UInt8] = [0x0D, 0x0A]

    /// How the content is framed on the wire.
    enum Framing { case length(Int), chunked, untilClose, none }

    static func write(
        into out: inout [UInt8], version: HTTPVersion, status: HTTPStatus, headers: HTTPHeaders,
        framing: Framing, keepAlive: Bool, date: DateCache, serverName: [UInt8], passConnectionHeader: Bool = false,
        requestID: HTTPRequest.LogID? = nil
    ) {
        out.append(contentsOf: version == .http1_1 ? "HTTP/1.1 ".utf8 : "HTTP/1.0 ".utf8)
        appendDecimal(status.code, to: &out)
        out.append(0x20)
        out.append(contentsOf: status.reason.utf8)
        out.append(contentsOf: crlf)
        for field in headers.fields {
            // Reject what would split the response: names must be tokens, values free of CR/LF/NUL.
            guard isValidName(field.name), isValidValue(field.value) else { continue }
            if isFramingHeader(field.name) && !(passConnectionHeader && HTTPHeaders.same(field.name, "connection")) {
                continue  // framing is ours to decide
            }
            out.append(contentsOf: field.name.utf8)
            out.append(contentsOf: ": ".utf8)
            out.append(contentsOf: field.value.utf8)
            out.append(contentsOf: crlf)
        }
        if !serverName.isEmpty {
            out.append(contentsOf: "Server: ".utf8)
            out.append(contentsOf: serverName)
            out.append(contentsOf: crlf)
        }
        out.append(contentsOf: "Date: ".utf8)
        out.append(contentsOf: date.current())
        out.append(contentsOf: crlf)
        if let requestID, !headers.contains("X-Request-ID") {
            out.append(contentsOf: "X-Request-ID: ".utf8)
            requestID.append(to: &out)
            out.append(contentsOf: crlf)
        }
        switch framing {
        case .length(let n):
            out.append(contentsOf: "Content-Length: ".utf8)
            appendDecimal(n, to: &out)
            out.append(contentsOf: crlf)
        case .chunked:
            out.append(contentsOf: "Transfer-Encoding: chunked\r\n".utf8)
        case .untilClose, .none:
            break
        }
        if !keepAlive {
            out.append(contentsOf: "Connection: close\r\n".utf8)
        } else if version == .http1_0 {
            out.append(contentsOf: "Connection: keep-alive\r\n".utf8)
        }
        out.append(contentsOf: crlf)
    }

    static func appendDecimal(_ value: Int, to out: inout [UInt8]) {
        if value == 0 { out.append(0x30); return }
        var v = value
        var digits: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8,
                     UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8) =
            (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        var n = 0
        withUnsafeMutableBytes(of: &digits) { d in
            while v > 0 && n < 20 { d[n] = UInt8(v % 10) + 0x30; v /= 10; n += 1 }
            for i in stride(from: n - 1, through: 0, by: -1) { out.append(d[i]) }
        }
    }

    static func appendHex(_ value: Int, to out: inout [UInt8]) {
        let digits = Array("0123456789abcdef".utf8)
        var shift = (Int.bitWidth - value.leadingZeroBitCount + 3) / 4 * 4 - 4
        if value == 0 { out.append(0x30); return }
        while shift >= 0 { out.append(digits[(value >> shift) & 0xF]); shift -= 4 }
    }

    static func isValidName(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.allSatisfy { ByteClass.isTchar($0) }
    }

    static func isValidValue(_ value: String) -> Bool {
        value.utf8.allSatisfy { ByteClass.isFieldValue($0) }
    }

    static func isFramingHeader(_ name: String) -> Bool {
        HTTPHeaders.same(name, "content-length") || HTTPHeaders.same(name, "transfer-encoding")
            || HTTPHeaders.same(name, "connection") || HTTPHeaders.same(name, "date") || HTTPHeaders.same(name, "server")
    }
}

/// The `Date` header value (IMF-fixdate, RFC 9110 §5.6.7), formatted at most once per second per
/// loop. Loop-owned.
final class DateCache {
    private var second: time_t = -1
    private var value: [UInt8] = []

    func current() -> [UInt8] {
        let now = time(nil)
        if now != second {
            second = now
            value = Self.format(now)
        }
        return value
    }

    static func format(_ t: time_t) -> [UInt8] {
        var t = t
        var tm = Glibc.tm()
        gmtime_r(&t, &tm)
        let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        func two(_ v: Int32) -> String { v < 10 ? "0\(v)" : "\(v)" }
        let s = "\(days[Int(tm.tm_wday)]), \(two(tm.tm_mday)) \(months[Int(tm.tm_mon)]) \(tm.tm_year + 1900) "
            + "\(two(tm.tm_hour)):\(two(tm.tm_min)):\(two(tm.tm_sec)) GMT"
        return Array(s.utf8)
    }
}
