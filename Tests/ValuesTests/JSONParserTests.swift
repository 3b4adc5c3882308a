import Testing
@testable import Values

/// Accept/reject cases in the spirit of JSONTestSuite (y_ must parse, n_ must be rejected).
@Suite struct JSONParserTests {
    static let mustAccept: [(String, Value)] = [
        ("[]", []), ("{}", [:]), ("  [ 1 , 2 ]\n", [1, 2]),
        ("0", 0), ("-1", -1), ("123", 123), ("1.5", 1.5), ("1e2", .double(100)), ("1E-2", 0.01),
        ("-0.0", .double(-0.0)), ("1e+2", .double(100)),
        ("9223372036854775807", .int(Int64.max)), ("-9223372036854775808", .int(Int64.min)),
        ("9223372036854775808", .double(9223372036854775808.0)),
        ("\"\"", ""), ("\"a\\\"b\"", "a\"b"), ("\"\\\\/\\/\"", "\\//"),
        ("\"\\b\\f\\n\\r\\t\"", "\u{8}\u{C}\n\r\t"), ("\"\\u0041\"", "A"), ("\"\\u00e9\"", "é"),
        ("\"\\uD834\\uDD1E\"", "𝄞"), ("\"\\ud83d\\ude00\"", "😀"), ("\"é😀\"", "é😀"),
        ("\"\\u0000\"", "\u{0}"), ("true", true), ("false", false), ("null", nil),
        ("{\"a\":{\"b\":[null,true]}}", ["a": ["b": [nil, true]]]),
        ("[[[[[]]]]]", [[[[[]]]]]), ("\"\u{7F}\"", "\u{7F}"), ("\"\u{10FFFF}\"", "\u{10FFFF}"),
    ]

    @Test(arguments: mustAccept.indices)
    func parse_accepts(_ i: Int) throws {
        let (text, expected) = Self.mustAccept[i]
        #expect(try JSON.parse(text) == expected, "\(text)")
    }

    @Test func parse_keepsNegativeZeroSign() throws {
        guard case .double(let d) = try JSON.parse("-0") else { Issue.record("not a double"); return }
        #expect(d == 0 && d.sign == .minus)
    }

    static let mustReject: [(String, JSONParseError.Kind)] = [
        ("", .unexpectedEndOfInput), ("[", .unexpectedEndOfInput), ("[1,]", .unexpectedByte(UInt8(ascii: "]"))),
        ("[1 2]", .unexpectedByte(UInt8(ascii: "2"))), ("{\"a\" 1}", .unexpectedByte(UInt8(ascii: "1"))),
        ("{a:1}", .unexpectedByte(UInt8(ascii: "a"))), ("{\"a\":1,}", .unexpectedByte(UInt8(ascii: "}"))),
        ("01", .invalidNumber), ("-", .unexpectedEndOfInput), ("1.", .invalidNumber), (".5", .unexpectedByte(UInt8(ascii: "."))),
        ("1e", .invalidNumber), ("+1", .unexpectedByte(UInt8(ascii: "+"))), ("0x10", .trailingContent),
        ("1e400", .numberOutOfRange), ("-1e400", .numberOutOfRange), ("NaN", .unexpectedByte(UInt8(ascii: "N"))),
        ("tru", .unexpectedEndOfInput), ("nul", .unexpectedEndOfInput), ("True", .unexpectedByte(UInt8(ascii: "T"))),
        ("\"abc", .unexpectedEndOfInput), ("\"\\x\"", .invalidEscape), ("\"\\u12\"", .invalidEscape),
        ("\"\\uD800\"", .loneSurrogate), ("\"\\uDC00\"", .loneSurrogate), ("\"\\uD800\\u0041\"", .loneSurrogate),
        ("\"\t\"", .controlCharacterInString), ("\"\n\"", .controlCharacterInString),
        ("[1] x", .trailingContent), ("{\"a\":1,\"a\":2}", .duplicateKey("a")), ("'a'", .unexpectedByte(UInt8(ascii: "'"))),
        ("[1,\u{0C}2]", .unexpectedByte(0x0C)), ("\u{FEFF}[]", .unexpectedByte(0xEF)),
    ]

    @Test(arguments: mustReject.indices)
    func parse_rejects(_ i: Int) {
        let (text, kind) = Self.mustReject[i]
        #expect(throws: JSONParseError.self, "\(text)") { try JSON.parse(text) }
        do { _ = try JSON.parse(text) } catch { #expect(error.kind == kind, "\(text): \(error)") }
    }

    @Test func parse_rejectsInvalidUTF8() {
        let cases: [[UInt8]] = [
            [0x22, 0xC0, 0xAF, 0x22],  // overlong
            [0x22, 0xED, 0xA0, 0x80, 0x22],  // encoded surrogate
            [0x22, 0xF4, 0x90, 0x80, 0x80, 0x22],  // above U+10FFFF
            [0x22, 0x80, 0x22],  // lone continuation
            [0x22, 0xE2, 0x82, 0x22],  // truncated
            [0x22, 0xFF, 0x22],
        ]
        for bytes in cases {
            do { _ = try JSON.parse(bytes); Issue.record("accepted \(bytes)") } catch {
                #expect(error.kind == .invalidUTF8, "\(bytes)")
            }
        }
    }

    /// The string scanner steps over plain ASCII a word at a time: whatever sits at any offset of
    /// a long string (quote, escape, control, multi-byte or invalid UTF-8, the end of the input)
    /// is still found exactly where it is.
    @Test func parse_stringsWithEverySpecialAtEveryOffset() throws {
        for length in [0, 1, 7, 8, 9, 16, 23, 24, 33] {
            let plain = (0..<length).map { UInt8(0x61 + $0 % 26) }
            #expect(try JSON.parse([0x22] + plain + [0x22]) == .string(String(decoding: plain, as: UTF8.self)))
            // Unterminated, ending exactly on and off word boundaries.
            do { _ = try JSON.parse([0x22] + plain); Issue.record("accepted unterminated \(length)") } catch {
                #expect(error.kind == .unexpectedEndOfInput)
            }
            for at in 0..<length {
                func with(_ insert: [UInt8]) -> [UInt8] { [0x22] + plain[..<at] + insert + plain[at...] + [0x22] }
                let expected = { (middle: String) in String(decoding: plain[..<at], as: UTF8.self) + middle + String(decoding: plain[at...], as: UTF8.self) }
                #expect(try JSON.parse(with(Array("\\n".utf8))) == .string(expected("\n")))
                #expect(try JSON.parse(with(Array("é€😀".utf8))) == .string(expected("é€😀")))
                for bad: UInt8 in [0x00, 0x09, 0x1F] {
                    do { _ = try JSON.parse(with([bad])); Issue.record("accepted control \(bad) at \(at)") } catch {
                        #expect(error.kind == .controlCharacterInString && error.offset == 1 + at)
                    }
                }
                do { _ = try JSON.parse(with([0xC0, 0xAF])); Issue.record("accepted overlong at \(at)") } catch {
                    #expect(error.kind == .invalidUTF8)
                }
                // A quote ends the string there: the rest is trailing content.
                do { _ = try JSON.parse(with([0x22])); Issue.record("accepted early quote at \(at)") } catch {
                    #expect(error.kind != .unexpectedEndOfInput)
                }
            }
        }
    }

    @Test func parse_reportsLineAndColumn() {
        do { _ = try JSON.parse("{\n  \"a\": 1,\n  \"b\": x\n}"); Issue.record("accepted") } catch {
            #expect(error.line == 3)
            #expect(error.column == 8)
            #expect(error.offset == 19)
            #expect(error.description.contains("line 3, column 8"))
        }
    }

    @Test func parse_enforcesDepthLimit() {
        let deep = String(repeating: "[", count: 600) + String(repeating: "]", count: 600)
        do { _ = try JSON.parse(deep); Issue.record("accepted") } catch { #expect(error.kind == .tooDeep(limit: 512)) }
        let ok = String(repeating: "[", count: 512) + String(repeating: "]", count: 512)
        #expect(throws: Never.self) { try JSON.parse(ok) }
        let limits = JSONLimits(maxDepth: 2)
        #expect(throws: JSONParseError.self) { try JSON.parse("[[[1]]]", limits: limits) }
    }

    @Test func parse_enforcesSizeLimit() {
        do { _ = try JSON.parse("[1,2,3]", limits: JSONLimits(maxInputBytes: 4)); Issue.record("accepted") } catch {
            #expect(error.kind == .inputTooLarge(limit: 4))
        }
    }

    @Test func parse_duplicateKeysCanBeAllowed() throws {
        let v = try JSON.parse("{\"a\":1,\"a\":2}", limits: JSONLimits(duplicateKeys: .lastWins))
        #expect(v == ["a": 2])
    }

    @Test func parse_fromRawBuffer() throws {
        let bytes: [UInt8] = Array("{\"k\":[1,2.5]}".utf8)
        let v = try bytes.withUnsafeBytes { raw throws(JSONParseError) in try JSON.parse(raw) }
        #expect(v == ["k": [1, 2.5]])
    }
}
