import Sockets
import Testing
@testable import HTTP

/// The server connection's decisions on a manual clock: no socket, no loop, no sleeps.
@Suite struct HTTPConnectionStateMachineTests {
    /// What the connection would have done, in a form tests compare.
    enum Seen: Equatable {
        case dispatch(String, body: String)
        case sendContinue
        case content(String)
        case contentEnded
        case reject(Int)
        case pauseReading
    }

    /// Drives the machine the way `HTTPServerConnection` does; `/upload` is a `.streaming` route.
    struct Driver {
        var now = NanoTime(nanoseconds: 1_000_000_000)
        var machine: HTTPConnectionStateMachine
        var outputBackpressured = false

        init(_ configure: (inout HTTPServerConfiguration) -> Void = { _ in }) {
            var configuration = HTTPServerConfiguration()
            configure(&configuration)
            machine = HTTPConnectionStateMachine(configuration: configuration, largestStreamingBodyLimit: 1 << 20, now: now)
        }

        mutating func advance(_ d: Duration) { now = now.adding(d) }

        /// Feeds `text` and processes it as far as the machine lets the connection go.
        mutating func receive(_ text: String) -> [Seen] {
            let bytes = Array(text.utf8)
            let decision = bytes.withUnsafeBytes { machine.bytesReceived($0) }
            switch decision {
            case .process: return process()
            case .pauseReading: return [.pauseReading]
            case .none: return []
            }
        }

        mutating func process() -> [Seen] {
            var seen: [Seen] = []
            while true {
                switch machine.next(now: now, outputBackpressured: outputBackpressured) {
                case .wait: return seen
                case .pauseReading: return seen + [.pauseReading]
                case .head(let head):
                    let streaming = head.path == "/upload"
                    switch machine.routed(bodyLimit: streaming ? 1 << 20 : machine.baseBodyLimit, streaming: streaming, now: now) {
                    case .reject(let e): return seen + [.reject(e.status.code)]
                    case .proceed(let sendContinue): if sendContinue { seen.append(.sendContinue) }
                    }
                case .content(let piece): seen.append(.content(String(decoding: piece, as: UTF8.self)))
                case .contentEnded: seen.append(.contentEnded)
                case .dispatch(let request):
                    seen.append(.dispatch(String(request.path), body: String(decoding: request.body, as: UTF8.self)))
                case .reject(let e, _): return seen + [.reject(e.status.code)]
                }
            }
        }

        /// The handler answered: whether the connection stays open, and what it went on with.
        struct Answer: Equatable {
            var keepAlive: Bool
            var then: [Seen] = []
            static let closes = Answer(keepAlive: false)
            static func keepsOpen(_ then: Seen...) -> Answer { Answer(keepAlive: true, then: then) }
        }

        /// The handler answered; the connection goes on with what is buffered, as it does for real.
        mutating func respond() -> Answer {
            guard let (_, keepAlive) = machine.responseStarting(draining: false) else { return .closes }
            guard machine.responseFinished(keepAlive: keepAlive, now: now) else { return .closes }
            return Answer(keepAlive: true, then: process())
        }

        mutating func sweep(pendingOutputBytes: Int = 0, totalBytesWritten: UInt64 = 0) -> HTTPConnectionStateMachine.TimeoutDecision {
            machine.checkTimeouts(now: now, pendingOutputBytes: pendingOutputBytes, totalBytesWritten: totalBytesWritten)
        }
    }

    static let get = "GET /a HTTP/1.1\r\nHost: t\r\n\r\n"

    // MARK: - Timeouts

    @Test func aHeadThatTricklesInGets408AtTheHeaderTimeoutFromItsFirstByte() {
        var d = Driver { $0.timeouts.header = .seconds(10) }
        d.advance(.seconds(9))
        #expect(d.sweep() == .none)
        d.advance(.seconds(1))
        #expect(d.sweep() == .closeIdle, "an accepted connection that sends nothing is closed without a word")

        var slow = Driver { $0.timeouts.header = .seconds(10) }
        #expect(slow.receive("GET /a HTTP/1.1\r\n").isEmpty)
        let firstByte = slow.now
        for piece in ["Host: t\r\n", "X-A: 1\r\n", "X-B: 2\r\n"] {
            slow.advance(.seconds(3))
            #expect(slow.receive(piece).isEmpty)
            #expect(slow.sweep() == .none, "each byte does not move the deadline, but it has not passed yet")
        }
        slow.now = firstByte.adding(.seconds(10))
        #expect(slow.sweep() == .requestTimeout("request not received in time", failInbound: false))
    }

    @Test func anIdleKeepAliveConnectionClosesSilentlyAfterTheIdleTimeout() {
        var d = Driver { $0.timeouts.idle = .seconds(60) }
        #expect(d.receive(Self.get) == [.dispatch("/a", body: "")])
        d.advance(.seconds(100))
        #expect(d.sweep() == .none, "a request being handled has no request deadline")
        #expect(d.respond().keepAlive)
        d.advance(.seconds(59))
        #expect(d.sweep() == .none)
        d.advance(.seconds(1))
        #expect(d.sweep() == .closeIdle)
    }

    @Test func aSlowBodyGets408AtTheBodyTimeoutFromTheHead() {
        var d = Driver { $0.timeouts.body = .seconds(30) }
        #expect(d.receive("POST /a HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\nabc").isEmpty)
        #expect(d.machine.phase == .readingBody)
        d.advance(.seconds(20))
        #expect(d.receive("de").isEmpty)
        d.advance(.seconds(9))
        #expect(d.sweep() == .none)
        d.advance(.seconds(1))
        #expect(d.sweep() == .requestTimeout("request not received in time", failInbound: false))
    }

    @Test func streamedContentTimesOutOnlyWhenThePeerStalls() {
        var d = Driver { $0.timeouts.body = .seconds(1) }
        #expect(d.receive("POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 25\r\n\r\n").isEmpty)
        for _ in 0..<20 {
            d.advance(.milliseconds(500))
            #expect(d.receive("x") == [.content("x")])
            #expect(d.sweep() == .none, "every piece restarts the body timeout")
        }
        // Our own handler not reading is not the peer's fault.
        d.machine.inboundFull()
        d.advance(.seconds(5))
        #expect(d.sweep() == .none)
        let resumes = d.machine.inboundDrained()
        #expect(resumes)
        d.advance(.seconds(1))
        #expect(d.sweep() == .requestTimeout("request content not received in time", failInbound: true))
        #expect(!d.machine.bodyStreaming && d.machine.phase == .closing)
    }

    @Test func aPeerThatReadsNothingIsDroppedAfterTheWriteTimeout() {
        var d = Driver { $0.timeouts.write = .seconds(30); $0.timeouts.header = .seconds(1000) }
        #expect(d.sweep(pendingOutputBytes: 100, totalBytesWritten: 0) == .none)
        d.advance(.seconds(20))
        #expect(d.sweep(pendingOutputBytes: 100, totalBytesWritten: 50) == .none, "progress restarts the write timeout")
        d.advance(.seconds(29))
        #expect(d.sweep(pendingOutputBytes: 100, totalBytesWritten: 50) == .none)
        d.advance(.seconds(1))
        #expect(d.sweep(pendingOutputBytes: 100, totalBytesWritten: 50) == .dropStalledReader)
    }

    // MARK: - Requests and keep-alive

    @Test func pipelinedRequestsWaitForTheResponseBeforeThem_andLeaveInOrder() {
        var d = Driver()
        let three = Self.get + "POST /b HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nhi" + "GET /c HTTP/1.1\r\nHost: t\r\n\r\n"
        #expect(d.receive(three) == [.dispatch("/a", body: "")])
        #expect(d.receive("") == [], "nothing more while /a is handled")
        #expect(d.respond() == .keepsOpen(.dispatch("/b", body: "hi")))
        #expect(d.respond() == .keepsOpen(.dispatch("/c", body: "")))
        #expect(d.respond() == .keepsOpen())
        #expect(d.machine.isIdle(pendingOutputBytes: 0))
    }

    @Test func pipelinedBytesPastAFullHeadsWorthPauseReading() {
        var d = Driver { $0.limits.maxHeaderBytes = 1024 }
        #expect(d.receive(Self.get) == [.dispatch("/a", body: "")])
        #expect(d.receive(String(repeating: "x", count: 1000)) == [])
        #expect(d.receive(String(repeating: "x", count: 100)) == [.pauseReading])
    }

    @Test func connectionCloseAndHTTP10CloseAfterTheResponse() {
        var close = Driver()
        #expect(close.receive("GET /a HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n" + Self.get) == [.dispatch("/a", body: "")])
        #expect(close.respond() == .closes, "the pipelined request after it is never read")
        #expect(close.machine.phase == .closing)

        var old = Driver()
        #expect(old.receive("GET /a HTTP/1.0\r\n\r\n") == [.dispatch("/a", body: "")])
        #expect(old.respond().keepAlive == false)
    }

    @Test func theLastRequestAllowedOnAConnectionClosesIt() {
        var d = Driver { $0.maxRequestsPerConnection = 2 }
        _ = d.receive(Self.get + Self.get)
        #expect(d.respond() == .keepsOpen(.dispatch("/a", body: "")))
        #expect(d.respond().keepAlive == false)
    }

    @Test func expectContinueIsAnsweredOnlyWhenContentFollows() {
        var d = Driver()
        #expect(d.receive("PUT /a HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n") == [.sendContinue])
        #expect(d.receive("ok") == [.dispatch("/a", body: "ok")])
    }

    // MARK: - Errors

    @Test func malformedInputIsRejectedAndTheConnectionCloses() {
        var d = Driver()
        #expect(d.receive("GET /a HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n") == [.reject(400)])
        #expect(d.machine.phase == .closing)
        #expect(d.receive(Self.get) == [], "nothing is read after a rejection")
    }

    @Test func contentOverTheRoutesLimitIs413AtTheHead() {
        var d = Driver { $0.limits.maxBodyBytes = 10 }
        #expect(d.receive("POST /a HTTP/1.1\r\nHost: t\r\nContent-Length: 11\r\n\r\n") == [.reject(413)])
        var streaming = Driver { $0.limits.maxBodyBytes = 10 }
        #expect(streaming.receive("POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 11\r\n\r\n").isEmpty,
                "a streaming route's own limit applies")
    }

    @Test func aBadChunkInStreamedContentFailsTheHandlersRead() {
        var d = Driver()
        #expect(d.receive("POST /upload HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n") == [.content("ab")])
        let bytes = Array("zz\r\n".utf8)
        #expect(bytes.withUnsafeBytes { d.machine.bytesReceived($0) } == .process)
        guard case .reject(let error, let failInbound) = d.machine.next(now: d.now, outputBackpressured: false) else {
            return #expect(Bool(false), "expected a rejection")
        }
        #expect(error.status.code == 400 && failInbound == .malformed)
    }

    @Test func eofClosesAtOnceUnlessARequestIsBeingAnswered() {
        var idle = Driver()
        #expect(idle.machine.peerClosed() == .close(failInbound: false))

        var busy = Driver()
        _ = busy.receive(Self.get)
        #expect(busy.machine.peerClosed() == .closeAfterResponse)
        #expect(busy.respond().keepAlive == false)

        var upload = Driver()
        _ = upload.receive("POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nab")
        #expect(upload.machine.peerClosed() == .close(failInbound: true))
    }

    @Test func answeringBeforeTheStreamedContentEndsClosesAfterTheResponse() {
        var d = Driver()
        #expect(d.receive("POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nab") == [.content("ab")])
        #expect(d.respond() == .closes)
    }

    @Test func drainClosesIdleConnectionsAtOnceAndBusyOnesAfterTheirResponse() {
        var idle = Driver()
        let closesNow = idle.machine.drain(pendingOutputBytes: 0)
        #expect(closesNow)
        var busy = Driver()
        _ = busy.receive(Self.get)
        let busyClosesNow = busy.machine.drain(pendingOutputBytes: 0)
        #expect(!busyClosesNow)
        #expect(busy.respond().keepAlive == false)
    }

    @Test func aSizedStreamThatEndsShortIsTruncated_andOneThatOverrunsIsRefused() {
        var d = Driver()
        _ = d.receive(Self.get)
        _ = d.machine.responseStarting(draining: false)
        d.machine.streamStarted(chunked: false, length: 4, keepAlive: true)
        #expect(d.machine.streamWrite(count: 3) == .raw)
        #expect(d.machine.streamWrite(count: 2) == .overrun)
        #expect(d.machine.streamFinished(draining: false) == .truncated)

        var chunked = Driver()
        _ = chunked.receive(Self.get)
        _ = chunked.machine.responseStarting(draining: false)
        chunked.machine.streamStarted(chunked: true, length: nil, keepAlive: true)
        #expect(chunked.machine.streamWrite(count: 3) == .chunk)
        #expect(chunked.machine.streamFinished(draining: false) == .complete(writeTerminator: true, keepAlive: true))
    }
}
