// The client side of the SASL handshake (spec: "Authentication Protocol") with the EXTERNAL
// mechanism: the bus checks our uid from the socket's credentials; we send it as the hex of its
// decimal ASCII digits. Unix file descriptor passing is not negotiated.

public struct DBusAuthClient: Sendable {
    public enum Step: Sendable, Equatable {
        /// Send these bytes and wait for more input.
        case send([UInt8])
        /// Authenticated: send these bytes (`BEGIN`); what follows on the stream are messages,
        /// starting with `leftover`.
        case authenticated(send: [UInt8], guid: String, leftover: [UInt8])
        case needMoreData
    }

    /// A server line longer than this fails the handshake (no legitimate reply comes near it).
    public static let maxLineLength = 1024
    private var buffer: [UInt8] = []
    private var done = false

    public init() {}

    /// The NUL byte the protocol starts with and `AUTH EXTERNAL <hex uid>`.
    public static func initialBytes(uid: UInt32) -> [UInt8] {
        let hex = String(uid).utf8.map { b in
            let digits = Array("0123456789abcdef".utf8)
            return String(decoding: [digits[Int(b >> 4)], digits[Int(b & 0xF)]], as: UTF8.self)
        }.joined()
        return [0] + Array("AUTH EXTERNAL \(hex)\r\n".utf8)
    }

    public mutating func receive(_ bytes: some Collection<UInt8>) throws(DBusError) -> Step {
        guard !done else { throw .authentication("bytes after the handshake ended") }
        buffer.append(contentsOf: bytes)
        guard let cr = crlfIndex() else {
            if buffer.count > Self.maxLineLength { throw .authentication("server line over \(Self.maxLineLength) bytes") }
            return .needMoreData
        }
        guard cr <= Self.maxLineLength else { throw .authentication("server line over \(Self.maxLineLength) bytes") }
        let line = String(decoding: buffer[0..<cr], as: UTF8.self)
        let leftover = Array(buffer[(cr + 2)...])
        buffer = []
        let words = line.split(separator: " ", omittingEmptySubsequences: true)
        switch words.first {
        case "OK"?:
            guard words.count == 2 else { throw .authentication("malformed OK: \(line)") }
            done = true
            return .authenticated(send: Array("BEGIN\r\n".utf8), guid: String(words[1]), leftover: leftover)
        case "REJECTED"?:
            throw .authentication("EXTERNAL rejected (the bus offers: \(words.dropFirst().joined(separator: " ")))")
        case "DATA"?:
            // The bus asks for the identity again when we sent none; we always send one, so an
            // empty DATA answer is the only sensible reply.
            buffer = leftover
            return .send(Array("DATA\r\n".utf8))
        case "ERROR"?:
            throw .authentication("the bus answered ERROR: \(line)")
        default:
            throw .authentication("unexpected line: \(line)")
        }
    }

    private func crlfIndex() -> Int? {
        guard buffer.count >= 2 else { return nil }
        for i in 0..<(buffer.count - 1) where buffer[i] == 13 && buffer[i + 1] == 10 { return i }
        return nil
    }
}
