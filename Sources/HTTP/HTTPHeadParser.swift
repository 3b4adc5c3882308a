/// `method SP request-target SP HTTP-version` (RFC 9112 §3).
struct RequestLine {
    var method: HTTPMethod
    var target: String
    var version: HTTPVersion

    init(_ line: UnsafeRawBufferPointer) throws(HTTPParseError) {
        guard let sp1 = line.firstIndex(of: 0x20) else { throw .malformed(.invalidMethod) }
        let methodBytes = UnsafeRawBufferPointer(rebasing: line[..<sp1])
        guard !methodBytes.isEmpty, methodBytes.allSatisfy({ ByteClass.isTchar($0) }) else { throw .malformed(.invalidMethod) }
        let rest = UnsafeRawBufferPointer(rebasing: line[(sp1 + 1)...])
        guard let sp2 = rest.firstIndex(of: 0x20) else { throw .malformed(.invalidVersion) }
        let targetBytes = UnsafeRawBufferPointer(rebasing: rest[..<sp2])
        guard !targetBytes.isEmpty, targetBytes.allSatisfy(ByteClass.isTargetByte) else { throw .malformed(.invalidTarget) }
        version = try parseVersion(UnsafeRawBufferPointer(rebasing: rest[(sp2 + 1)...]))
        method = HTTPMethod.from(methodBytes)
        target = String(decoding: targetBytes, as: UTF8.self)
        // origin-form starts with "/", asterisk-form is "*" (OPTIONS), absolute-form has a scheme;
        // authority-form belongs to CONNECT, which this server does not proxy.
        let first = targetBytes[0]
        guard first == UInt8(ascii: "/") || (targetBytes.count == 1 && first == UInt8(ascii: "*"))
            || target.hasPrefix("http://") || target.hasPrefix("https://")
        else { throw .malformed(.invalidTarget) }
    }
}

/// `HTTP-version SP status-code SP [ reason-phrase ]` (RFC 9112 §4).
struct StatusLine {
    var version: HTTPVersion
    var status: HTTPStatus

    init(_ line: UnsafeRawBufferPointer) throws(HTTPParseError) {
        guard line.count >= 12, line[8] == 0x20 else { throw .malformed(.invalidStatusLine) }
        version = try parseVersion(UnsafeRawBufferPointer(rebasing: line[..<8]))
        var code = 0
        for i in 9..<12 {
            let d = line[i]
            guard d >= 0x30 && d <= 0x39 else { throw .malformed(.invalidStatusLine) }
            code = code * 10 + Int(d - 0x30)
        }
        guard code >= 100, line.count == 12 || line[12] == 0x20 else { throw .malformed(.invalidStatusLine) }
        let reason = line.count > 13 ? String(decoding: UnsafeRawBufferPointer(rebasing: line[13...]), as: UTF8.self) : ""
        status = HTTPStatus(code, reason)
    }
}

/// `HTTP/1.1` or `HTTP/1.0`; any other well-formed version is 505, anything else 400.
private func parseVersion(_ v: UnsafeRawBufferPointer) throws(HTTPParseError) -> HTTPVersion {
    guard v.count == 8, v.starts(with: "HTTP/".utf8), v[6] == UInt8(ascii: "."),
          (0x30...0x39).contains(v[5]), (0x30...0x39).contains(v[7])
    else { throw .malformed(.invalidVersion) }
    if v[5] == UInt8(ascii: "1") && v[7] == UInt8(ascii: "1") { return .http1_1 }
    if v[5] == UInt8(ascii: "1") && v[7] == UInt8(ascii: "0") { return .http1_0 }
    throw .versionNotSupported
}

/// Parses the field lines of a head and decides the message framing (RFC 9112 §6.3), rejecting
/// every ambiguous combination a smuggling attack relies on.
struct HeaderSectionParser {
    var headers = HTTPHeaders()
    var contentLength: Int?
    var transferEncodingSeen = false
    var chunked = false
    var unknownCoding = false
    var hostCount = 0
    var expectContinue = false
    var unknownExpectation = false
    var connectionClose = false
    var connectionKeepAlive = false
    let maxBodyBytes: Int

    init(lines: [UnsafeRawBufferPointer], limits: HTTPParserLimits) throws(HTTPParseError) {
        maxBodyBytes = limits.maxBodyBytes
        for line in lines {
            let (name, value, nameBytes, valueBytes) = try Self.fieldParts(line)
            headers.add(name, value)
            try inspect(nameBytes, valueBytes)
        }
    }

    static func field(_ line: UnsafeRawBufferPointer) throws(HTTPParseError) -> (name: String, value: String) {
        let (name, value, _, _) = try fieldParts(line)
        return (name, value)
    }

    /// `field-name ":" OWS field-value OWS` (RFC 9112 §5.1, §5.2).
    private static func fieldParts(_ line: UnsafeRawBufferPointer) throws(HTTPParseError)
        -> (String, String, UnsafeRawBufferPointer, UnsafeRawBufferPointer)
    {
        let first = line[0]
        if first == 0x20 || first == 0x09 { throw .malformed(.obsFold) }  // §5.2: obs-fold
        var colon = 0
        while colon < line.count {
            let b = line[colon]
            if b == UInt8(ascii: ":") { break }
            if b == 0x20 || b == 0x09 { throw .malformed(.whitespaceBeforeColon) }  // §5.1: MUST 400
            guard ByteClass.isTchar(b) else { throw .malformed(.invalidHeaderName) }
            colon += 1
        }
        guard colon > 0, colon < line.count else { throw .malformed(.invalidHeaderName) }
        var start = colon + 1
        var end = line.count
        while start < end, line[start] == 0x20 || line[start] == 0x09 { start += 1 }
        while end > start, line[end - 1] == 0x20 || line[end - 1] == 0x09 { end -= 1 }
        for i in start..<end where !ByteClass.isFieldValue(line[i]) { throw .malformed(.invalidHeaderValue) }
        let nameBytes = UnsafeRawBufferPointer(rebasing: line[..<colon])
        let valueBytes = UnsafeRawBufferPointer(rebasing: line[start..<end])
        return (String(decoding: nameBytes, as: UTF8.self), String(decoding: valueBytes, as: UTF8.self), nameBytes, valueBytes)
    }

    private mutating func inspect(_ name: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) throws(HTTPParseError) {
        switch name.count {
        case 14 where ByteClass.equalsLowercase(name, "content-length"):
            // §6.3: a repeated or list-valued Content-Length is rejected, not reconciled.
            guard contentLength == nil else { throw .malformed(.duplicateContentLength) }
            guard !value.isEmpty, value.count <= 18, value.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else {
                throw .malformed(.invalidContentLength)
            }
            contentLength = value.reduce(0) { $0 * 10 + Int($1 - 0x30) }
        case 17 where ByteClass.equalsLowercase(name, "transfer-encoding"):
            transferEncodingSeen = true
            for element in value.split(separator: UInt8(ascii: ","), omittingEmptySubsequences: true) {
                let coding = trimmed(UnsafeRawBufferPointer(rebasing: element))
                if coding.isEmpty { continue }
                if ByteClass.equalsLowercase(coding, "chunked") {
                    // chunked must be applied exactly once, last (§6.1, §7).
                    if chunked { throw .malformed(.invalidTransferEncoding) }
                    chunked = true
                } else if chunked {
                    unknownCoding = true  // something after chunked: not the final coding
                } else {
                    unknownCoding = true
                }
            }
        case 4 where ByteClass.equalsLowercase(name, "host"):
            hostCount += 1
        case 6 where ByteClass.equalsLowercase(name, "expect"):
            if ByteClass.equalsLowercase(trimmed(value), "100-continue") { expectContinue = true } else { unknownExpectation = true }
        case 10 where ByteClass.equalsLowercase(name, "connection"):
            for element in value.split(separator: UInt8(ascii: ",")) {
                let token = trimmed(UnsafeRawBufferPointer(rebasing: element))
                if ByteClass.equalsLowercase(token, "close") { connectionClose = true }
                if ByteClass.equalsLowercase(token, "keep-alive") { connectionKeepAlive = true }
            }
        default:
            break
        }
    }

    private func trimmed(_ b: UnsafeRawBufferPointer) -> UnsafeRawBufferPointer {
        var s = 0, e = b.count
        while s < e, b[s] == 0x20 || b[s] == 0x09 { s += 1 }
        while e > s, b[e - 1] == 0x20 || b[e - 1] == 0x09 { e -= 1 }
        return UnsafeRawBufferPointer(rebasing: b[s..<e])
    }

    private func keepAlive(_ version: HTTPVersion) -> Bool {
        version == .http1_1 ? !connectionClose : (connectionKeepAlive && !connectionClose)
    }

    /// Framing of a request (RFC 9112 §6.3), checked in an order that gives each case one status.
    mutating func requestHead(start: RequestLine) throws(HTTPParseError) -> (HTTPParserEvent, HTTPParser.State) {
        if transferEncodingSeen {
            if start.version == .http1_0 { throw .malformed(.transferEncodingInHTTP10) }  // §6.1
            if contentLength != nil { throw .malformed(.contentLengthWithTransferEncoding) }  // §6.1
            if unknownCoding { throw .unsupportedTransferCoding }  // §6.1: 501
            if !chunked { throw .malformed(.invalidTransferEncoding) }
        }
        if start.version == .http1_1 && hostCount == 0 { throw .malformed(.missingHost) }  // §3.2
        if hostCount > 1 { throw .malformed(.duplicateHost) }
        if unknownExpectation { throw .unsupportedExpectation }
        if let length = contentLength, length > maxBodyBytes { throw .contentTooLarge }  // before any content is read
        let state: HTTPParser.State
        if chunked {
            state = .chunkSize
        } else {
            state = .fixedBody(remaining: contentLength ?? 0)
        }
        let head = HTTPRequestHead(
            method: start.method, target: start.target, version: start.version, headers: headers,
            keepAlive: keepAlive(start.version), expectsContinue: expectContinue && start.version == .http1_1)
        return (.requestHead(head), state)
    }

    /// Framing of a response to `requestMethod` (RFC 9112 §6.3 items 1–8).
    mutating func responseHead(start: StatusLine, requestMethod: HTTPMethod) throws(HTTPParseError) -> (HTTPParserEvent, HTTPParser.State) {
        if transferEncodingSeen && contentLength != nil { throw .malformed(.contentLengthWithTransferEncoding) }
        let state: HTTPParser.State
        if requestMethod == .HEAD || start.status.forbidsBody {
            state = .fixedBody(remaining: 0)
        } else if transferEncodingSeen {
            state = chunked && !unknownCoding ? .chunkSize : .untilClose
        } else if let length = contentLength {
            state = .fixedBody(remaining: length)
        } else {
            state = .untilClose
        }
        let untilClose = state == .untilClose
        let head = HTTPResponseHead(version: start.version, status: start.status, headers: headers,
                                    keepAlive: keepAlive(start.version) && !untilClose)
        return (.responseHead(head), state)
    }
}
