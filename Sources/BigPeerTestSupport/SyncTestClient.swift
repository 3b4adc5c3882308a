import Sockets
import SyncProtocol
import Synchronization
import WebSocket

/// A raw sync-protocol client over a real WebSocket, for tests that check the server's endpoint
/// message by message (the SmallPeer library is the real client). Messages are decoded with the
/// protocol codec; nothing is answered automatically except what the caller sends.
///
/// **Threading.** The adapter lives on `loop`; its handler appends events to a mutex-protected
/// queue that `next` polls (polling, not an `AsyncStream`: a timed-out `next` must not end the stream).
public final class SyncTestClient: Sendable {
    public enum Event: Sendable, Equatable {
        case message(SyncMessage)
        /// A message that did not decode (the server sent something invalid).
        case undecodable([UInt8])
        case text(String)
        case closed(code: UInt16, reason: String)
        case failedToConnect(String)
    }

    let loop: EventLoop
    let queue: Inbox
    let adapter: Mutex<LoopBound<WebSocketClientAdapter>?>

    /// Connects to `ws://127.0.0.1:port/path` offering `subprotocols` and waits for the handshake
    /// (or its failure, reported as the first event).
    public init(port: Int, path: String = "/api/v4/sync", subprotocols: [String] = ["bigpeer-sync.v1"], loop: EventLoop) async throws {
        self.loop = loop
        let inbox = Inbox()
        queue = inbox
        adapter = Mutex(nil)
        guard let url = WebSocketURL("ws://127.0.0.1:\(port)\(path)") else { throw SyncTestClientError("bad url") }
        let address = try SocketAddress(ip: "127.0.0.1", port: port)
        let connected = try await loop.submit { () -> LoopBound<WebSocketClientAdapter>? in
            let handler = Handler(inbox: inbox)
            do throws(WebSocketClientError) {
                let a = try WebSocketClientAdapter.connect(
                    url: url, address: address, loop: loop,
                    handshake: WebSocketClientHandshake(subprotocols: subprotocols, deflate: nil),
                    configuration: WebSocketConfiguration(maxFrameSize: 32 << 20, maxMessageSize: 32 << 20, maxQueuedBytes: 64 << 20),
                    handler: handler)
                return LoopBound(a, loop: loop)
            } catch {
                inbox.push(.failedToConnect("\(error)"))
                return nil
            }
        }
        adapter.withLock { $0 = connected }
        // Sending is possible only once the handshake is done.
        let end = NanoTime.now().adding(.seconds(10))
        while !inbox.connected.withLock({ $0 }), NanoTime.now() < end, inbox.events.withLock({ $0.isEmpty }) {
            try await Task.sleep(for: .milliseconds(2))
        }
    }

    /// The next event, or nil when `timeout` passed without one.
    public func next(timeout: Duration = .seconds(10)) async -> Event? {
        let end = NanoTime.now().adding(timeout)
        while true {
            if let e = queue.pop() { return e }
            if NanoTime.now() >= end { return nil }
            try? await Task.sleep(for: .milliseconds(2))
        }
    }

    /// The next protocol message, skipping nothing; throws on a close, failure or timeout. (The
    /// waits for something expected default to 30 s: only a failing test waits them out, and a
    /// loaded CI machine can take seconds for what takes milliseconds here.)
    public func nextMessage(timeout: Duration = .seconds(30)) async throws -> SyncMessage {
        switch await next(timeout: timeout) {
        case .message(let m)?: return m
        case let other: throw SyncTestClientError("expected a message, got \(String(describing: other))")
        }
    }

    /// Reads messages until one satisfies `match` (others are returned too, in order).
    public func waitFor(timeout: Duration = .seconds(30), _ match: (SyncMessage) -> Bool) async throws -> [SyncMessage] {
        var seen: [SyncMessage] = []
        let end = NanoTime.now().adding(timeout)
        while NanoTime.now() < end {
            let m = try await nextMessage(timeout: .nanoseconds(max(1, end.nanoseconds - NanoTime.now().nanoseconds)))
            seen.append(m)
            if match(m) { return seen }
        }
        throw SyncTestClientError("timed out; saw \(seen)")
    }

    /// Waits for the close and returns its code (skipping any messages before it).
    public func closeCode(timeout: Duration = .seconds(30)) async -> UInt16? {
        let end = NanoTime.now().adding(timeout)
        while NanoTime.now() < end {
            switch await next(timeout: .nanoseconds(max(1, end.nanoseconds - NanoTime.now().nanoseconds))) {
            case .closed(let code, _)?: return code
            case nil, .failedToConnect?: return nil
            default: continue
            }
        }
        return nil
    }

    public func send(_ message: SyncMessage) { sendRaw(.binary(message.encode())) }

    public func sendRaw(_ message: WebSocketMessage) {
        guard let bound = adapter.withLock({ $0 }) else { return }
        bound.loop.execute { try? bound.value.send(message) }
    }

    public func close(_ code: UInt16 = 1000) {
        guard let bound = adapter.withLock({ $0 }) else { return }
        bound.loop.execute { bound.value.close(WebSocketCloseCode(code), reason: "") }
    }

    final class Inbox: Sendable {
        let events = Mutex<[Event]>([])
        let connected = Mutex(false)
        func push(_ e: Event) { events.withLock { $0.append(e) } }
        func pop() -> Event? { events.withLock { $0.isEmpty ? nil : $0.removeFirst() } }
    }

    /// Runs on the adapter's loop; only pushes into the inbox.
    final class Handler: WebSocketClientHandler {
        let inbox: Inbox
        init(inbox: Inbox) { self.inbox = inbox }

        func webSocketDidConnect(_ socket: WebSocketClientAdapter, agreement: WebSocketClientHandshake.Agreement) {
            inbox.connected.withLock { $0 = true }
        }

        func webSocket(_ socket: WebSocketClientAdapter, didReceive message: WebSocketMessage) {
            switch message {
            case .binary(let bytes):
                if let m = try? SyncMessageDecoder.decode(bytes) { inbox.push(.message(m)) } else { inbox.push(.undecodable(bytes)) }
            case .text(let t):
                inbox.push(.text(t))
            }
        }

        func webSocketDidClose(_ socket: WebSocketClientAdapter, code: WebSocketCloseCode, reason: String) {
            inbox.push(.closed(code: code.rawValue, reason: reason))
        }

        func webSocket(_ socket: WebSocketClientAdapter, didFailToConnect error: WebSocketClientError) {
            inbox.push(.failedToConnect("\(error)"))
        }
    }
}

public struct SyncTestClientError: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}
