import Glibc
import Sockets
import WebSocket

/// One client: the upgrade request, then a `WebSocketConnection` that echoes every message.
final class EchoConnection {
    let fd: Int32
    unowned let server: EchoServer
    var registration: Registration?
    var requestBytes: [UInt8] = []
    var ws: WebSocketConnection?
    var output: [UInt8] = []
    var outputOffset = 0
    /// Bytes at the front of `output` that are not WebSocket frames (the 101 response).
    var unaccountedBytes = 0
    var closing = false
    var closed = false
    var timer: TimerID?
    var currentInterest: Interest = .readable

    init(fd: Int32, server: EchoServer) {
        self.fd = fd
        self.server = server
    }

    func onEvent(_ readiness: Readiness) {
        if readiness.isWritable && outputOffset < output.count {
            flush()
            if ws?.wantsToRead == true { drainBufferedInput() } // input held back while we were over the high-water mark
        }
        if readiness.isReadable && !closing && (ws?.wantsToRead ?? true) { readOnce() }
        if readiness.isHangup && ws == nil { close() }
        afterStep()
    }

    private func readOnce() {
        let buffer = server.readBuffer
        let result = try? Syscall.nonBlocking("read") { read(fd, buffer.baseAddress, buffer.count) }
        switch result {
        case .processed(let n) where n > 0:
            let bytes = UnsafeRawBufferPointer(rebasing: buffer[0..<n])
            if ws == nil {
                requestBytes.append(contentsOf: bytes)
                upgradeIfComplete()
            } else {
                apply(ws!.receive(bytes, now: .now()))
                drainBufferedInput()
            }
        case .wouldBlock:
            break
        default: // EOF or error
            if ws != nil { apply(ws!.transportClosed(now: .now())) }
            close()
        }
    }

    private func upgradeIfComplete() {
        let marker: [UInt8] = [13, 10, 13, 10]
        guard let end = requestBytes.indices.first(where: { i in
            i + 4 <= requestBytes.count && requestBytes[i..<(i + 4)].elementsEqual(marker)
        }) else {
            if requestBytes.count > 16 * 1024 { respond(status: 431, headers: []); closing = true }
            return
        }
        let head = String(decoding: requestBytes[0..<end], as: UTF8.self)
        let rest = Array(requestBytes[(end + 4)...])
        requestBytes = []
        var lines = head.split(separator: "\r\n", omittingEmptySubsequences: false).map(String.init)
        let requestLine = lines.removeFirst().split(separator: " ")
        guard requestLine.count == 3, requestLine[2].hasPrefix("HTTP/1.") else {
            respond(status: 400, headers: []); closing = true; return
        }
        var headers: [(name: String, value: String)] = []
        for line in lines {
            guard let colon = line.firstIndex(of: ":") else { respond(status: 400, headers: []); closing = true; return }
            headers.append((String(line[..<colon]), String(line[line.index(after: colon)...]).trimmingSpaces))
        }
        let minor = requestLine[2] == "HTTP/1.0" ? 0 : 1
        switch server.handshake.accept(WebSocketUpgradeRequest(method: String(requestLine[0]), httpVersion: (1, minor), headers: headers)) {
        case .failure(let rejection):
            respond(status: rejection.status, headers: rejection.responseHeaders)
            closing = true
        case .success(let accepted):
            respond(status: 101, headers: accepted.responseHeaders)
            ws = WebSocketConnection(role: .server, configuration: .echo, deflate: accepted.deflate, now: .now())
            if !rest.isEmpty { apply(ws!.receive(rest, now: .now())); drainBufferedInput() }
        }
    }

    /// `receive` stops after each message so its echo goes out before later frames are handled.
    private func drainBufferedInput() {
        while ws?.hasBufferedInput == true { // no `let` copy: it would force copy-on-write of the buffers
            let actions = ws!.receive([], now: .now())
            if actions.isEmpty { break }
            apply(actions)
        }
    }

    private func respond(status: Int, headers: [(name: String, value: String)]) {
        var text = "HTTP/1.1 \(status) \(status == 101 ? "Switching Protocols" : "Error")\r\n"
        for (n, v) in headers { text += "\(n): \(v)\r\n" }
        if status != 101 { text += "Content-Length: 0\r\nConnection: close\r\n" }
        text += "\r\n"
        output.append(contentsOf: text.utf8)
        unaccountedBytes += text.utf8.count
    }

    private func apply(_ actions: [WebSocketAction]) {
        for action in actions {
            switch action {
            case .deliver(let message):
                if let echoed = try? ws?.send(message, now: .now()) { apply(echoed) }
            case .write(let bytes):
                output.append(contentsOf: bytes)
            case .closed:
                break
            case .closeTransport:
                closing = true
            }
        }
    }

    private func flush() {
        while outputOffset < output.count {
            let result = try? output.withUnsafeBytes { b in
                try Syscall.nonBlocking("write") { write(fd, b.baseAddress! + outputOffset, b.count - outputOffset) }
            }
            guard let result else { closing = true; output = []; outputOffset = 0; return }
            guard case .processed(let n) = result else { return }
            outputOffset += n
            let handshakeBytes = min(n, unaccountedBytes)
            unaccountedBytes -= handshakeBytes
            ws?.didWrite(byteCount: n - handshakeBytes, now: .now())
        }
        output.removeAll(keepingCapacity: output.capacity <= 1 << 20)
        outputOffset = 0
    }

    private func afterStep() {
        guard !closed else { return }
        if outputOffset < output.count { flush() }
        if closing && outputOffset >= output.count { close(); return }
        var interest: Interest = []
        if !closing && (ws?.wantsToRead ?? true) { interest.insert(.readable) }
        if outputOffset < output.count { interest.insert(.writable) }
        if interest != currentInterest, let registration {
            try? server.loop.modify(registration, interest: interest)
            currentInterest = interest
        }
        scheduleTimer()
    }

    private func scheduleTimer() {
        if let timer { server.loop.cancelTimer(timer) }
        timer = nil
        let now = NanoTime.now()
        let deadline = closing ? now.adding(.seconds(2)) : ws?.nextDeadline
        guard let deadline else { return }
        let delay = deadline > now ? deadline.duration(since: now) : .zero
        timer = server.loop.scheduleTimer(after: delay) { [weak self] in
            guard let self, !self.closed else { return }
            self.timer = nil
            if self.closing { self.close(); return } // a peer that will not take our last bytes
            if self.ws != nil { self.apply(self.ws!.tick(now: .now())) }
            self.afterStep()
        }
    }

    func close() {
        guard !closed else { return }
        closed = true
        if let timer { server.loop.cancelTimer(timer) }
        if let registration { server.loop.deregister(registration) }
        Syscall.close(fd)
        server.connections[fd] = nil
    }
}

extension String {
    var trimmingSpaces: String {
        String(drop { $0 == " " || $0 == "\t" }.reversed().drop { $0 == " " || $0 == "\t" }.reversed())
    }
}
