// libFuzzer entry point for the HTTP/1.1 parser (request and response modes).
//
// Build and run (see docs/HTTP.md):
//   swiftc -sanitize=fuzzer,address -parse-as-library -O -module-name HTTPParseFuzz \
//     Fuzz/HTTPParse/FuzzHTTPParse.swift Sources/HTTP/HTTPParser.swift Sources/HTTP/HTTPHeadParser.swift \
//     Sources/HTTP/HTTPByteClasses.swift Sources/HTTP/HTTPParseError.swift Sources/HTTP/HTTPTypes.swift \
//     -o .build-fuzz/http-parse
//   .build-fuzz/http-parse -max_total_time=600 .build-fuzz/corpus-http Fuzz/HTTPParse/seeds
//
// Besides crashes and sanitizer reports, it checks one property: feeding the input whole and
// feeding it in pieces (sizes taken from the input's first byte) yields the same events. A
// mismatch traps, so libFuzzer keeps it as a crasher.

/// Events of one parse, flattened for comparison.
private func events(_ data: [UInt8], kind: HTTPParser.Kind, pieces: Int) -> [String] {
    var limits = HTTPParserLimits()
    limits.maxRequestLineLength = 512
    limits.maxHeaderBytes = 2048
    limits.maxHeaderCount = 16
    limits.maxBodyBytes = 4096
    limits.maxChunkLineLength = 64
    var parser = HTTPParser(kind: kind, limits: limits)
    var out: [String] = []
    var offset = 0
    let step = max(1, pieces)
    while offset < data.count {
        let end = min(data.count, offset + step)
        parser.feed(Array(data[offset..<end]))
        offset = end
        loop: while true {
            do {
                switch try parser.next() {
                case .needMoreData: break loop
                case .requestHead(let h): out.append("req \(h.method) \(h.target) \(h.version) \(h.headers.count) \(h.keepAlive)")
                case .responseHead(let h): out.append("res \(h.status.code) \(h.headers.count)")
                case .body(let b): out.append("body \(b.count)")
                case .end(let t): out.append("end \(parser.takeBody().count) \(t.count)")
                }
            } catch {
                out.append("error \(error)")
                return out
            }
        }
    }
    do {
        if let e = try parser.feedEOF() { out.append("eof \(e)") }
    } catch {
        out.append("eof-error \(error)")
    }
    return out
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    guard count > 0 else { return 0 }
    let selector = start[0]
    let data = Array(UnsafeBufferPointer(start: start + 1, count: count - 1))
    let kind: HTTPParser.Kind = selector & 0x80 == 0 ? .request : .response
    let whole = events(data, kind: kind, pieces: data.count)
    let split = events(data, kind: kind, pieces: Int(selector & 0x7F) + 1)
    if whole != split {
        fatalError("split parse disagrees:\n\(whole)\n\(split)")
    }
    return 0
}
