@testable import DBus
import Testing

@Suite("D-Bus values and signatures")
struct DBusValueTests {
    func roundTrip(_ values: [DBusValue], bigEndian: Bool = false) throws -> [DBusValue] {
        var w = DBusWriter()
        try w.write(values)
        var r = DBusReader(bytes: w.bytes, bigEndian: false)
        let back = try r.read(signature: values.map(\.type))
        #expect(r.isAtEnd)
        return back
    }

    @Test func signatures_parseAndPrint() throws {
        for text in ["", "y", "a{sv}", "a{oa{sa{sv}}}", "(ybnqiuxtdsogh)", "aay", "a(sa{sv})v"] {
            #expect(DBusType.signature(of: try DBusSignature.parse(text)) == text)
        }
    }

    @Test func signatures_invalidOnesAreRefused() {
        let bad = ["a", "{sv}", "a{vs}", "a{s}", "a{sss}", "()", "(s", "s)", "z", "a{(s)v}",
                   String(repeating: "a", count: 33) + "y", String(repeating: "(", count: 33) + "y" + String(repeating: ")", count: 33),
                   String(repeating: "y", count: 256)]
        for text in bad { #expect(throws: DBusError.self, "\(text)") { try DBusSignature.parse(text) } }
    }

    @Test func everyType_roundTrips() throws {
        let values: [DBusValue] = [
            .byte(0xFE), .boolean(true), .int16(-3), .uint16(65535), .int32(.min), .uint32(.max), .int64(.min), .uint64(.max),
            .double(-0.25), .string(""), .string("ünï"), .objectPath("/"), .objectPath("/org/bluez/hci0"), .signature("a{sv}"),
            .unixFD(0), .array(.int64, []), .array(.structure([.byte, .string]), [.structure([.byte(1), .string("x")])]),
            .properties(["A": .uint16(7), "B": .bytes([1, 2])]), .variant(.variant(.array(.string, [.string("s")]))),
        ]
        #expect(try roundTrip(values) == values)
    }

    @Test func emptyArray_isPaddedToItsElementAlignment() throws {
        var w = DBusWriter()
        try w.write([.byte(1), .array(.int64, [])])
        // byte, 3 padding, length 0, then padding to 8 even though there are no elements.
        #expect(w.bytes == [1, 0, 0, 0, 0, 0, 0, 0])
    }

    @Test func writer_refusesInvalidValues() {
        #expect(throws: DBusError.self) { var w = DBusWriter(); try w.write(.string("a\0b")) }
        #expect(throws: DBusError.self) { var w = DBusWriter(); try w.write(.objectPath("/a//b")) }
        #expect(throws: DBusError.self) { var w = DBusWriter(); try w.write(.objectPath("a")) }
        #expect(throws: DBusError.self) { var w = DBusWriter(); try w.write(.array(.string, [.int32(1)])) }
        #expect(throws: DBusError.self) { var w = DBusWriter(); try w.write(.structure([])) }
    }

    @Test func reader_refusesHostileBytes() {
        func read(_ bytes: [UInt8], _ type: DBusType) throws { var r = DBusReader(bytes: bytes, bigEndian: false); _ = try r.read(type) }
        #expect(throws: DBusError.invalid(offset: 0, "boolean 2")) { try read([2, 0, 0, 0], .boolean) }
        #expect(throws: DBusError.truncated(offset: 4)) { try read([9, 0, 0, 0, 65, 0], .string) }
        #expect(throws: DBusError.self) { try read([1, 0, 0, 0, 65, 66], .string) }  // no NUL
        #expect(throws: DBusError.self) { try read([2, 0, 0, 0, 0xC3, 0x28, 0], .string) }  // not UTF-8
        #expect(throws: DBusError.self) { try read([1, 7, 0, 0, 0, 0, 0, 0], .structure([.byte, .int32])) }  // padding not zero
        #expect(throws: DBusError.self) { try read([0xFF, 0xFF, 0xFF, 0xFF], .array(.byte)) }  // over 2^26
        #expect(throws: DBusError.self) { try read([1, 0x7A, 0], .variant) }  // bad signature
        #expect(throws: DBusError.self) { try read([2, UInt8(ascii: "y"), UInt8(ascii: "y"), 0, 1, 1], .variant) }  // two types
        #expect(throws: DBusError.self) { try read([3, 0, 0, 0, 1, 2, 0, 0, 3], .array(.uint16)) }  // element overruns the length
    }

    @Test func reader_boundsNestingDepth() throws {
        // 70 variants, each holding the next: a valid signature at every level, but too deep.
        var bytes: [UInt8] = []
        for _ in 0..<70 { bytes += [1, UInt8(ascii: "v"), 0] }
        bytes += [1, UInt8(ascii: "y"), 0, 42]
        var r = DBusReader(bytes: bytes, bigEndian: false)
        #expect(throws: DBusError.self) { try r.read(.variant) }
        var deep = DBusValue.byte(1)
        for _ in 0..<70 { deep = .variant(deep) }
        #expect(throws: DBusError.self) { var w = DBusWriter(); try w.write(deep) }
    }

    @Test func objectPaths() {
        for ok in ["/", "/a", "/a_b/C9"] { #expect(isValidObjectPath(ok)) }
        for bad in ["", "a", "/a/", "//", "/a-b", "/a//b", "/ü"] { #expect(!isValidObjectPath(bad)) }
    }
}
