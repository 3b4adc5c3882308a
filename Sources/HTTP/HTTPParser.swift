import Glibc

// HTTP/1.1 message syntax (RFC 9112), parsed without I/O:
//
//   request-line   = method SP request-target SP HTTP-version CRLF        (§3)
//   status-line    = HTTP-version SP status-code SP [ reason-phrase ] CRLF (§4)
//   field-line     = field-name ":" OWS field-value OWS CRLF              (§5)
//   message        = start-line *( field-line ) CRLF [ message-body ]
//
//   chunked-body   = *chunk last-chunk trailer-section CRLF               (§7.1)
//   chunk          = chunk-size [ chunk-ext ] CRLF chunk-data CRLF
//   last-chunk     = 1*("0") [ chunk-ext ] CRLF
//
// Only CRLF ends a line: a bare LF or a CR not followed by LF is rejected (§2.2 lets a server
// reject them, and a proxy that reads them differently is how smuggling starts). Every limit is
// checked on the bytes scanned so far, before more are buffered.

/// What the parser produced from the bytes it has.
public enum HTTPParserEvent: Sendable {
    case needMoreData
    case requestHead(HTTPRequestHead)
    case responseHead(HTTPResponseHead)
    /// Content bytes (only when not aggregating the body).
    case body([UInt8])
    /// The message is complete. With an aggregating parser, `takeBody()` returns its content.
    case end(trailers: HTTPHeaders)
}

/// A sans-I/O HTTP/1.1 parser for requests (server) or responses (client). Feed it bytes, then call
/// `next()` until `.needMoreData`. After an error it stays failed: the connection must close.
public struct HTTPParser: Sendable {
    public enum Kind: Sendable { case request, response }

    enum State: Sendable, Equatable {
        case head
        case fixedBody(remaining: Int)
        case chunkSize
        case chunkData(remaining: Int)
        case chunkDataEnd
        case trailers
        case untilClose
        case failed(HTTPParseError)
    }

    public let kind: Kind
    public var limits: HTTPParserLimits
    /// Collect content into one buffer (`takeBody()`) instead of emitting `.body` events.
    public var aggregatesBody: Bool

    private var buffer: [UInt8] = []
    private var position = 0
    private(set) var state: State = .head
    // Line scanning (absolute indices into `buffer`).
    private var scanIndex = 0
    private var lineStart = 0
    private var sectionStart = 0
    private var lines: [Range<Int>] = []
    private var leadingEmptyLines = 0
    private var bodyReceived = 0
    private var body: [UInt8] = []
    /// For responses: the method of the request they answer (HEAD responses have no content).
    public var requestMethod: HTTPMethod = .GET

    public init(kind: Kind = .request, limits: HTTPParserLimits = HTTPParserLimits(), aggregatesBody: Bool = true) {
        self.kind = kind
        self.limits = limits
        self.aggregatesBody = aggregatesBody
    }

    /// Bytes received but not yet parsed (pipelined requests waiting their turn, among others).
    public var bufferedByteCount: Int { buffer.count - position }
    /// True between messages with nothing buffered.
    public var isIdle: Bool { state == .head && bufferedByteCount == 0 }
    /// True after a head whose content has not all arrived yet.
    public var isReadingBody: Bool {
        switch state {
        case .fixedBody(let n): n > 0
        case .chunkSize, .chunkData, .chunkDataEnd, .trailers, .untilClose: true
        case .head, .failed: false
        }
    }
    /// Content bytes of the current (or just completed) message received so far.
    public var bodyBytesReceived: Int { bodyReceived }
    /// True while a message has started but is not complete.
    public var isMidMessage: Bool { state != .head || buffer.count > position }

    public mutating func feed(_ bytes: UnsafeRawBufferPointer) {
        compact()
        // Content of a fixed-length body goes straight into the body when nothing waits ahead of
        // it: one copy of each byte, not two (through `buffer`, then into `body`). What follows
        // the content (a pipelined request) is buffered as usual; past the body limit, `next`
        // reports the error from the buffered bytes.
        if aggregatesBody, case .fixedBody(let remaining) = state, remaining > 0, position == buffer.count {
            let n = min(remaining, bytes.count)
            if bodyReceived + n <= limits.maxBodyBytes {
                reserveDeclaredBody(remaining: remaining)
                body.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[..<n]))
                bodyReceived += n
                state = .fixedBody(remaining: remaining - n)
                buffer.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[n...]))
                return
            }
        }
        buffer.append(contentsOf: bytes)
    }

    /// The rest of the declared length at once, once an eighth of it has arrived: growing the
    /// body by doubling copied a 100 MB body about twice over and faulted in every intermediate
    /// buffer. Not before: a client that declares much and sends little must not make the server
    /// reserve memory (under strict overcommit a reservation is charged in full) beyond a small
    /// multiple of what it actually sent.
    private mutating func reserveDeclaredBody(remaining: Int) {
        let declared = bodyReceived + remaining
        if body.capacity < declared && declared <= limits.maxBodyBytes && bodyReceived >= declared / 8 {
            body.reserveCapacity(declared)
        }
    }

    public mutating func feed(_ bytes: [UInt8]) { bytes.withUnsafeBytes { feed($0) } }

    /// Bytes the aggregated body can hold without growing (tests of the reservation rule in `next`).
    var bodyCapacity: Int { body.capacity }

    /// The aggregated content of the message that just ended.
    public mutating func takeBody() -> [UInt8] {
        defer { body = [] }
        return body
    }

    /// Takes the unparsed bytes (for a connection upgrade: they belong to the new protocol).
    public mutating func takeBufferedBytes() -> [UInt8] {
        defer { buffer = []; position = 0; scanIndex = 0; lineStart = 0; sectionStart = 0 }
        return Array(buffer[position...])
    }

    /// The peer closed its side. Ends a read-until-close response body; anything else mid-message
    /// is a truncation.
    public mutating func feedEOF() throws(HTTPParseError) -> HTTPParserEvent? {
        if case .untilClose = state {
            state = .head
            return .end(trailers: HTTPHeaders())
        }
        if isMidMessage { return try fail(.malformed(.truncated)) }
        return nil
    }

    /// Parses the next event from the buffered bytes.
    public mutating func next() throws(HTTPParseError) -> HTTPParserEvent {
        switch state {
        case .failed(let e): throw e
        case .head: return try parseHead()
        case .fixedBody(let remaining):
            if remaining == 0 { state = .head; return .end(trailers: HTTPHeaders()) }
            if aggregatesBody { reserveDeclaredBody(remaining: remaining) }
            guard let bytes = try takeContent(upTo: remaining) else { return .needMoreData }
            let left = remaining - bytes
            state = .fixedBody(remaining: left)  // at 0, the next call reports `.end`
            return aggregatesBody ? try next() : .body(pendingChunk)
        case .untilClose:
            guard try takeContent(upTo: Int.max) != nil else { return .needMoreData }
            return aggregatesBody ? .needMoreData : .body(pendingChunk)
        case .chunkSize: return try parseChunkSize()
        case .chunkData(let remaining):
            guard let bytes = try takeContent(upTo: remaining) else { return .needMoreData }
            state = remaining - bytes == 0 ? .chunkDataEnd : .chunkData(remaining: remaining - bytes)
            return aggregatesBody ? try next() : .body(pendingChunk)
        case .chunkDataEnd:
            guard buffer.count - position >= 2 else { return .needMoreData }
            guard buffer[position] == 0x0D, buffer[position + 1] == 0x0A else { return try fail(.malformed(.invalidChunk)) }
            position += 2
            state = .chunkSize
            return try next()
        case .trailers: return try parseTrailers()
        }
    }

    private var pendingChunk: [UInt8] = []

    /// Moves up to `limit` available content bytes into the body (or `pendingChunk`); nil if none.
    private mutating func takeContent(upTo limit: Int) throws(HTTPParseError) -> Int? {
        let n = min(limit, buffer.count - position)
        guard n > 0 else { return nil }
        bodyReceived += n
        if bodyReceived > limits.maxBodyBytes { return try fail(.contentTooLarge) }
        if aggregatesBody {
            body.append(contentsOf: buffer[position..<position + n])
        } else {
            pendingChunk = Array(buffer[position..<position + n])
        }
        position += n
        return n
    }

    @discardableResult
    mutating func fail<T>(_ error: HTTPParseError) throws(HTTPParseError) -> T {
        state = .failed(error)
        throw error
    }

    private mutating func compact() {
        if position == buffer.count {
            if buffer.capacity > 16 * 1024 { buffer = [] } else { buffer.removeAll(keepingCapacity: true) }
        } else if position > 0 && position >= buffer.count / 2 {
            buffer.removeSubrange(0..<position)
        } else {
            return
        }
        scanIndex -= position
        lineStart -= position
        sectionStart -= position
        position = 0
    }

    // MARK: - Lines

    /// The next CRLF-terminated line's content (absolute range), or nil if it is not complete.
    private mutating func nextLine(maxLength: Int, tooLong: HTTPParseError, sectionLimit: Int) throws(HTTPParseError) -> Range<Int>? {
        let count = buffer.count
        let lf: Int? = buffer.withUnsafeBytes { raw in
            guard scanIndex < count, let p = memchr(raw.baseAddress! + scanIndex, 0x0A, count - scanIndex) else { return nil }
            return raw.baseAddress!.distance(to: UnsafeRawPointer(p))
        }
        guard let lf else {
            scanIndex = count
            if count - lineStart > maxLength + 1 { return try fail(tooLong) }  // +1: room for the CR
            if count - sectionStart > sectionLimit { return try fail(.headerSectionTooLarge) }
            return nil
        }
        // Limits first, in the same order as for an incomplete line, so the verdict never depends
        // on how the bytes were split (the fuzz target checks exactly that).
        if lf - lineStart > maxLength + 1 { return try fail(tooLong) }
        if lf + 1 - sectionStart > sectionLimit { return try fail(.headerSectionTooLarge) }
        guard lf > lineStart, buffer[lf - 1] == 0x0D else { return try fail(.malformed(.bareLF)) }
        let content = lineStart..<(lf - 1)
        let hasCR = buffer.withUnsafeBytes { raw in
            content.isEmpty ? false : memchr(raw.baseAddress! + content.lowerBound, 0x0D, content.count) != nil
        }
        if hasCR { return try fail(.malformed(.bareCR)) }
        lineStart = lf + 1
        scanIndex = lf + 1
        return content
    }

    private mutating func beginSection() {
        sectionStart = position
        lineStart = position
        scanIndex = position
        lines.removeAll(keepingCapacity: true)
    }

    // MARK: - Head

    private mutating func parseHead() throws(HTTPParseError) -> HTTPParserEvent {
        if lines.isEmpty && lineStart < position { beginSection() }
        while true {
            let isStartLine = lines.isEmpty
            let maxLength = isStartLine ? limits.maxRequestLineLength : limits.maxHeaderBytes
            let tooLong: HTTPParseError = isStartLine && kind == .request ? .requestLineTooLong : .headerSectionTooLarge
            guard let line = try nextLine(maxLength: maxLength, tooLong: tooLong, sectionLimit: limits.maxHeaderBytes) else {
                return .needMoreData
            }
            if line.isEmpty {
                if isStartLine {
                    // RFC 9112 §2.2: ignore at least one empty line before the request line.
                    leadingEmptyLines += 1
                    if leadingEmptyLines > 4 { return try fail(.malformed(.invalidMethod)) }
                    position = lineStart
                    beginSection()
                    continue
                }
                let headEnd = lineStart
                leadingEmptyLines = 0
                let event = try buildHead()
                position = headEnd
                beginSection()
                bodyReceived = 0
                body = []
                return event
            }
            if lines.count > limits.maxHeaderCount { return try fail(.tooManyHeaderFields) }
            lines.append((line.lowerBound - sectionStart)..<(line.upperBound - sectionStart))
        }
    }

    private mutating func buildHead() throws(HTTPParseError) -> HTTPParserEvent {
        let base = sectionStart
        let result: Result<(HTTPParserEvent, State), HTTPParseError> = buffer.withUnsafeBytes { raw in
            let lineBytes = { (r: Range<Int>) in UnsafeRawBufferPointer(rebasing: raw[(base + r.lowerBound)..<(base + r.upperBound)]) }
            return Result { () throws(HTTPParseError) -> (HTTPParserEvent, State) in
                var fields = try HeaderSectionParser(lines: lines.dropFirst().map(lineBytes), limits: limits)
                switch kind {
                case .request:
                    let start = try RequestLine(lineBytes(lines[0]))
                    return try fields.requestHead(start: start)
                case .response:
                    let start = try StatusLine(lineBytes(lines[0]))
                    return try fields.responseHead(start: start, requestMethod: requestMethod)
                }
            }
        }
        switch result {
        case .success(let (event, next)):
            state = next
            return event
        case .failure(let e):
            return try fail(e)
        }
    }

    // MARK: - Chunked

    private mutating func parseChunkSize() throws(HTTPParseError) -> HTTPParserEvent {
        if lineStart < position { beginSection() }
        guard let line = try nextLine(maxLength: limits.maxChunkLineLength, tooLong: .malformed(.chunkLineTooLong),
                                      sectionLimit: limits.maxChunkLineLength + 2) else { return .needMoreData }
        var size: UInt64 = 0
        var digits = 0
        var i = line.lowerBound
        while i < line.upperBound, let v = ByteClass.hexValue(buffer[i]) {
            digits += 1
            if digits > 15 { return try fail(.malformed(.invalidChunk)) }  // > 2^60: no real chunk
            size = size << 4 | v
            i += 1
        }
        if digits == 0 { return try fail(.malformed(.invalidChunk)) }
        // chunk-ext = *( BWS ";" BWS ext-name [ BWS "=" BWS ext-val ] ): ignored, but must be text.
        while i < line.upperBound, buffer[i] == 0x20 || buffer[i] == 0x09 { i += 1 }
        if i < line.upperBound {
            guard buffer[i] == UInt8(ascii: ";") else { return try fail(.malformed(.invalidChunk)) }
            for j in i..<line.upperBound where !ByteClass.isFieldValue(buffer[j]) { return try fail(.malformed(.invalidChunk)) }
        }
        position = lineStart
        if size == 0 {
            state = .trailers
            beginSection()
            return try parseTrailers()
        }
        if UInt64(bodyReceived) + size > UInt64(limits.maxBodyBytes) { return try fail(.contentTooLarge) }
        state = .chunkData(remaining: Int(size))
        return try next()
    }

    private mutating func parseTrailers() throws(HTTPParseError) -> HTTPParserEvent {
        while true {
            guard let line = try nextLine(maxLength: limits.maxHeaderBytes, tooLong: .headerSectionTooLarge,
                                          sectionLimit: limits.maxHeaderBytes) else { return .needMoreData }
            if line.isEmpty { break }
            if lines.count >= limits.maxHeaderCount { return try fail(.tooManyHeaderFields) }
            lines.append((line.lowerBound - sectionStart)..<(line.upperBound - sectionStart))
        }
        let base = sectionStart
        let parsed: Result<HTTPHeaders, HTTPParseError> = buffer.withUnsafeBytes { raw in
            Result { () throws(HTTPParseError) -> HTTPHeaders in
                var headers = HTTPHeaders()
                for r in lines {
                    let f = try HeaderSectionParser.field(UnsafeRawBufferPointer(rebasing: raw[(base + r.lowerBound)..<(base + r.upperBound)]))
                    headers.add(f.name, f.value)
                }
                return headers
            }
        }
        switch parsed {
        case .success(let trailers):
            position = lineStart
            state = .head
            beginSection()
            return .end(trailers: trailers)
        case .failure(let e):
            return try fail(e)
        }
    }
}
