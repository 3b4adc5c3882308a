// permessage-deflate negotiation (RFC 7692 §5, §7.1).
//
//   offer:    permessage-deflate; client_max_window_bits; server_no_context_takeover
//   response: permessage-deflate; server_no_context_takeover; client_max_window_bits=12
//
// Four parameters (§7.1): `server_no_context_takeover` and `client_no_context_takeover` (no
// value) ask an end to reset its compressor after every message; `server_max_window_bits` and
// `client_max_window_bits` (8...15, decimal without leading zeros) bound an end's LZ77 window.
// An offer with an unknown, repeated or badly valued parameter is declined, and the server moves
// on to the client's next offer (§7.1: offers come in preference order, fallbacks included).
//
// zlib cannot produce raw deflate with an 8-bit window (`deflateInit2(-8)` is Z_STREAM_ERROR
// since zlib 1.2.9, and older versions silently used 9). So when this end must compress within
// 256 bytes it accepts but sends every message uncompressed, which RFC 7692 §6 allows (RSV1 is
// per message); it never sends a distance the peer did not agree to. For inflating, a window
// larger than the peer's is always safe, so 8 is inflated with 9 (zlib's smallest raw window
// that also tolerates old zlib peers that turned 8 into 9).

/// This endpoint's permessage-deflate policy.
public struct PerMessageDeflateConfiguration: Hashable, Sendable {
    /// Server: always reset our compressor per message (and say so). Client: ask the server to.
    public var serverNoContextTakeover: Bool
    /// Server: ask the client to reset per message. Client: announce that we will.
    public var clientNoContextTakeover: Bool
    /// Server: the largest window we compress with. Client: ask the server for at most this.
    public var serverMaxWindowBits: Int?
    /// Server: limit the client's window when it supports the parameter. Client: our limit.
    public var clientMaxWindowBits: Int?
    /// zlib level, 0...9. Default 1: on JSON-like text it costs about a fifth of zlib's own default
    /// (6) for output ~15 % larger, and a server's CPU is shared by all its clients (nginx's
    /// `gzip_comp_level` defaults to 1 for the same reason). Raise it where bandwidth is scarcer.
    public var compressionLevel: Int32
    /// zlib memLevel, 1...9: deflate state is about (1 << (windowBits + 2)) + (1 << (memLevel + 9)).
    public var memoryLevel: Int32
    /// Messages shorter than this go out uncompressed: deflate cannot win on tiny payloads.
    public var minimumSizeToCompress: Int

    public init(
        serverNoContextTakeover: Bool = false, clientNoContextTakeover: Bool = false,
        serverMaxWindowBits: Int? = nil, clientMaxWindowBits: Int? = nil,
        compressionLevel: Int32 = 1, memoryLevel: Int32 = 8, minimumSizeToCompress: Int = 32
    ) {
        self.serverNoContextTakeover = serverNoContextTakeover
        self.clientNoContextTakeover = clientNoContextTakeover
        self.serverMaxWindowBits = serverMaxWindowBits.map { min(15, max(8, $0)) }
        self.clientMaxWindowBits = clientMaxWindowBits.map { min(15, max(8, $0)) }
        self.compressionLevel = min(9, max(0, compressionLevel))
        self.memoryLevel = min(9, max(1, memoryLevel))
        self.minimumSizeToCompress = max(0, minimumSizeToCompress)
    }

    public static let extensionName = "permessage-deflate"
}

/// What both ends agreed to, in the RFC's server/client terms.
public struct PerMessageDeflateAgreement: Hashable, Sendable {
    public var serverNoContextTakeover: Bool
    public var clientNoContextTakeover: Bool
    public var serverMaxWindowBits: Int
    public var clientMaxWindowBits: Int
    /// Local tuning carried over from the configuration.
    public var compressionLevel: Int32
    public var memoryLevel: Int32
    public var minimumSizeToCompress: Int

    /// Seen from one end: which window and reset rule apply to what it sends and what it receives.
    func sendParameters(role: WebSocketRole) -> (noContextTakeover: Bool, windowBits: Int) {
        role == .server ? (serverNoContextTakeover, serverMaxWindowBits) : (clientNoContextTakeover, clientMaxWindowBits)
    }

    func receiveParameters(role: WebSocketRole) -> (noContextTakeover: Bool, windowBits: Int) {
        role == .server ? (clientNoContextTakeover, clientMaxWindowBits) : (serverNoContextTakeover, serverMaxWindowBits)
    }
}

/// The four parameters of one offer or response, validated (§7.1).
struct PerMessageDeflateParameters: Hashable {
    var serverNoContextTakeover = false
    var clientNoContextTakeover = false
    var serverMaxWindowBits: Int?
    /// Present without a value means "I support the parameter" (offers only, §7.1.2.2).
    var clientMaxWindowBits: Int??

    /// Nil when any parameter is unknown, repeated, or has an invalid value (§7.1).
    init?(_ element: WebSocketExtensionElement) {
        var seen = Set<String>()
        for p in element.parameters {
            guard seen.insert(p.name).inserted else { return nil }
            switch p.name {
            case "server_no_context_takeover":
                guard p.value == nil else { return nil }
                serverNoContextTakeover = true
            case "client_no_context_takeover":
                guard p.value == nil else { return nil }
                clientNoContextTakeover = true
            case "server_max_window_bits":
                guard let v = p.value, let bits = Self.windowBits(v) else { return nil }
                serverMaxWindowBits = bits
            case "client_max_window_bits":
                if let v = p.value {
                    guard let bits = Self.windowBits(v) else { return nil }
                    clientMaxWindowBits = .some(bits)
                } else {
                    clientMaxWindowBits = .some(nil)
                }
            default:
                return nil
            }
        }
    }

    /// "8" ... "15" exactly: 1*DIGIT with no leading zeros (§7.1.2.1).
    static func windowBits(_ text: String) -> Int? {
        guard let n = Int(text), (8...15).contains(n), String(n) == text else { return nil }
        return n
    }
}

extension PerMessageDeflateConfiguration {
    /// Server side: picks the first acceptable offer and returns the agreement plus the response
    /// element, or nil to decline every offer (the connection then runs uncompressed).
    public func negotiate(offers: [WebSocketExtensionElement]) -> (PerMessageDeflateAgreement, WebSocketExtensionElement)? {
        for offer in offers where offer.name == Self.extensionName {
            guard let params = PerMessageDeflateParameters(offer) else { continue } // §7.1: decline, try the next
            var response = WebSocketExtensionElement(name: Self.extensionName)
            var agreement = PerMessageDeflateAgreement(
                serverNoContextTakeover: params.serverNoContextTakeover || serverNoContextTakeover,
                clientNoContextTakeover: params.clientNoContextTakeover || clientNoContextTakeover,
                serverMaxWindowBits: 15, clientMaxWindowBits: 15,
                compressionLevel: compressionLevel, memoryLevel: memoryLevel, minimumSizeToCompress: minimumSizeToCompress)
            // §7.1.1.1: accept a requested reset by echoing it; a server may also impose it.
            if agreement.serverNoContextTakeover { response.parameters.append(.init(name: "server_no_context_takeover")) }
            // §7.1.1.2: the server may ask the client to reset, whether or not it offered to.
            if agreement.clientNoContextTakeover { response.parameters.append(.init(name: "client_no_context_takeover")) }
            // §7.1.2.1: an offered limit must be answered with a value at most that; without one
            // the server may still announce a smaller window of its own.
            let serverBits = Swift.min(params.serverMaxWindowBits ?? 15, serverMaxWindowBits ?? 15)
            if params.serverMaxWindowBits != nil || serverBits < 15 {
                agreement.serverMaxWindowBits = serverBits
                response.parameters.append(.init(name: "server_max_window_bits", value: String(serverBits)))
            }
            // §7.1.2.2: only a client that offered the parameter may be limited; its value (if
            // any) is an upper bound the server may answer with or below.
            if case .some(let offered) = params.clientMaxWindowBits, offered != nil || clientMaxWindowBits != nil {
                let bits = Swift.min(offered ?? 15, clientMaxWindowBits ?? 15)
                agreement.clientMaxWindowBits = bits
                response.parameters.append(.init(name: "client_max_window_bits", value: String(bits)))
            }
            return (agreement, response)
        }
        return nil
    }

    /// Client side: the offer to send in `Sec-WebSocket-Extensions`.
    public var clientOffer: WebSocketExtensionElement {
        var offer = WebSocketExtensionElement(name: Self.extensionName)
        if serverNoContextTakeover { offer.parameters.append(.init(name: "server_no_context_takeover")) }
        if clientNoContextTakeover { offer.parameters.append(.init(name: "client_no_context_takeover")) }
        if let s = serverMaxWindowBits { offer.parameters.append(.init(name: "server_max_window_bits", value: String(s))) }
        // Always announce support, so a server that wants a smaller client window can ask (§7.1.2.2).
        offer.parameters.append(.init(name: "client_max_window_bits", value: clientMaxWindowBits.map { String($0) }))
        return offer
    }

    /// Client side: checks the server's response against `clientOffer` (§7.1: the client fails
    /// the connection on a response it could not have asked for).
    func acceptResponse(_ element: WebSocketExtensionElement) -> PerMessageDeflateAgreement? {
        guard element.name == Self.extensionName, let params = PerMessageDeflateParameters(element) else { return nil }
        // §7.1.1.1: a server accepting our reset request must say so.
        if serverNoContextTakeover && !params.serverNoContextTakeover { return nil }
        // §7.1.2.1: a limit we asked for must come back, at most as large.
        if let asked = serverMaxWindowBits {
            guard let got = params.serverMaxWindowBits, got <= asked else { return nil }
        }
        var clientBits = clientMaxWindowBits ?? 15
        if case .some(let answered) = params.clientMaxWindowBits {
            // §7.1.2.2: in a response the parameter must have a value, within what we offered.
            guard let bits = answered, bits <= clientBits else { return nil }
            clientBits = bits
        }
        return PerMessageDeflateAgreement(
            serverNoContextTakeover: params.serverNoContextTakeover,
            clientNoContextTakeover: params.clientNoContextTakeover || clientNoContextTakeover,
            serverMaxWindowBits: params.serverMaxWindowBits ?? 15, clientMaxWindowBits: clientBits,
            compressionLevel: compressionLevel, memoryLevel: memoryLevel, minimumSizeToCompress: minimumSizeToCompress)
    }
}
