// A D-Bus message (spec: "Message Format"): a fixed 12-byte header, the header fields `a(yv)`,
// padding to 8, the body.

public struct DBusMessage: Sendable, Equatable {
    public enum Kind: UInt8, Sendable {
        case methodCall = 1, methodReturn = 2, error = 3, signal = 4
    }

    public struct Flags: OptionSet, Sendable, Hashable {
        public let rawValue: UInt8
        public init(rawValue: UInt8) { self.rawValue = rawValue }
        public static let noReplyExpected = Flags(rawValue: 0x1)
        public static let noAutoStart = Flags(rawValue: 0x2)
        public static let allowInteractiveAuthorization = Flags(rawValue: 0x4)
    }

    enum Field: UInt8 {
        case path = 1, interface, member, errorName, replySerial, destination, sender, signature, unixFDs
    }

    public var kind: Kind
    public var flags: Flags = []
    /// Set by whoever sends the message (`DBusMessage.encode(serial:)`); non-zero on the wire.
    public var serial: UInt32 = 0
    public var path: String?
    public var interface: String?
    public var member: String?
    public var errorName: String?
    public var replySerial: UInt32?
    public var destination: String?
    public var sender: String?
    public var body: [DBusValue] = []

    public init(kind: Kind, flags: Flags = [], serial: UInt32 = 0, path: String? = nil, interface: String? = nil, member: String? = nil,
                errorName: String? = nil, replySerial: UInt32? = nil, destination: String? = nil, sender: String? = nil, body: [DBusValue] = []) {
        self.kind = kind
        self.flags = flags
        self.serial = serial
        self.path = path
        self.interface = interface
        self.member = member
        self.errorName = errorName
        self.replySerial = replySerial
        self.destination = destination
        self.sender = sender
        self.body = body
    }

    public static func methodCall(destination: String?, path: String, interface: String?, member: String, body: [DBusValue] = []) -> DBusMessage {
        DBusMessage(kind: .methodCall, path: path, interface: interface, member: member, destination: destination, body: body)
    }

    public static func signal(path: String, interface: String, member: String, body: [DBusValue] = []) -> DBusMessage {
        DBusMessage(kind: .signal, path: path, interface: interface, member: member, body: body)
    }

    /// The reply to `call`, addressed to its sender.
    public static func methodReturn(to call: DBusMessage, body: [DBusValue] = []) -> DBusMessage {
        DBusMessage(kind: .methodReturn, replySerial: call.serial, destination: call.sender, body: body)
    }

    /// An error reply to `call`; `message` becomes the conventional single string argument.
    public static func error(to call: DBusMessage, name: String, message: String) -> DBusMessage {
        DBusMessage(kind: .error, errorName: name, replySerial: call.serial, destination: call.sender, body: [.string(message)])
    }

    /// The body's signature (the SIGNATURE header field).
    public var signature: String { DBusType.signature(of: body.map(\.type)) }

    /// The first argument as a string: the text of an error reply.
    public var errorMessage: String? { body.first?.stringValue }

    // MARK: - Encoding

    /// The message's bytes, little-endian, with `serial` (which must not be 0).
    public func encode(serial: UInt32) throws(DBusError) -> [UInt8] {
        guard serial != 0 else { throw .invalidValue("serial 0") }
        try checkRequiredFields()
        var bodyWriter = DBusWriter()
        try bodyWriter.write(body)
        var fields: [DBusValue] = []
        func field(_ code: Field, _ value: DBusValue) { fields.append(.structure([.byte(code.rawValue), .variant(value)])) }
        if let path { field(.path, .objectPath(path)) }
        if let interface { field(.interface, .string(interface)) }
        if let member { field(.member, .string(member)) }
        if let errorName { field(.errorName, .string(errorName)) }
        if let replySerial { field(.replySerial, .uint32(replySerial)) }
        if let destination { field(.destination, .string(destination)) }
        // libdbus's order, which makes our bytes comparable with what dbus-send writes.
        if !body.isEmpty { field(.signature, .signature(signature)) }
        if let sender { field(.sender, .string(sender)) }
        var w = DBusWriter()
        w.appendInteger(UInt8(ascii: "l"))
        w.appendInteger(kind.rawValue)
        w.appendInteger(flags.rawValue)
        w.appendInteger(UInt8(1))
        w.appendInteger(UInt32(bodyWriter.bytes.count))
        w.appendInteger(serial)
        try w.write(.array(.structure([.byte, .variant]), fields))
        w.pad(to: 8)
        var out = w.bytes
        out.append(contentsOf: bodyWriter.bytes)
        return out
    }

    func checkRequiredFields() throws(DBusError) {
        switch kind {
        case .methodCall:
            guard path != nil, member != nil else { throw .invalidValue("a method call needs a path and a member") }
        case .signal:
            guard path != nil, interface != nil, member != nil else { throw .invalidValue("a signal needs a path, an interface and a member") }
        case .error:
            guard errorName != nil, replySerial != nil else { throw .invalidValue("an error needs an error name and a reply serial") }
        case .methodReturn:
            guard replySerial != nil else { throw .invalidValue("a method return needs a reply serial") }
        }
    }

    // MARK: - Decoding

    /// The total length of the message whose first 16 bytes are `header`, checked against
    /// `limit` before the rest is buffered.
    public static func totalLength(header: some Collection<UInt8>, limit: Int) throws(DBusError) -> Int {
        let h = Array(header.prefix(16))
        guard h.count == 16 else { throw .truncated(offset: h.count) }
        let bigEndian: Bool
        switch h[0] {
        case UInt8(ascii: "l"): bigEndian = false
        case UInt8(ascii: "B"): bigEndian = true
        default: throw .invalid(offset: 0, "endianness byte \(h[0])")
        }
        guard h[3] == 1 else { throw .invalid(offset: 3, "protocol version \(h[3])") }
        func u32(_ at: Int) -> Int {
            let raw = UInt32(h[at]) | UInt32(h[at + 1]) << 8 | UInt32(h[at + 2]) << 16 | UInt32(h[at + 3]) << 24
            return Int(bigEndian ? raw.byteSwapped : raw)
        }
        let bodyLength = u32(4), fieldsLength = u32(12)
        guard bodyLength <= limit, fieldsLength <= limit else { throw .tooLarge(max(bodyLength, fieldsLength), limit: limit) }
        let total = (16 + fieldsLength + 7) / 8 * 8 + bodyLength
        guard total <= limit else { throw .tooLarge(total, limit: limit) }
        return total
    }

    /// Decodes exactly one whole message.
    public static func decode(_ bytes: [UInt8], limit: Int = DBusLimits.defaultMaxMessageSize) throws(DBusError) -> DBusMessage {
        let total = try totalLength(header: bytes, limit: limit)
        guard bytes.count == total else { throw bytes.count < total ? .truncated(offset: bytes.count) : .invalid(offset: total, "bytes after the message") }
        let bigEndian = bytes[0] == UInt8(ascii: "B")
        var r = DBusReader(bytes: bytes, offset: 1, bigEndian: bigEndian)
        guard case .byte(let rawKind) = try r.read(.byte) else { throw .invalid(offset: 1, "type") }
        guard let kind = Kind(rawValue: rawKind) else { throw .invalid(offset: 1, "message type \(rawKind)") }
        guard case .byte(let rawFlags) = try r.read(.byte) else { throw .invalid(offset: 2, "flags") }
        _ = try r.read(.byte)  // version, checked by totalLength
        let bodyLength = Int(try r.readInteger(UInt32.self))
        let serial = try r.readInteger(UInt32.self)
        guard serial != 0 else { throw .invalid(offset: 8, "serial 0") }
        let fieldsValue = try r.read(.array(.structure([.byte, .variant])))
        try r.skipPadding(to: 8)
        guard total - r.offset == bodyLength else { throw .invalid(offset: r.offset, "body length") }
        var m = DBusMessage(kind: kind, flags: Flags(rawValue: rawFlags), serial: serial)
        var signature = ""
        for f in fieldsValue.arrayElements ?? [] {
            guard case .structure(let pair) = f, pair.count == 2, case .byte(let code) = pair[0], case .variant(let v) = pair[1] else { continue }
            // Unknown fields are ignored (spec: "Header Fields"); known ones must have their type.
            guard let field = Field(rawValue: code) else { continue }
            try m.set(field, v, signature: &signature)
        }
        try m.checkRequiredFieldsForDecoding()
        var bodyReader = DBusReader(bytes: bytes, offset: total - bodyLength, end: total, bigEndian: bigEndian)
        let types: [DBusType]
        do { types = try DBusSignature.parse(signature) } catch { throw .invalid(offset: 12, "\(error)") }
        m.body = try bodyReader.read(signature: types)
        guard bodyReader.isAtEnd else { throw .invalid(offset: bodyReader.offset, "bytes after the body's values") }
        return m
    }

    private mutating func set(_ field: Field, _ v: DBusValue, signature: inout String) throws(DBusError) {
        func bad() -> DBusError { .invalid(offset: 12, "header field \(field) has type \(v.type.signature)") }
        switch (field, v) {
        case (.path, .objectPath(let s)): path = s
        case (.interface, .string(let s)): interface = s
        case (.member, .string(let s)): member = s
        case (.errorName, .string(let s)): errorName = s
        case (.replySerial, .uint32(let n)): replySerial = n
        case (.destination, .string(let s)): destination = s
        case (.sender, .string(let s)): sender = s
        case (.signature, .signature(let s)): signature = s
        case (.unixFDs, .uint32(let n)):
            guard n == 0 else { throw .invalid(offset: 12, "file descriptors were not negotiated") }
        default: throw bad()
        }
    }

    private func checkRequiredFieldsForDecoding() throws(DBusError) {
        do { try checkRequiredFields() } catch { throw .invalid(offset: 12, "\(error)") }
    }
}

public enum DBusLimits {
    /// The spec allows 128 MiB; nothing BigPeer exchanges with BlueZ comes near 1 MiB.
    public static let defaultMaxMessageSize = 1 << 20
}
