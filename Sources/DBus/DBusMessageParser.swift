/// Cuts a byte stream into messages. The length is known from the first 16 bytes and checked
/// against `maxMessageSize` before the rest is buffered.
public struct DBusMessageParser: Sendable {
    public let maxMessageSize: Int
    private var buffer: [UInt8] = []

    public init(maxMessageSize: Int = DBusLimits.defaultMaxMessageSize) {
        self.maxMessageSize = maxMessageSize
    }

    public mutating func append(_ bytes: some Collection<UInt8>) {
        buffer.append(contentsOf: bytes)
    }

    /// The next whole message, or nil when more bytes are needed. An error leaves the stream
    /// unusable: the caller closes the connection.
    public mutating func next() throws(DBusError) -> DBusMessage? {
        guard buffer.count >= 16 else { return nil }
        let total = try DBusMessage.totalLength(header: buffer.prefix(16), limit: maxMessageSize)
        guard buffer.count >= total else { return nil }
        let bytes = Array(buffer[0..<total])
        buffer.removeFirst(total)
        return try DBusMessage.decode(bytes, limit: maxMessageSize)
    }
}
