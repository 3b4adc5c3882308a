import CZlib
import Testing
import TestRandomness
@testable import WebSocket

@Suite struct PerMessageDeflateNegotiationTests {
    func offers(_ header: String) -> [WebSocketExtensionElement] { WebSocketExtensionElement.parse([header]) ?? [] }

    func respond(_ header: String, _ config: PerMessageDeflateConfiguration = .init()) -> String? {
        config.negotiate(offers: offers(header))?.1.headerValue
    }

    @Test func defaultOffer_isAcceptedPlain() {
        #expect(respond("permessage-deflate") == "permessage-deflate")
        #expect(respond("permessage-deflate; client_max_window_bits") == "permessage-deflate")
    }

    @Test func eachParameter_isAnsweredPerRFC7692() {
        #expect(respond("permessage-deflate; server_no_context_takeover") == "permessage-deflate; server_no_context_takeover")
        #expect(respond("permessage-deflate; client_no_context_takeover") == "permessage-deflate; client_no_context_takeover")
        #expect(respond("permessage-deflate; server_max_window_bits=10") == "permessage-deflate; server_max_window_bits=10")
        #expect(respond("permessage-deflate; client_max_window_bits=9") == "permessage-deflate; client_max_window_bits=9")
        // Server policy: impose our own reset and smaller windows (§7.1.1.1, §7.1.2).
        let strict = PerMessageDeflateConfiguration(serverNoContextTakeover: true, clientNoContextTakeover: true,
                                                    serverMaxWindowBits: 11, clientMaxWindowBits: 12)
        #expect(respond("permessage-deflate; client_max_window_bits", strict)
                == "permessage-deflate; server_no_context_takeover; client_no_context_takeover; server_max_window_bits=11; client_max_window_bits=12")
        // A client that did not offer client_max_window_bits cannot be limited (§7.1.2.2).
        #expect(respond("permessage-deflate", strict)
                == "permessage-deflate; server_no_context_takeover; client_no_context_takeover; server_max_window_bits=11")
        // The smaller of the offered and configured limits wins.
        #expect(respond("permessage-deflate; server_max_window_bits=9; client_max_window_bits=14", strict)
                == "permessage-deflate; server_no_context_takeover; client_no_context_takeover; server_max_window_bits=9; client_max_window_bits=12")
    }

    @Test func invalidOffers_areDeclined() {
        for bad in [
            "permessage-deflate; server_max_window_bits=7", "permessage-deflate; server_max_window_bits=16",
            "permessage-deflate; server_max_window_bits=08", "permessage-deflate; server_max_window_bits",
            "permessage-deflate; client_max_window_bits=abc", "permessage-deflate; server_no_context_takeover=1",
            "permessage-deflate; server_no_context_takeover; server_no_context_takeover",
            "permessage-deflate; unknown_parameter", "x-webkit-deflate-frame",
        ] {
            #expect(respond(bad) == nil, "\(bad)")
        }
    }

    @Test func fallbackOffers_firstAcceptableWins() {
        let header = "permessage-deflate; server_max_window_bits=20, permessage-deflate; client_no_context_takeover, permessage-deflate"
        #expect(respond(header) == "permessage-deflate; client_no_context_takeover")
    }

    @Test func extensionHeader_grammar() {
        let parsed = WebSocketExtensionElement.parse(["foo; a=\"1\"; b, bar", "permessage-deflate ;client_max_window_bits = 10"])
        #expect(parsed == [
            .init(name: "foo", parameters: [.init(name: "a", value: "1"), .init(name: "b")]),
            .init(name: "bar"),
            .init(name: "permessage-deflate", parameters: [.init(name: "client_max_window_bits", value: "10")]),
        ])
        #expect(WebSocketExtensionElement.parse(["foo; a=\"x y\""]) == nil) // quoted value must be a token
        #expect(WebSocketExtensionElement.parse(["foo bar"]) == nil)
        #expect(WebSocketExtensionElement.parse(["foo; =1"]) == nil)
        #expect(WebSocketExtensionElement.parse(["foo; a=\"unterminated"]) == nil)
    }

    @Test func clientVerification_rejectsResponsesItDidNotAskFor() {
        let client = PerMessageDeflateConfiguration(serverNoContextTakeover: true, serverMaxWindowBits: 10, clientMaxWindowBits: 12)
        func accept(_ h: String) -> PerMessageDeflateAgreement? { offers(h).first.flatMap { client.acceptResponse($0) } }
        let good = accept("permessage-deflate; server_no_context_takeover; server_max_window_bits=9; client_max_window_bits=11")
        #expect(good?.serverMaxWindowBits == 9 && good?.clientMaxWindowBits == 11 && good?.serverNoContextTakeover == true)
        #expect(accept("permessage-deflate; server_max_window_bits=10") == nil)                              // reset not confirmed
        #expect(accept("permessage-deflate; server_no_context_takeover") == nil)                             // window not confirmed
        #expect(accept("permessage-deflate; server_no_context_takeover; server_max_window_bits=11") == nil)  // larger than asked
        #expect(accept("permessage-deflate; server_no_context_takeover; server_max_window_bits=10; client_max_window_bits=13") == nil)
        #expect(accept("permessage-deflate; server_no_context_takeover; server_max_window_bits=10; client_max_window_bits") == nil)
        #expect(accept("permessage-deflate; server_no_context_takeover; server_max_window_bits=10; bogus") == nil)
    }
}

@Suite struct PerMessageDeflateRoundTripTests {
    let clock = ManualClock()

    /// Runs the real negotiation: client offer → server answer → client verification.
    func negotiate(client: PerMessageDeflateConfiguration, server: PerMessageDeflateConfiguration) throws
        -> (client: WebSocketConnection, server: WebSocketConnection, response: String) {
        let offer = try #require(WebSocketExtensionElement.parse([client.clientOffer.headerValue]))
        let (serverAgreement, response) = try #require(server.negotiate(offers: offer))
        let clientAgreement = try #require(client.acceptResponse(response))
        #expect(clientAgreement.serverMaxWindowBits == serverAgreement.serverMaxWindowBits)
        #expect(clientAgreement.clientMaxWindowBits == serverAgreement.clientMaxWindowBits)
        #expect(clientAgreement.serverNoContextTakeover == serverAgreement.serverNoContextTakeover)
        #expect(clientAgreement.clientNoContextTakeover == serverAgreement.clientNoContextTakeover)
        let config = WebSocketConfiguration(maxMessageSize: 1 << 22)
        return (WebSocketConnection(role: .client, configuration: config, deflate: clientAgreement, maskKeys: .seeded(5), now: clock.now),
                WebSocketConnection(role: .server, configuration: config, deflate: serverAgreement, now: clock.now),
                response.headerValue)
    }

    static func messages() -> [WebSocketMessage] {
        var rng = SeededRandom(seed: 99)
        let words = ["sync", "document", "peer", "κόσμε", "😀", "replica", "delta"]
        let text = (0..<3000).map { _ in words.randomElement(using: &rng)! }.joined(separator: " ")
        let noise = (0..<5000).map { _ in UInt8.random(in: 0...255, using: &rng) }
        return [.text(text), .binary(Array(repeating: 7, count: 100_000)), .text("short"), .binary(noise), .text(text), .binary([])]
    }

    /// Sends every message both ways; returns the compressed-flag of each frame client → server.
    func exchange(_ client: inout WebSocketConnection, _ server: inout WebSocketConnection) throws -> [Bool] {
        var rsv1: [Bool] = []
        for message in Self.messages() {
            let up = try client.send(message, now: clock.now).written
            client.didWrite(byteCount: up.count, now: clock.now)  // the socket took it, as an adapter reports
            rsv1 += try parseFrames(up, sentBy: .client).map(\.rsv1)
            #expect(server.receiveAll(up, now: clock.now).delivered == [message])
            let down = try server.send(message, now: clock.now).written
            server.didWrite(byteCount: down.count, now: clock.now)
            #expect(client.receiveAll(down, now: clock.now).delivered == [message])
        }
        return rsv1
    }

    @Test(arguments: [false, true], [false, true])
    func roundTrip_everyContextTakeoverCombination(serverReset: Bool, clientReset: Bool) throws {
        for bits in [nil, 9, 12, 15] as [Int?] {
            var (client, server, _) = try negotiate(
                client: .init(serverNoContextTakeover: serverReset, clientNoContextTakeover: clientReset,
                              serverMaxWindowBits: bits, clientMaxWindowBits: bits),
                server: .init())
            let rsv1 = try exchange(&client, &server)
            #expect(rsv1 == [true, true, false, true, true, false]) // "short" and empty go out plain
        }
    }

    @Test func serverImposedParameters_roundTrip() throws {
        let policies: [PerMessageDeflateConfiguration] = [
            .init(serverNoContextTakeover: true),
            .init(clientNoContextTakeover: true),
            .init(serverMaxWindowBits: 10),
            .init(clientMaxWindowBits: 9),
            .init(serverNoContextTakeover: true, clientNoContextTakeover: true, serverMaxWindowBits: 9, clientMaxWindowBits: 11,
                  compressionLevel: 1, memoryLevel: 2),
        ]
        for policy in policies {
            var (client, server, _) = try negotiate(client: .init(), server: policy)
            #expect(try exchange(&client, &server) == [true, true, false, true, true, false])
        }
    }

    @Test func windowBits8_isNegotiated_butSentUncompressed() throws {
        var (client, server, response) = try negotiate(
            client: .init(serverMaxWindowBits: 8, clientMaxWindowBits: 8), server: .init())
        #expect(response == "permessage-deflate; server_max_window_bits=8; client_max_window_bits=8")
        let rsv1 = try exchange(&client, &server)
        #expect(rsv1.allSatisfy { !$0 }) // zlib cannot deflate raw with a 256-byte window
    }

    @Test func contextTakeover_shrinksRepeatedMessages_andNoContextTakeoverDoesNot() throws {
        let message = WebSocketMessage.text(String(repeating: "bigpeer sync delta ", count: 20))
        for reset in [false, true] {
            var (client, _, _) = try negotiate(client: .init(clientNoContextTakeover: reset), server: .init())
            let first = try client.send(message, now: clock.now).written.count
            let second = try client.send(message, now: clock.now).written.count
            #expect(reset ? second == first : second < first / 2, "reset \(reset): \(first) then \(second)")
        }
    }

    @Test func idleConnection_releasesZlibState_onlyWithoutContextTakeover() throws {
        var clock = ManualClock()
        for reset in [false, true] {
            var (client, server, _) = try negotiate(
                client: .init(serverNoContextTakeover: reset, clientNoContextTakeover: reset), server: .init())
            _ = try exchange(&client, &server)
            let before = try #require(server.codec?.hasAllocatedState)
            #expect(before == (true, true))
            clock.advance(.seconds(30)) // one keep-alive interval of silence
            _ = server.tick(now: clock.now)
            let held = try #require(server.codec?.hasAllocatedState)
            #expect(held == (!reset, !reset), "reset \(reset)")
            // The state comes back on demand and messages still round-trip.
            let up = try client.send(.text(String(repeating: "again ", count: 50)), now: clock.now).written
            #expect(server.receiveAll(up, now: clock.now).delivered.count == 1)
        }
    }

    @Test func compressedMessage_splitIntoFragments_withRSV1OnlyOnTheFirst() throws {
        var (client, server, _) = try negotiate(client: .init(), server: .init())
        let text = String(repeating: "fragmented and compressed ", count: 200)
        let compressed = try parseFrames(try client.send(.text(text), now: clock.now).written, sentBy: .client)[0].payload
        let third = compressed.count / 3
        let parts = [Array(compressed[..<third]), Array(compressed[third..<(2 * third)]), Array(compressed[(2 * third)...])]
        let bytes = frame(.text, parts[0], fin: false, rsv1: true) + frame(.ping, [1])
            + frame(.continuation, parts[1], fin: false) + frame(.continuation, parts[2])
        for split in stride(from: 0, through: bytes.count, by: 7) {
            var s = server
            var actions = s.receiveAll(Array(bytes[..<split]), now: clock.now)
            actions += s.receiveAll(Array(bytes[split...]), now: clock.now)
            #expect(actions.delivered == [.text(text)])
            server = WebSocketConnection(role: .server, deflate: PerMessageDeflateConfiguration().negotiate(offers: [.init(name: "permessage-deflate")])?.0, now: clock.now)
        }
        // RSV1 on a continuation frame is a protocol error (RFC 7692 §6.1).
        let bad = frame(.text, parts[0], fin: false, rsv1: true) + frame(.continuation, parts[1], fin: true, rsv1: true)
        #expect(server.receiveAll(bad, now: clock.now).closeCode == .protocolError)
    }

    @Test func zipBomb_isCut_at1009_whileInflating() throws {
        let agreement = try #require(PerMessageDeflateConfiguration().negotiate(offers: [.init(name: "permessage-deflate")])?.0)
        var bomber = agreement
        bomber.compressionLevel = 9
        let sender = PerMessageDeflateCodec(agreement: bomber, role: .client)
        // 64 MiB of zeros deflate to ~64 KiB at level 9: far below the frame limit, far above the message limit.
        let zeros = [UInt8](repeating: 0, count: 64 << 20)
        let bomb = try #require(zeros.withUnsafeBytes { sender.compress($0) })
        #expect(bomb.count < 128 << 10)
        var server = WebSocketConnection(role: .server, configuration: WebSocketConfiguration(maxMessageSize: 1 << 20),
                                         deflate: agreement, now: clock.now)
        let actions = server.receiveAll(frame(.binary, bomb, rsv1: true), now: clock.now)
        #expect(actions.closeCode == .messageTooBig)
        #expect(try sentCloseCode(actions, by: .server) == 1009)
        #expect(server.assembly.bytes.isEmpty) // nothing of the bomb is kept
    }

    @Test func corruptCompressedData_fails1007() throws {
        let agreement = try #require(PerMessageDeflateConfiguration().negotiate(offers: [.init(name: "permessage-deflate")])?.0)
        var server = WebSocketConnection(role: .server, deflate: agreement, now: clock.now)
        let actions = server.receiveAll(frame(.binary, [0xFF, 0xFF, 0xFF, 0xFF, 0x00], rsv1: true), now: clock.now)
        #expect(actions.closeCode == .invalidPayloadData)
    }

    @Test func compressedText_withInvalidUTF8_fails1007() throws {
        let agreement = try #require(PerMessageDeflateConfiguration().negotiate(offers: [.init(name: "permessage-deflate")])?.0)
        let sender = PerMessageDeflateCodec(agreement: agreement, role: .client)
        let payload = Array(repeating: UInt8(0x41), count: 100) + [0xC0, 0x80]
        let compressed = try #require(payload.withUnsafeBytes { sender.compress($0) })
        var server = WebSocketConnection(role: .server, deflate: agreement, now: clock.now)
        #expect(server.receiveAll(frame(.text, compressed, rsv1: true), now: clock.now).closeCode == .invalidPayloadData)
    }

    @Test func finalBlock_fromPeer_isAccepted_andTheNextMessageStillInflates() throws {
        let agreement = try #require(PerMessageDeflateConfiguration().negotiate(offers: [.init(name: "permessage-deflate")])?.0)
        var server = WebSocketConnection(role: .server, deflate: agreement, now: clock.now)
        for text in ["first message, finished with BFINAL", "second one, also final"] {
            let compressed = rawDeflateFinished(Array(text.utf8))
            #expect(server.receiveAll(frame(.text, compressed, rsv1: true), now: clock.now).delivered == [.text(text)])
        }
    }

    /// A raw DEFLATE stream ended with Z_FINISH (a BFINAL block), as some peers send (RFC 7692 §7.2.3.4).
    func rawDeflateFinished(_ input: [UInt8]) -> [UInt8] {
        var stream = z_stream()
        deflateInit2_(&stream, 6, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY, zlibVersion(), Int32(MemoryLayout<z_stream>.size))
        var out = [UInt8](repeating: 0, count: input.count + 64)
        var input = input
        let produced = input.withUnsafeMutableBufferPointer { inp in
            out.withUnsafeMutableBufferPointer { o in
                stream.next_in = inp.baseAddress
                stream.avail_in = UInt32(inp.count)
                stream.next_out = o.baseAddress
                stream.avail_out = UInt32(o.count)
                deflate(&stream, Z_FINISH)
                return o.count - Int(stream.avail_out)
            }
        }
        deflateEnd(&stream)
        return Array(out[..<produced])
    }
}
