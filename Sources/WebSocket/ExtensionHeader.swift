// Parsing of `Sec-WebSocket-Extensions` (RFC 6455 §9.1) and of comma-separated token lists
// (`Connection`, `Upgrade`, `Sec-WebSocket-Protocol`; RFC 9110 §5.6.1).
//
//   extension-list = 1#extension
//   extension      = extension-token *( ";" extension-param )
//   extension-param = token [ "=" (token | quoted-string) ]
//       ; a quoted-string value, once unescaped, must itself be a token
//
// Several header lines combine as one list, in order (RFC 9110 §5.3).

/// One extension offer or response element: a name and its parameters, in order.
public struct WebSocketExtensionElement: Hashable, Sendable {
    public var name: String
    public var parameters: [Parameter]

    public struct Parameter: Hashable, Sendable {
        public var name: String
        public var value: String?
        public init(name: String, value: String? = nil) { self.name = name; self.value = value }
    }

    public init(name: String, parameters: [Parameter] = []) { self.name = name; self.parameters = parameters }

    /// The element as it is written in a header: `name; p1; p2=v`.
    public var headerValue: String {
        var s = name
        for p in parameters {
            s += "; " + p.name
            if let v = p.value { s += "=" + v }
        }
        return s
    }

    /// Parses header values into elements; nil when any element is malformed (the whole header
    /// is then ignored: a server declines every offer rather than guess, §9.1).
    public static func parse(_ values: [String]) -> [WebSocketExtensionElement]? {
        var elements: [WebSocketExtensionElement] = []
        for value in values {
            var s = Scanner(Array(value.utf8))
            while true {
                s.skipWhitespace()
                if s.atEnd { break }
                if s.peek == UInt8(ascii: ",") { s.advance(); continue } // empty list elements are allowed
                guard let name = s.token() else { return nil }
                var element = WebSocketExtensionElement(name: name.lowercased())
                s.skipWhitespace()
                while s.peek == UInt8(ascii: ";") {
                    s.advance()
                    s.skipWhitespace()
                    guard let pname = s.token() else { return nil }
                    var param = Parameter(name: pname.lowercased())
                    s.skipWhitespace()
                    if s.peek == UInt8(ascii: "=") {
                        s.advance()
                        s.skipWhitespace()
                        guard let v = s.peek == UInt8(ascii: "\"") ? s.quotedString() : s.token(),
                              Scanner.isToken(v) else { return nil }
                        param.value = v
                        s.skipWhitespace()
                    }
                    element.parameters.append(param)
                }
                elements.append(element)
                if s.atEnd { break }
                guard s.peek == UInt8(ascii: ",") else { return nil }
                s.advance()
            }
        }
        return elements
    }
}

/// Splits comma-separated header values into trimmed, non-empty items (RFC 9110 §5.6.1).
func headerListItems(_ values: [String]) -> [Substring] {
    var items: [Substring] = []
    for value in values {
        for part in value.split(separator: ",", omittingEmptySubsequences: true) {
            let trimmed = part.drop { $0 == " " || $0 == "\t" }.reversed().drop { $0 == " " || $0 == "\t" }
            if !trimmed.isEmpty { items.append(Substring(String(trimmed.reversed()))) }
        }
    }
    return items
}

/// Case-insensitive ASCII comparison (header names and tokens).
func asciiEqualsIgnoringCase(_ a: some StringProtocol, _ b: some StringProtocol) -> Bool {
    let x = a.utf8, y = b.utf8
    guard x.count == y.count else { return false }
    for (c, d) in zip(x, y) {
        let lc = (c >= 65 && c <= 90) ? c | 0x20 : c
        let ld = (d >= 65 && d <= 90) ? d | 0x20 : d
        if lc != ld { return false }
    }
    return true
}

private struct Scanner {
    let bytes: [UInt8]
    var i = 0
    init(_ bytes: [UInt8]) { self.bytes = bytes }

    var atEnd: Bool { i >= bytes.count }
    var peek: UInt8? { atEnd ? nil : bytes[i] }
    mutating func advance() { i += 1 }
    mutating func skipWhitespace() { while let c = peek, c == 0x20 || c == 0x09 { i += 1 } }

    /// tchar (RFC 9110 §5.6.2): visible ASCII except delimiters.
    static func isTokenChar(_ c: UInt8) -> Bool {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"):
            return true
        default:
            return tokenSymbols.contains(c)
        }
    }

    private static let tokenSymbols: [UInt8] = Array("!#$%&'*+-.^_`|~".utf8)

    static func isToken(_ s: String) -> Bool { !s.isEmpty && s.utf8.allSatisfy(isTokenChar) }

    mutating func token() -> String? {
        let start = i
        while let c = peek, Scanner.isTokenChar(c) { i += 1 }
        return i > start ? String(decoding: bytes[start..<i], as: UTF8.self) : nil
    }

    mutating func quotedString() -> String? {
        guard peek == UInt8(ascii: "\"") else { return nil }
        i += 1
        var out: [UInt8] = []
        while let c = peek {
            i += 1
            if c == UInt8(ascii: "\"") { return String(decoding: out, as: UTF8.self) }
            if c == UInt8(ascii: "\\") {
                guard let e = peek else { return nil }
                i += 1
                out.append(e)
            } else {
                out.append(c)
            }
        }
        return nil
    }
}
