// Strings (RFC 8259 §7, with UTF-8 validation per RFC 3629 §4) and numbers (RFC 8259 §6).

extension JSONParser {
    /// Parses a string starting at the opening quote; leaves `index` after the closing quote.
    mutating func parseString() throws(JSONParseError) -> String {
        index += 1  // opening quote
        let start = index
        // Fast path: no escapes. Scan, validating UTF-8 as we go; runs of plain ASCII (nothing
        // to unescape, nothing to validate) are stepped over a 64-bit word at a time.
        while index < bytes.count {
            if let base = bytes.baseAddress {
                while index + 8 <= bytes.count {
                    let w = UnsafeRawPointer(base + index).loadUnaligned(as: UInt64.self)
                    if w & 0x8080_8080_8080_8080 != 0 || JSONWriter.wordNeedsEscape(w) { break }
                    index += 8
                }
                if index == bytes.count { break }  // unterminated: reported below
            }
            let b = bytes[index]
            if b == UInt8(ascii: "\"") {
                let s = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
                index += 1
                return s
            }
            if b == UInt8(ascii: "\\") { break }
            if b < 0x20 { throw fail(.controlCharacterInString) }
            if b < 0x80 { index += 1 } else { try skipUTF8Sequence() }
        }
        guard index < bytes.count else { throw fail(.unexpectedEndOfInput) }
        // Slow path: copy what we have, then decode escapes.
        var out: [UInt8] = []
        out.reserveCapacity(index - start + 16)
        out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[start..<index]))
        while index < bytes.count {
            let b = bytes[index]
            if b == UInt8(ascii: "\"") {
                index += 1
                return String(decoding: out, as: UTF8.self)
            }
            if b == UInt8(ascii: "\\") {
                try decodeEscape(into: &out)
            } else if b < 0x20 {
                throw fail(.controlCharacterInString)
            } else if b < 0x80 {
                out.append(b); index += 1
            } else {
                let s = index
                try skipUTF8Sequence()
                out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[s..<index]))
            }
        }
        throw fail(.unexpectedEndOfInput)
    }

    /// Validates one multi-byte UTF-8 sequence at `index` (RFC 3629 §4 table) and steps over it.
    @inline(__always) mutating func skipUTF8Sequence() throws(JSONParseError) {
        let b0 = bytes[index]
        var length: Int
        var lo: UInt8 = 0x80, hi: UInt8 = 0xBF  // allowed range of the second byte
        switch b0 {
        case 0xC2...0xDF: length = 2
        case 0xE0: length = 3; lo = 0xA0
        case 0xE1...0xEC, 0xEE...0xEF: length = 3
        case 0xED: length = 3; hi = 0x9F  // no UTF-16 surrogates
        case 0xF0: length = 4; lo = 0x90
        case 0xF1...0xF3: length = 4
        case 0xF4: length = 4; hi = 0x8F  // nothing above U+10FFFF
        default: throw fail(.invalidUTF8)
        }
        guard index + length <= bytes.count else { throw fail(.invalidUTF8) }
        let b1 = bytes[index + 1]
        guard b1 >= lo, b1 <= hi else { throw fail(.invalidUTF8, at: index + 1) }
        var k = 2
        while k < length {
            let c = bytes[index + k]
            guard c & 0xC0 == 0x80 else { throw fail(.invalidUTF8, at: index + k) }
            k += 1
        }
        index += length
    }

    /// Decodes one escape (§7) at `index` (the backslash) and appends its UTF-8 encoding.
    mutating func decodeEscape(into out: inout [UInt8]) throws(JSONParseError) {
        let escapeStart = index
        index += 1
        guard index < bytes.count else { throw fail(.unexpectedEndOfInput) }
        let c = bytes[index]
        index += 1
        switch c {
        case UInt8(ascii: "\""): out.append(0x22)
        case UInt8(ascii: "\\"): out.append(0x5C)
        case UInt8(ascii: "/"): out.append(0x2F)
        case UInt8(ascii: "b"): out.append(0x08)
        case UInt8(ascii: "f"): out.append(0x0C)
        case UInt8(ascii: "n"): out.append(0x0A)
        case UInt8(ascii: "r"): out.append(0x0D)
        case UInt8(ascii: "t"): out.append(0x09)
        case UInt8(ascii: "u"):
            var scalar = UInt32(try readHex4())
            if scalar >= 0xD800, scalar <= 0xDBFF {
                // High surrogate: must be followed by an escaped low surrogate (§7, UTF-16 pair).
                guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") else {
                    throw fail(.loneSurrogate, at: escapeStart)
                }
                index += 2
                let low = UInt32(try readHex4())
                guard low >= 0xDC00, low <= 0xDFFF else { throw fail(.loneSurrogate, at: escapeStart) }
                scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
            } else if scalar >= 0xDC00, scalar <= 0xDFFF {
                throw fail(.loneSurrogate, at: escapeStart)
            }
            appendUTF8(scalar, to: &out)
        default:
            throw fail(.invalidEscape, at: escapeStart)
        }
    }

    mutating func readHex4() throws(JSONParseError) -> UInt16 {
        var v: UInt16 = 0
        for _ in 0..<4 {
            guard index < bytes.count else { throw fail(.unexpectedEndOfInput) }
            let b = bytes[index]
            let d: UInt8
            switch b {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): d = b - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): d = b - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): d = b - UInt8(ascii: "A") + 10
            default: throw fail(.invalidEscape)
            }
            v = v << 4 | UInt16(d)
            index += 1
        }
        return v
    }

    func appendUTF8(_ scalar: UInt32, to out: inout [UInt8]) {
        switch scalar {
        case 0..<0x80: out.append(UInt8(scalar))
        case 0x80..<0x800:
            out.append(UInt8(0xC0 | (scalar >> 6)))
            out.append(UInt8(0x80 | (scalar & 0x3F)))
        case 0x800..<0x10000:
            out.append(UInt8(0xE0 | (scalar >> 12)))
            out.append(UInt8(0x80 | ((scalar >> 6) & 0x3F)))
            out.append(UInt8(0x80 | (scalar & 0x3F)))
        default:
            out.append(UInt8(0xF0 | (scalar >> 18)))
            out.append(UInt8(0x80 | ((scalar >> 12) & 0x3F)))
            out.append(UInt8(0x80 | ((scalar >> 6) & 0x3F)))
            out.append(UInt8(0x80 | (scalar & 0x3F)))
        }
    }

    /// Parses a number (§6). Integers that fit Int64 stay exact; everything else is a correctly
    /// rounded Double (the standard library's decimal conversion), and overflow to infinity is an error.
    mutating func parseNumber() throws(JSONParseError) -> Value {
        let start = index
        var negative = false
        if bytes[index] == UInt8(ascii: "-") {
            negative = true
            index += 1
        }
        guard index < bytes.count else { throw fail(.unexpectedEndOfInput) }
        var magnitude: Int64 = 0  // accumulated as a negative number so Int64.min fits
        var fitsInt = true
        let first = bytes[index]
        if first == UInt8(ascii: "0") {
            index += 1
            if index < bytes.count, isDigit(bytes[index]) { throw fail(.invalidNumber, at: start) }
        } else if isDigit(first) {
            while index < bytes.count, isDigit(bytes[index]) {
                let d = Int64(bytes[index] - UInt8(ascii: "0"))
                if fitsInt {
                    let (m, o1) = magnitude.multipliedReportingOverflow(by: 10)
                    let (n, o2) = m.subtractingReportingOverflow(d)
                    if o1 || o2 { fitsInt = false } else { magnitude = n }
                }
                index += 1
            }
        } else {
            throw fail(.invalidNumber, at: start)
        }
        var isInteger = true
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            isInteger = false
            index += 1
            guard index < bytes.count, isDigit(bytes[index]) else { throw fail(.invalidNumber, at: start) }
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        if index < bytes.count, bytes[index] | 0x20 == UInt8(ascii: "e") {
            isInteger = false
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
            guard index < bytes.count, isDigit(bytes[index]) else { throw fail(.invalidNumber, at: start) }
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        if isInteger && fitsInt {
            if negative {
                return magnitude == 0 ? .double(-0.0) : .int(magnitude)
            }
            if magnitude != Int64.min { return .int(-magnitude) }
        }
        let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
        guard let d = Double(text), d.isFinite else { throw fail(.numberOutOfRange, at: start) }
        return .double(d)
    }

    @inline(__always) func isDigit(_ b: UInt8) -> Bool { b &- UInt8(ascii: "0") < 10 }
}
