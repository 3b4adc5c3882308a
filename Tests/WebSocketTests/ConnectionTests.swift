import Sockets
import Testing
@testable import WebSocket

@Suite struct ConnectionTests {
    var clock = ManualClock()

    func server(_ configuration: WebSocketConfiguration = WebSocketConfiguration()) -> WebSocketConnection {
        WebSocketConnection(role: .server, configuration: configuration, now: clock.now)
    }

    @Test func textAndBinary_areDelivered() {
        var ws = server()
        let actions = ws.receiveAll(frame(.text, Array("hello".utf8)) + frame(.binary, [1, 2, 3]), now: clock.now)
        #expect(actions.delivered == [.text("hello"), .binary([1, 2, 3])])
        #expect(actions.written.isEmpty)
    }

    @Test func receive_stopsAfterEachMessage_soAnswersKeepTheirOrder() throws {
        var ws = server()
        let first = ws.receive(frame(.text, Array("one".utf8)) + frame(.binary, [9], fin: true, rsv1: false) + [0x83, 0x80, 0, 0, 0, 0], now: clock.now)
        #expect(first.delivered == [.text("one")])
        #expect(ws.hasBufferedInput)
        let echo = try ws.send(.text("one"), now: clock.now)
        #expect(try parseFrames(echo.written, sentBy: .server).map(\.payload) == [Array("one".utf8)])
        #expect(ws.receive([], now: clock.now).delivered == [.binary([9])])
        let last = ws.receive([], now: clock.now)
        #expect(last.closeCode == .protocolError)
    }

    @Test func fragments_withInterleavedPing_reassemble_andPongComesFirst() throws {
        var ws = server()
        let bytes = frame(.text, Array("frag".utf8), fin: false) + frame(.ping, [7, 7])
            + frame(.continuation, Array("men".utf8), fin: false) + frame(.continuation, Array("ted".utf8))
        let actions = ws.receiveAll(bytes, now: clock.now)
        #expect(actions.delivered == [.text("fragmented")])
        let sent = try parseFrames(actions.written, sentBy: .server)
        #expect(sent == [ParsedFrame(opcode: .pong, fin: true, rsv1: false, masked: false, payload: [7, 7])])
    }

    @Test func everySplitPoint_deliversTheSameMessages() {
        let bytes = frame(.text, Array("héllo ".utf8), fin: false) + frame(.ping, [1])
            + frame(.continuation, Array("wörld".utf8)) + frame(.binary, Array(repeating: 0xAB, count: 300))
        for split in 0...bytes.count {
            var ws = server()
            var actions = ws.receiveAll(Array(bytes[..<split]), now: clock.now)
            actions += ws.receiveAll(Array(bytes[split...]), now: clock.now)
            #expect(actions.delivered == [.text("héllo wörld"), .binary(Array(repeating: 0xAB, count: 300))], "split \(split)")
        }
    }

    /// Feeds `bytes` and returns the code the server reported and the code it sent.
    func violationCodes(_ bytes: [UInt8], _ configuration: WebSocketConfiguration = WebSocketConfiguration()) throws -> (WebSocketCloseCode?, UInt16?) {
        var ws = server(configuration)
        let actions = ws.receiveAll(bytes, now: clock.now)
        #expect(actions.closesTransport)
        #expect(!ws.wantsToRead)
        return (actions.closeCode, try sentCloseCode(actions, by: .server))
    }

    @Test func protocolViolations_closeWithTheirExactCodes() throws {
        let cases: [([UInt8], UInt16, WebSocketConfiguration)] = [
            (frame(.continuation, [1]), 1002, .init()),                                     // §5.4
            (frame(.text, [0x41], fin: false) + frame(.binary, [1]), 1002, .init()),         // §5.4
            (frame(.binary, [1], rsv1: true), 1002, .init()),                                // RSV1 without deflate
            ([0x82, 0x01, 0x00], 1002, .init()),                                             // unmasked client frame
            (frame(.close, [0x03]), 1002, .init()),                                          // 1-byte close body
            (frame(.close, [0x03, 0xED]), 1002, .init()),                                    // code 1005 on the wire
            (frame(.close, [0x03, 0xE7]), 1002, .init()),                                    // 999
            (frame(.close, [0x0B, 0xB7]), 1002, .init()),                                    // 2999
            (frame(.close, [0x03, 0xE8, 0xFF]), 1007, .init()),                              // reason not UTF-8
            (frame(.text, [0xC0, 0x80]), 1007, .init()),                                     // overlong
            (frame(.binary, Array(repeating: 0, count: 200)), 1009, .init(maxFrameSize: 125)),
            (frame(.binary, Array(repeating: 0, count: 100), fin: false) + frame(.continuation, Array(repeating: 0, count: 100)),
             1009, .init(maxMessageSize: 150)),
            (frame(.binary, [1], fin: false) + frame(.continuation, [1], fin: false) + frame(.continuation, [1]),
             1009, .init(maxFragmentsPerMessage: 2)),
        ]
        for (bytes, code, configuration) in cases {
            let (reported, sent) = try violationCodes(bytes, configuration)
            #expect(sent == code, "\(bytes.prefix(8))")
            #expect(reported?.rawValue == code)
        }
    }

    /// `maxFirstMessageSize` holds the first message (sync's hello) to less than the others: 1009
    /// from the frame's header, before its payload; after one whole message the usual limit.
    @Test func firstMessage_isHeldToItsOwnLimit() throws {
        var config = WebSocketConfiguration(maxFrameSize: 1000, maxMessageSize: 1000)
        config.maxFirstMessageSize = 100
        #expect(try violationCodes(Array(frame(.binary, Array(repeating: 0, count: 101)).prefix(8)), config).1 == 1009)
        #expect(try violationCodes(frame(.binary, Array(repeating: 0, count: 60), fin: false)
                                   + frame(.continuation, Array(repeating: 0, count: 60)), config).1 == 1009, "fragments count together")
        var ws = server(config)
        #expect(ws.receiveAll(frame(.binary, Array(repeating: 1, count: 100)), now: clock.now).delivered == [.binary(Array(repeating: 1, count: 100))])
        #expect(ws.receiveAll(frame(.binary, Array(repeating: 2, count: 1000)), now: clock.now).delivered == [.binary(Array(repeating: 2, count: 1000))])
    }

    /// Connections sharing a message budget (`ByteBudget`) may be receiving at most its limit at once,
    /// charged as payload arrives (a frame header's length costs nothing): payload that would go
    /// past it fails its connection with 1013; a message gives its share back when delivered, a
    /// connection when its transport closes.
    @Test func sharedMessageBudget_boundsWhatConnectionsReceiveAtOnce() throws {
        var config = WebSocketConfiguration(maxFrameSize: 1000, maxMessageSize: 1000)
        let budget = ByteBudget(limit: 1000)
        config.messageBudget = budget
        var a = server(config), b = server(config), c = server(config)
        let big = frame(.binary, Array(repeating: 7, count: 600))  // an 8-byte header (masked, 16-bit length)
        #expect(b.receiveAll(Array(big.prefix(8)), now: clock.now).isEmpty)
        #expect(budget.heldBytes == 0, "a header alone holds nothing")
        #expect(a.receiveAll(Array(big.prefix(508)), now: clock.now).isEmpty)
        #expect(budget.heldBytes == 500)
        let refused = b.receiveAll(Array(big.dropFirst(8)), now: clock.now)  // 600 more: past 1000
        #expect(try sentCloseCode(refused, by: .server) == 1013)
        #expect(refused.closeCode == .tryAgainLater)
        #expect(budget.heldBytes == 500, "the refused payload holds nothing")
        #expect(a.receiveAll(Array(big.dropFirst(508)), now: clock.now).delivered == [.binary(Array(repeating: 7, count: 600))])
        #expect(budget.heldBytes == 0, "given back when delivered")
        #expect(c.receiveAll(big, now: clock.now).delivered.count == 1)
        _ = c.receiveAll(Array(big.prefix(108)), now: clock.now)
        #expect(budget.heldBytes == 100)
        _ = c.transportClosed(now: clock.now)
        c.releaseMessageBudget()  // what the I/O driver does when the socket closes
        #expect(budget.heldBytes == 0, "given back when the connection ends mid-message")
    }

    @Test func invalidUTF8_failsFast_beforeTheMessageEnds() throws {
        var ws = server()
        // The first fragment ends mid code point; the second breaks it. No final frame is sent.
        let a = ws.receiveAll(frame(.text, [0x41, 0xE2, 0x82], fin: false), now: clock.now)
        #expect(a.isEmpty)
        let b = ws.receiveAll(frame(.continuation, [0x28], fin: false), now: clock.now)
        #expect(try sentCloseCode(b, by: .server) == 1007)
        #expect(b.closeCode == .invalidPayloadData)
    }

    @Test func invalidUTF8_failsFast_withinOneFrameDeliveredInPieces() throws {
        var ws = server()
        let bytes = frame(.text, [0x41, 0x42, 0xFF] + Array(repeating: 0x41, count: 100))
        let a = ws.receiveAll(Array(bytes[..<9]), now: clock.now) // header (6) + 3 payload bytes
        #expect(a.closeCode == .invalidPayloadData)
    }

    @Test func peerClose_isEchoed_andServerClosesTransport() throws {
        var ws = server()
        let actions = ws.receiveAll(frame(.close, [0x03, 0xE9] + Array("bye".utf8)), now: clock.now)
        #expect(try sentCloseCode(actions, by: .server) == 1001)
        #expect(actions.contains(.closed(code: .goingAway, reason: "bye")))
        #expect(actions.last == .closeTransport)
        do {
            _ = try ws.send(.text("late"), now: clock.now)
            Issue.record("send after close must fail")
        } catch {
            #expect(error == .notOpen)
        }
    }

    @Test func emptyPeerClose_isAnsweredWithEmptyClose() throws {
        var ws = server()
        let actions = ws.receiveAll(frame(.close, []), now: clock.now)
        #expect(try parseFrames(actions.written, sentBy: .server) == [ParsedFrame(opcode: .close, fin: true, rsv1: false, masked: false, payload: [])])
        #expect(actions.closeCode == .noStatusReceived)
    }

    @Test mutating func localClose_waitsForPeer_thenCloses() throws {
        var ws = server()
        let start = ws.close(.normalClosure, reason: "done", now: clock.now)
        #expect(try sentCloseCode(start, by: .server) == 1000)
        #expect(!ws.isOpen && !ws.isClosed)
        // Data arriving after our Close is discarded (§1.4); the peer's Close completes the handshake.
        clock.advance(.seconds(1))
        let late = ws.receiveAll(frame(.text, Array("late".utf8)), now: clock.now)
        #expect(late.delivered.isEmpty)
        let done = ws.receiveAll(frame(.close, [0x03, 0xE8]), now: clock.now)
        #expect(done.written.isEmpty) // no second Close
        #expect(done == [.closed(code: .normalClosure, reason: ""), .closeTransport])
    }

    @Test mutating func localClose_timesOut_with1006() {
        var ws = server(WebSocketConfiguration(closeTimeout: .seconds(5)))
        _ = ws.close(now: clock.now)
        clock.advance(.seconds(4))
        let r1 = ws.tick(now: clock.now)

        #expect(r1.isEmpty)
        #expect(ws.nextDeadline == clock.now.adding(.seconds(1)))
        clock.advance(.seconds(1))
        let r2 = ws.tick(now: clock.now)

        #expect(r2 == [.closed(code: .abnormalClosure, reason: "close handshake timed out"), .closeTransport])
    }

    @Test mutating func client_afterCloseHandshake_waitsForServerToCloseTCP() throws {
        var ws = WebSocketConnection(role: .client, maskKeys: .seeded(1), now: clock.now)
        let reply = ws.receiveAll(frame(.close, [0x03, 0xE8], from: .server), now: clock.now)
        let sent = try parseFrames(reply.written, sentBy: .client)
        #expect(sent.first?.opcode == .close && sent.first?.masked == true)
        #expect(reply.contains(.closed(code: .normalClosure, reason: "")))
        #expect(!reply.closesTransport) // §7.1.1: the server closes TCP first
        clock.advance(.seconds(5))
        let r3 = ws.tick(now: clock.now)

        #expect(r3 == [.closeTransport])
    }

    @Test func client_masksEveryFrame_withFreshKeys() throws {
        var ws = WebSocketConnection(role: .client, maskKeys: .seeded(9), now: clock.now)
        var bytes = try ws.send(.text("abc"), now: clock.now).written
        bytes += try ws.send(.text("abc"), now: clock.now).written
        let frames = try parseFrames(bytes, sentBy: .client)
        #expect(frames.count == 2 && frames.allSatisfy(\.masked))
        #expect(frames.allSatisfy { $0.payload == Array("abc".utf8) })
        #expect(bytes[2..<6] != bytes[11..<15]) // different keys
        // A client rejects masked frames from a server.
        var ws2 = WebSocketConnection(role: .client, maskKeys: .seeded(9), now: clock.now)
        let r4 = ws2.receiveAll(frame(.text, [0x41], from: .client), now: clock.now)

        #expect(r4.closeCode == .protocolError)
    }

    @Test mutating func keepAlive_pingsWhenIdle_andTimesOutWithoutAnswer() throws {
        var ws = server(WebSocketConfiguration(pingInterval: .seconds(30), pingTimeout: .seconds(10)))
        #expect(ws.nextDeadline == clock.now.adding(.seconds(30)))
        clock.advance(.seconds(29))
        let r5 = ws.tick(now: clock.now)

        #expect(r5.isEmpty)
        clock.advance(.seconds(1))
        let ping = ws.tick(now: clock.now)
        #expect(try parseFrames(ping.written, sentBy: .server).map(\.opcode) == [.ping])
        #expect(ws.nextDeadline == clock.now.adding(.seconds(10)))
        clock.advance(.seconds(10))
        let r6 = ws.tick(now: clock.now)

        #expect(r6 == [.closed(code: .abnormalClosure, reason: "ping timeout"), .closeTransport])
    }

    @Test mutating func keepAlive_answeredPing_keepsConnectionOpen() throws {
        var ws = server(WebSocketConfiguration(pingInterval: .seconds(30), pingTimeout: .seconds(10)))
        clock.advance(.seconds(30))
        let written = ws.tick(now: clock.now).written
        ws.didWrite(byteCount: written.count, now: clock.now)  // the socket took the Ping
        let ping = try parseFrames(written, sentBy: .server)
        clock.advance(.seconds(5))
        _ = ws.receiveAll(frame(.pong, ping[0].payload), now: clock.now)
        clock.advance(.seconds(10))
        let r7 = ws.tick(now: clock.now)

        #expect(r7.isEmpty)
        #expect(ws.isOpen)
        #expect(ws.nextDeadline == clock.now.adding(.seconds(20))) // 30 s after the Pong arrived
    }

    @Test mutating func backpressure_pausesReading_andDropsAPeerThatNeverReads() throws {
        let config = WebSocketConfiguration(highWaterMark: 1000, lowWaterMark: 100, maxQueuedBytes: 10_000,
                                            writeStallTimeout: .seconds(10))
        var ws = server(config)
        _ = try ws.send(.binary(Array(repeating: 1, count: 1200)), now: clock.now)
        #expect(ws.queuedBytes == 1204)
        #expect(!ws.wantsToRead)
        ws.didWrite(byteCount: 500, now: clock.now)
        #expect(!ws.wantsToRead) // hysteresis: still above the low-water mark
        ws.didWrite(byteCount: 650, now: clock.now)
        #expect(ws.wantsToRead)
        // Above the high-water mark for longer than the stall timeout: dropped.
        _ = try ws.send(.binary(Array(repeating: 1, count: 2000)), now: clock.now)
        clock.advance(.seconds(10))
        let r8 = ws.tick(now: clock.now)

        #expect(r8 == [.closed(code: .policyViolation, reason: "peer not reading"), .closeTransport])
    }

    /// A peer that stops reading while we owe it less than the high-water mark: its TCP window
    /// stays shut, nothing moves, and it is dropped after `writeStallTimeout` — not only by the
    /// keep-alive much later. Any progress restarts the wait; an empty queue clears it.
    @Test mutating func backpressure_dropsAPeerThatTakesNothing_evenBelowTheHighWaterMark() throws {
        let config = WebSocketConfiguration(pingInterval: .seconds(60), highWaterMark: 1000, lowWaterMark: 100,
                                            maxQueuedBytes: 10_000, writeStallTimeout: .seconds(10))
        var ws = server(config)
        _ = try ws.send(.binary(Array(repeating: 1, count: 300)), now: clock.now)
        #expect(ws.wantsToRead)  // far below the high-water mark: reading goes on
        #expect(ws.nextDeadline == clock.now.adding(.seconds(10)))
        clock.advance(.seconds(6))
        ws.didWrite(byteCount: 100, now: clock.now)  // some progress: the wait restarts
        #expect(ws.nextDeadline == clock.now.adding(.seconds(10)))
        clock.advance(.seconds(6))
        #expect(ws.tick(now: clock.now).isEmpty)
        ws.didWrite(byteCount: 204, now: clock.now)  // all written: nothing to wait for
        #expect(ws.nextDeadline == clock.now.adding(.seconds(48)))  // only the keep-alive Ping
        _ = try ws.send(.binary(Array(repeating: 1, count: 10)), now: clock.now)
        clock.advance(.seconds(10))
        let dropped = ws.tick(now: clock.now)

        #expect(dropped == [.closed(code: .policyViolation, reason: "peer not reading"), .closeTransport])
    }

    @Test func backpressure_hardCap_dropsInsteadOfBuffering() throws {
        var ws = server(WebSocketConfiguration(highWaterMark: 1000, maxQueuedBytes: 4000))
        _ = try ws.send(.binary(Array(repeating: 1, count: 3000)), now: clock.now)
        let over = try ws.send(.binary(Array(repeating: 1, count: 3000)), now: clock.now)
        #expect(over == [.closed(code: .policyViolation, reason: "peer not reading"), .closeTransport])
        #expect(ws.queuedBytes == 3004)
    }

    @Test func pingFlood_fromPeerThatDoesNotRead_isBounded() {
        var ws = server(WebSocketConfiguration(highWaterMark: 1000, lowWaterMark: 0, maxQueuedBytes: 2000))
        var wrote = 0
        for _ in 0..<100 where ws.wantsToRead {
            wrote += ws.receiveAll(frame(.ping, Array(repeating: 0, count: 125)), now: clock.now).written.count
        }
        #expect(!ws.wantsToRead)       // the I/O layer stops reading…
        #expect(wrote < 1200)          // …after about one high-water mark of Pongs
    }

    @Test func pausedConnection_heldBackInput_isProcessedAfterDrain() throws {
        var ws = server(WebSocketConfiguration(highWaterMark: 1000, lowWaterMark: 0, maxQueuedBytes: 10_000))
        _ = try ws.send(.binary(Array(repeating: 1, count: 1000)), now: clock.now)
        #expect(!ws.wantsToRead)
        // Bytes that arrive anyway (already in flight) are kept, not acted on…
        #expect(ws.receive(frame(.text, Array("held".utf8)), now: clock.now).isEmpty)
        #expect(ws.hasBufferedInput)
        ws.didWrite(byteCount: 1004, now: clock.now)
        #expect(ws.wantsToRead)
        // …and delivered once the queue drains.
        #expect(ws.receiveAll([], now: clock.now).delivered == [.text("held")])
    }

    @Test func readingWhilePaused_isRefused_notBuffered() throws {
        var ws = server(WebSocketConfiguration(highWaterMark: 1000, lowWaterMark: 0, maxQueuedBytes: 10_000))
        _ = try ws.send(.binary(Array(repeating: 1, count: 1000)), now: clock.now)
        let actions = ws.receive(frame(.binary, Array(repeating: 0, count: 1200)), now: clock.now)
        #expect(actions == [.closed(code: .policyViolation, reason: "peer not reading"), .closeTransport])
    }

    @Test func transportClosed_reports1006_once() {
        var ws = server()
        let r9 = ws.transportClosed(now: clock.now)

        #expect(r9 == [.closed(code: .abnormalClosure, reason: "transport closed"), .closeTransport])
        let r10 = ws.transportClosed(now: clock.now)

        #expect(r10.isEmpty)
    }

    @Test func closeReason_isTruncatedOnACharacterBoundary() throws {
        var ws = server()
        let actions = ws.close(.normalClosure, reason: String(repeating: "é", count: 100), now: clock.now)
        let payload = try parseFrames(actions.written, sentBy: .server)[0].payload
        #expect(payload.count == 124) // 2 + 61 × 2 bytes: 123 would split a character
        #expect(String(validating: payload[2...], as: UTF8.self) != nil)
    }
}

@Suite struct ClientConnectionTests {
    @Test func largeServerFrame_inTwoReads_isDelivered() {
        let clock = ManualClock()
        var ws = WebSocketConnection(role: .client, configuration: .echo, maskKeys: .seeded(2), now: clock.now)
        let bytes = frame(.text, Array(repeating: 0x2A, count: 65_535), from: .server)
        var actions = ws.receiveAll(Array(bytes[..<65_536]), now: clock.now)
        actions += ws.receiveAll(Array(bytes[65_536...]), now: clock.now)
        #expect(actions.delivered == [.text(String(repeating: "*", count: 65_535))])
    }
}

@Suite struct ClientServerConversationTests {
    @Test mutating func fullConversation_clientInitiatesClose_bothSidesReportOnce() throws {
        var clock = ManualClock()
        var client = WebSocketConnection(role: .client, maskKeys: .seeded(4), now: clock.now)
        var server = WebSocketConnection(role: .server, now: clock.now)
        var up = try client.send(.text("hello"), now: clock.now).written
        up += try client.ping([1, 2], now: clock.now).written
        let s1 = server.receiveAll(up, now: clock.now)
        #expect(s1.delivered == [.text("hello")])
        let c1 = client.receiveAll(s1.written, now: clock.now) // the Pong
        #expect(c1.isEmpty)

        clock.advance(.milliseconds(10))
        let closing = client.close(.goingAway, reason: "bye", now: clock.now)
        let s2 = server.receiveAll(closing.written, now: clock.now)
        #expect(s2.closeCode == .goingAway && s2.closesTransport)
        let c2 = client.receiveAll(s2.written, now: clock.now)
        #expect(c2 == [.closed(code: .goingAway, reason: "")])
        // The server closed TCP: the client sees EOF and only closes its socket.
        #expect(client.transportClosed(now: clock.now) == [.closeTransport])
        #expect(client.isClosed && server.isClosed)
    }

    @Test func violationsThroughTheConnection_useTheParserCodes() throws {
        let clock = ManualClock()
        let cases: [([UInt8], WebSocketCloseCode)] = [
            ([0x83, 0x80, 0, 0, 0, 0], .protocolError),                   // reserved opcode
            ([0x09, 0x80, 0, 0, 0, 0], .protocolError),                   // fragmented ping
            ([0x89, 0xFE, 0x00, 0x7E], .protocolError),                   // 126-byte ping
            ([0x82, 0xFF, 0x80, 0, 0, 0, 0, 0, 0, 0], .protocolError),    // 64-bit length, top bit
        ]
        for (bytes, code) in cases {
            var ws = WebSocketConnection(role: .server, now: clock.now)
            let actions = ws.receiveAll(bytes, now: clock.now)
            #expect(actions.closeCode == code)
            #expect(try sentCloseCode(actions, by: .server) == code.rawValue)
        }
    }
}
