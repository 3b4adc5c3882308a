// One acceptance suite for every `MessageLink`, written once against the protocol and run over
// real loopback sockets for each transport (`LinkPair`): WebSocket, LAN TCP, and the SEQPACKET
// stand-in for BLE. Every wait is for a state (`eventually`, a loop barrier), never a fixed sleep.

import BigPeerTestSupport
import Sockets
import SyncPeer
import SyncProtocol
import Testing

@Suite struct MessageLinkAcceptanceTests {
    /// Message `i` of a test: its index, then filler, `size` bytes in all.
    static func message(_ i: Int, size: Int) -> [UInt8] {
        var m = withUnsafeBytes(of: UInt32(i).bigEndian) { Array($0) }
        m += (0..<max(0, size - 4)).map { UInt8(truncatingIfNeeded: i &+ $0) }
        return m
    }

    @Test(arguments: LinkKind.allCases)
    func messagesArriveInOrderAndCompletionsFireInOrder(kind: LinkKind) async throws {
        let pair = try await LinkPair.open(kind)
        let messages = (0..<300).map { Self.message($0, size: 5 + ($0 * 977) % 20_000) }
        let completions = MutexBox<[Int]>([])
        let failures = MutexBox(0)
        try await pair.client.run { link in
            for (i, m) in messages.enumerated() {
                try link.send(m) { result in
                    if case .success = result { completions.withLock { $0.append(i) } } else { failures.withLock { $0 += 1 } }
                }
            }
        }
        #expect(await eventually { pair.server.probe.receivedCount == messages.count }, "all delivered")
        #expect(await eventually { completions.withLock { $0.count } == messages.count }, "all completed")
        #expect(pair.server.probe.received.withLock { $0 } == messages)
        #expect(completions.withLock { $0 } == Array(messages.indices))
        #expect(failures.withLock { $0 } == 0)
        await pair.close()
    }

    @Test(arguments: LinkKind.allCases)
    func aMessageOfTheLimitPassesAndOneByteMoreIsRefusedOrCloses(kind: LinkKind) async throws {
        let limit = 4096
        let pair = try await LinkPair.open(kind, clientMax: 2 * limit, serverMax: limit)
        // The sender refuses what is above its own limit, with a typed error.
        let refused = try await pair.server.run { link -> MessageLinkError? in
            do throws(MessageLinkError) { try link.send(Self.message(0, size: limit + 1), completion: nil) } catch { return error }
            return nil
        }
        #expect(refused == .tooLarge(size: limit + 1, limit: limit))
        // The receiver takes a message of exactly its limit, and closes on one byte more.
        let exact = Self.message(1, size: limit)
        try await pair.client.run { try $0.send(exact, completion: nil) }
        #expect(await eventually { pair.server.probe.receivedCount == 1 })
        #expect(pair.server.probe.received.withLock { $0 } == [exact])
        try await pair.client.run { try $0.send(Self.message(2, size: limit + 1), completion: nil) }
        #expect(await eventually { pair.client.probe.closeCount == 1 && pair.server.probe.closeCount == 1 }, "both ends closed")
        let close = try #require(pair.client.probe.firstClose)
        #expect(close.origin == .peer && close.code == kind.tooLargeCode, "\(close)")
        #expect(pair.server.probe.receivedCount == 1)
        await pair.close()
    }

    @Test(arguments: LinkKind.allCases)
    func aPeerThatDoesNotReadFillsTheQueueAndReadingDrainsIt(kind: LinkKind) async throws {
        let pair = try await LinkPair.open(kind, serverCredit: 0)
        // The receiver takes nothing, so its socket is not read and the kernel's buffers fill;
        // past them the sender's own queue grows (above every transport's low-water mark).
        let sent = try await pair.client.run { link -> Int in
            var i = 0
            while link.queuedBytes < 512 << 10 && i < 10_000 {
                try link.send(Self.message(i, size: 64 << 10), completion: nil)
                i += 1
            }
            return i
        }
        let (queued, drainAsked) = try await pair.client.run { ($0.queuedBytes, $0.requestDrainNotification()) }
        #expect(queued >= 512 << 10 && drainAsked, "queued \(queued) after \(sent) messages")
        #expect(pair.server.probe.receivedCount == 0)
        #expect(try await pair.server.run { $0.counters.messagesReceived } <= 1, "the receiver read at most one read's worth")
        try await pair.server.run { $0.grantCredit(.max) }
        #expect(await eventually { pair.client.probe.drains.withLock { $0 } == 1 }, "drain reported")
        #expect(await eventually { pair.server.probe.receivedCount == sent }, "everything arrives once read")
        #expect(pair.server.probe.received.withLock { $0 } == (0..<sent).map { Self.message($0, size: 64 << 10) })
        #expect(await eventually { (try? await pair.client.run { $0.queuedBytes }) == 0 })
        await pair.close()
    }

    @Test(arguments: LinkKind.allCases)
    func nothingIsDeliveredWithoutCreditAndGrantedCreditDeliversThatMany(kind: LinkKind) async throws {
        let pair = try await LinkPair.open(kind, serverCredit: 0)
        let messages = (0..<5).map { Self.message($0, size: 300) }
        let completed = MutexBox(0)
        try await pair.client.run { link in
            for m in messages { try link.send(m) { _ in completed.withLock { $0 += 1 } } }
        }
        #expect(await eventually { completed.withLock { $0 } == 5 }, "the bytes are in the kernel")
        let credit = try await pair.server.run { $0.receiveCredit }
        #expect(credit == 0 && pair.server.probe.receivedCount == 0)
        try await pair.server.run { $0.grantCredit(2) }
        #expect(await eventually { pair.server.probe.receivedCount == 2 })
        let left = try await pair.server.run { $0.receiveCredit }  // a barrier: the link has run since
        #expect(left == 0 && pair.server.probe.received.withLock { $0 } == Array(messages[0..<2]))
        try await pair.server.run { $0.grantCredit(3) }
        #expect(await eventually { pair.server.probe.receivedCount == 5 })
        #expect(pair.server.probe.received.withLock { $0 } == messages)
        await pair.close()
    }

    @Test(arguments: LinkKind.allCases)
    func aCloseReasonArrivesAtTheOtherSide(kind: LinkKind) async throws {
        let pair = try await LinkPair.open(kind)
        try await pair.client.run { $0.close(code: 4003, reason: "going to lunch") }
        #expect(await eventually { pair.server.probe.closeCount == 1 && pair.client.probe.closeCount == 1 }, "both ends closed")
        let theirs = try #require(pair.server.probe.firstClose)
        #expect(theirs.origin == .peer && theirs.code == 4003 && theirs.reason == "going to lunch", "\(theirs)")
        let ours = try #require(pair.client.probe.firstClose)
        #expect(ours.origin == .local && ours.code == 4003, "\(ours)")
        let notOpen = try await pair.client.run { link -> MessageLinkError? in
            do throws(MessageLinkError) { try link.send([1, 2, 3], completion: nil) } catch { return error }
            return nil
        }
        #expect(notOpen == .notOpen)
        await pair.close()
    }

    @Test(arguments: LinkKind.allCases)
    func aVanishedPeerIsReportedClosedOnce(kind: LinkKind) async throws {
        let pair = try await LinkPair.open(kind)
        try await pair.server.run { $0.abort() }
        #expect(await eventually { pair.client.probe.closeCount == 1 }, "the peer's end saw the link go")
        let close = try #require(pair.client.probe.firstClose)
        #expect(close.origin == .peer && close.code == nil && close.wasOpen, "\(close)")
        #expect(await eventually { pair.server.probe.closeCount == 1 })
        #expect(pair.server.probe.firstClose?.origin == .local)
        // Closing, aborting and sending on a closed link report nothing more.
        try await pair.client.run { link in
            link.close(code: 1000, reason: "")
            link.abort()
            link.send([1])
        }
        _ = try await pair.client.run { $0.isOpen }
        #expect(pair.client.probe.closeCount == 1 && pair.server.probe.closeCount == 1)
        await pair.close()
    }

    @Test(arguments: LinkKind.allCases)
    func sendsStillQueuedWhenTheLinkGoesFailInOrderAfterThoseThatLeft(kind: LinkKind) async throws {
        let pair = try await LinkPair.open(kind, serverCredit: 0)
        let results = MutexBox<[(Int, Bool)]>([])
        let sent = try await pair.client.run { link -> Int in
            var i = 0
            while link.queuedBytes < 256 << 10 && i < 10_000 {
                let index = i
                try link.send(Self.message(i, size: 64 << 10)) { result in
                    if case .success = result { results.withLock { $0.append((index, true)) } } else { results.withLock { $0.append((index, false)) } }
                }
                i += 1
            }
            return i
        }
        try await pair.server.run { $0.abort() }
        #expect(await eventually { pair.client.probe.closeCount == 1 })
        #expect(await eventually { results.withLock { $0.count } == sent }, "every completion ran once")
        let outcome = results.withLock { $0 }
        #expect(outcome.map(\.0) == Array(0..<sent), "in send order")
        let succeeded = outcome.prefix { $0.1 }.count
        #expect(succeeded < sent && outcome.dropFirst(succeeded).allSatisfy { !$0.1 }, "successes, then failures")
        await pair.close()
    }

    @Test(arguments: LinkKind.allCases)
    func countersMatchWhatWasSentBothWays(kind: LinkKind) async throws {
        let pair = try await LinkPair.open(kind)
        let up = (0..<10).map { Self.message($0, size: 100 * ($0 + 1)) }
        let down = (0..<7).map { Self.message($0, size: 3000 + $0) }
        try await pair.client.run { link in for m in up { try link.send(m, completion: nil) } }
        try await pair.server.run { link in for m in down { try link.send(m, completion: nil) } }
        #expect(await eventually { pair.server.probe.receivedCount == up.count && pair.client.probe.receivedCount == down.count })
        let bytes = { (ms: [[UInt8]]) in UInt64(ms.reduce(0) { $0 + $1.count }) }
        var expectedClient = LinkCounters()
        (expectedClient.messagesSent, expectedClient.bytesSent) = (up.count, bytes(up))
        (expectedClient.messagesReceived, expectedClient.bytesReceived) = (down.count, bytes(down))
        var expectedServer = LinkCounters()
        (expectedServer.messagesSent, expectedServer.bytesSent) = (down.count, bytes(down))
        (expectedServer.messagesReceived, expectedServer.bytesReceived) = (up.count, bytes(up))
        #expect(await eventually { (try? await pair.client.run { $0.counters }) == expectedClient })
        #expect(await eventually { (try? await pair.server.run { $0.counters }) == expectedServer })
        await pair.close()
    }
}
