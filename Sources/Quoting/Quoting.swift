// Quoting: the one place SQL and DQL text is quoted. Everything here works on UTF-8 bytes.
//
// Why bytes: Swift's String operations work on Characters (grapheme clusters). A `'` followed by
// U+0301 COMBINING ACUTE ACCENT is one Character that is not equal to "'", so
// `replacingOccurrences(of: "'", with: "''")` leaves that quote alone, yet PostgreSQL and the DQL
// lexer see a quote byte and the literal ends there. Only the ASCII quote byte ends a quoted
// token in either language, and in UTF-8 an ASCII byte never occurs inside a multi-byte
// sequence, so doubling that byte wherever it occurs is exact.
//
// NUL bytes are kept, not dropped: dropping would make two different names quote the same. libpq
// refuses SQL text with a NUL before sending it (Postgres.PostgresQuery.unsendableError), and the
// DQL lexer refuses NUL in identifiers, so a NUL can only fail a statement, never shorten it.

public enum Quote {
    /// A PostgreSQL identifier: `"na""me"`.
    public static func sqlIdentifier(_ name: String) -> String { wrap(name, in: UInt8(ascii: "\"")) }

    /// A PostgreSQL string constant: `'it''s'`. Valid with standard_conforming_strings = on (the
    /// default since 9.1, which BigPeer's SQL relies on), where a backslash is an ordinary character.
    public static func sqlLiteral(_ text: String) -> String { wrap(text, in: UInt8(ascii: "'")) }

    /// A DQL identifier: `` `na``me` ``.
    public static func dqlIdentifier(_ name: String) -> String { wrap(name, in: UInt8(ascii: "`")) }

    /// A DQL string literal: `'it''s'`, with backslash escapes for `\` and control characters
    /// (U+0000–U+001F, U+007F as `\n`, `\t`, … or `\u00XX`), so the literal is printable and reads
    /// back byte for byte.
    public static func dqlString(_ text: String) -> String {
        var out: [UInt8] = [UInt8(ascii: "'")]
        out.reserveCapacity(text.utf8.count + 2)
        for b in text.utf8 {
            switch b {
            case UInt8(ascii: "'"): out += [b, b]
            case UInt8(ascii: "\\"): out += [b, b]
            case 0x0A: out += Array("\\n".utf8)
            case 0x0D: out += Array("\\r".utf8)
            case 0x09: out += Array("\\t".utf8)
            case 0x08: out += Array("\\b".utf8)
            case 0x0C: out += Array("\\f".utf8)
            case 0x00..<0x20, 0x7F:
                let hex = Array("0123456789abcdef".utf8)
                out += Array("\\u00".utf8) + [hex[Int(b >> 4)], hex[Int(b & 0xF)]]
            default: out.append(b)
            }
        }
        out.append(UInt8(ascii: "'"))
        return String(decoding: out, as: UTF8.self)
    }

    /// `text` between two `quote` bytes, every `quote` byte inside doubled.
    static func wrap(_ text: String, in quote: UInt8) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(text.utf8.count + 2)
        out.append(quote)
        for b in text.utf8 {
            out.append(b)
            if b == quote { out.append(quote) }
        }
        out.append(quote)
        return String(decoding: out, as: UTF8.self)
    }
}
