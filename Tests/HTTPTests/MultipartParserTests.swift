import HTTP
import TestRandomness
import Testing

/// The multipart/form-data parser, sans I/O, at every split point.
@Suite struct MultipartParserTests {
    struct Part: Equatable {
        var headers: [String]
        var content: [UInt8]
    }

    /// Feeds `input` in pieces cut at `cuts`, collecting parts; throws the parser's error.
    static func parse(_ input: [UInt8], boundary: String, cuts: [Int] = []) throws -> [Part] {
        var parser = MultipartParser(boundary: boundary)
        var parts: [Part] = []
        var ended = false
        var start = 0
        for end in cuts + [input.count] where end >= start {
            parser.feed(Array(input[start..<end]))
            start = end
            loop: while true {
                switch try parser.next() {
                case .needMoreData: break loop
                case .partHead(let h): parts.append(Part(headers: h.map { "\($0.name)=\($0.value)" }, content: []))
                case .data(let d): parts[parts.count - 1].content += d
                case .partEnd: break
                case .end: ended = true
                }
            }
        }
        try parser.finish()
        #expect(ended)
        return parts
    }

    static let body = Array((
        "preamble to ignore\r\n"
        + "--XyZ\r\n"
        + "Content-Disposition: form-data; name=\"field\"\r\n\r\n"
        + "value\r\n"
        + "--XyZ  \r\n"  // transport padding
        + "Content-Disposition: form-data; name=\"file\"; filename=\"a.bin\"\r\n"
        + "Content-Type: application/octet-stream\r\n\r\n"
        + "line1\r\n--XyNotTheBoundary\r\n\r\n--Xy"
        + "\r\n--XyZ--\r\nepilogue").utf8)

    static let expected = [
        Part(headers: ["Content-Disposition=form-data; name=\"field\""], content: Array("value".utf8)),
        Part(headers: ["Content-Disposition=form-data; name=\"file\"; filename=\"a.bin\"", "Content-Type=application/octet-stream"],
             content: Array("line1\r\n--XyNotTheBoundary\r\n\r\n--Xy".utf8)),
    ]

    @Test func wholeInput() throws {
        #expect(try Self.parse(Self.body, boundary: "XyZ") == Self.expected)
    }

    @Test func everySplitPointAndByteByByte() throws {
        for cut in 0...Self.body.count {
            #expect(try Self.parse(Self.body, boundary: "XyZ", cuts: [cut]) == Self.expected, "cut at \(cut)")
        }
        #expect(try Self.parse(Self.body, boundary: "XyZ", cuts: Array(0...Self.body.count)) == Self.expected)
    }

    @Test func bodyStartingWithTheBoundaryAndEmptyPart() throws {
        let input = Array("--b\r\n\r\n\r\n--b--".utf8)
        #expect(try Self.parse(input, boundary: "b") == [Part(headers: [], content: [])])
    }

    @Test func largeBinaryContentIsStreamedNotBuffered() throws {
        var rng = SeededRandom(seed: 7)
        let content = (0..<300_000).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
        let input = Array("--B0undary\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\n".utf8) + content + Array("\r\n--B0undary--\r\n".utf8)
        var parser = MultipartParser(boundary: "B0undary")
        var got: [UInt8] = []
        var largestPiece = 0
        var offset = 0
        while offset < input.count {
            let n = min(4096, input.count - offset)
            parser.feed(Array(input[offset..<offset + n]))
            offset += n
            loop: while true {
                switch try parser.next() {
                case .needMoreData: break loop
                case .data(let d): got += d; largestPiece = max(largestPiece, d.count)
                default: continue
                }
            }
        }
        try parser.finish()
        #expect(got == content)
        #expect(largestPiece <= 4096 + 16)  // emitted as it arrives, never accumulated
    }

    @Test func errors() {
        let cases: [(String, MultipartError)] = [
            ("--b\r\nContent-Disposition: form-data\r\n\r\nabc", .truncated),
            ("no boundary at all", .truncated),
            ("--bX\r\n", .malformedDelimiter),
            ("--b\r\nBad Header\r\n\r\nx\r\n--b--", .malformedHeaders),
            ("--b\r\n: empty name\r\n\r\nx\r\n--b--", .malformedHeaders),
            ("--b\r\nA: " + String(repeating: "v", count: 20_000) + "\r\n\r\nx\r\n--b--", .headersTooLarge),
            (String(repeating: "--b\r\n\r\n\r\n", count: 70) + "--b--", .tooManyParts),
        ]
        for (input, error) in cases {
            #expect(throws: error, "\(input.prefix(40))") { _ = try Self.parse(Array(input.utf8), boundary: "b") }
        }
    }

    @Test func contentTypeBoundaryAndParameters() {
        #expect(MultipartParser.boundary(fromContentType: "multipart/form-data; boundary=abc") == "abc")
        #expect(MultipartParser.boundary(fromContentType: "Multipart/Form-Data;boundary=\"a b:c\"") == "a b:c")
        #expect(MultipartParser.boundary(fromContentType: "multipart/form-data") == nil)
        #expect(MultipartParser.boundary(fromContentType: "multipart/mixed; boundary=abc") == nil)
        #expect(MultipartParser.boundary(fromContentType: "multipart/form-data; boundary=" + String(repeating: "a", count: 71)) == nil)
        #expect(MultipartParser.boundary(fromContentType: "multipart/form-data; boundary=\"ends in space \"") == nil)
        #expect(MultipartParser.boundary(fromContentType: "multipart/form-data; boundary=\"unterminated") == nil)
        let (type, params) = MultipartParser.parameters(of: #"form-data; name="file"; filename="a \"q\".bin""#)
        #expect(type == "form-data")
        #expect(params == ["name": "file", "filename": #"a "q".bin"#])
    }
}
