import TestRandomness
@testable import HTTP

typealias SeededRNG = SeededRandom

/// What a parse produced, in a comparable form.
enum Parsed: Equatable {
    case head(method: String, target: String, version: HTTPVersion, headers: [String], keepAlive: Bool, expectsContinue: Bool)
    case response(status: Int, headers: [String])
    case message(body: [UInt8], trailers: [String])
    case error(HTTPParseError)
}

/// Feeds `input` in the given piece sizes, draining events after each piece.
func parse(_ input: [UInt8], pieces: [Int], kind: HTTPParser.Kind = .request, limits: HTTPParserLimits = HTTPParserLimits(),
           eof: Bool = false) -> [Parsed] {
    var parser = HTTPParser(kind: kind, limits: limits)
    var out: [Parsed] = []
    var offset = 0
    var sizes = pieces.makeIterator()
    func drain() -> Bool {
        while true {
            do {
                switch try parser.next() {
                case .needMoreData: return true
                case .requestHead(let h):
                    out.append(.head(method: h.method.rawValue, target: h.target, version: h.version,
                                     headers: h.headers.map { "\($0.name): \($0.value)" }, keepAlive: h.keepAlive,
                                     expectsContinue: h.expectsContinue))
                case .responseHead(let h):
                    out.append(.response(status: h.status.code, headers: h.headers.map { "\($0.name): \($0.value)" }))
                case .body: break
                case .end(let trailers):
                    out.append(.message(body: parser.takeBody(), trailers: trailers.map { "\($0.name): \($0.value)" }))
                }
            } catch {
                out.append(.error(error))
                return false
            }
        }
    }
    while offset < input.count {
        let n = min(max(1, sizes.next() ?? input.count), input.count - offset)
        parser.feed(Array(input[offset..<offset + n]))
        offset += n
        if !drain() { return out }
    }
    if eof {
        do {
            if case .end(let t)? = try parser.feedEOF() { out.append(.message(body: parser.takeBody(), trailers: t.map { "\($0.name): \($0.value)" })) }
        } catch {
            out.append(.error(error))
        }
    }
    return out
}

/// Every chunking the split-point tests use: whole, 1-byte, 2-byte, every two-piece split, and
/// 20 seeded random chunkings.
func chunkings(for count: Int, seed: UInt64 = 42) -> [[Int]] {
    var all: [[Int]] = [[count], Array(repeating: 1, count: count), Array(repeating: 2, count: count / 2 + 1)]
    if count <= 600 {
        for split in 1..<max(2, count) { all.append([split, count]) }
    }
    var rng = SeededRNG(seed: seed)
    for _ in 0..<20 { all.append(rng.pieceSizes(total: count, maxPiece: 64)) }
    return all
}
