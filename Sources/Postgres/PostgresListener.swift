import Sockets
import Synchronization

/// A dedicated session that LISTENs on channels and survives database restarts.
///
/// Events arrive on an `AsyncStream`: `.notification` for each NOTIFY, `.disconnected` when the
/// session is lost, and `.reconnected` after it was re-established (with every LISTEN re-issued).
/// NOTIFY is not durable —
/// anything sent while the listener was down is gone — so a consumer treats `.reconnected` as
/// "catch up from your durable log now" (the sync fan-out does exactly that with the change log).
public final class PostgresListener: Sendable {
    public enum Event: Sendable, Equatable {
        case notification(PostgresNotification)
        /// The session broke; notifications are lost until `.reconnected`.
        case disconnected
        case reconnected
    }

    private struct State {
        var channels: Set<String> = []
        var connection: PostgresConnection?
        var stopped = false
    }

    public let events: AsyncStream<Event>
    private let continuation: AsyncStream<Event>.Continuation
    private let configuration: PostgresConfiguration
    private let loop: EventLoop
    private let state = Mutex(State())
    private let reconnectDelay: Duration

    /// Connects and starts listening on `channels`; throws if the first connection fails.
    public init(_ configuration: PostgresConfiguration, channels: [String], loop: EventLoop,
                reconnectDelay: Duration = .milliseconds(250)) async throws {
        self.configuration = configuration
        self.loop = loop
        self.reconnectDelay = reconnectDelay
        (events, continuation) = AsyncStream.makeStream(of: Event.self, bufferingPolicy: .bufferingNewest(100_000))
        state.withLock { $0.channels = Set(channels) }
        try await establish()
    }

    /// Adds a channel (LISTEN now if connected; re-issued after every reconnect).
    public func listen(_ channel: String) async throws {
        let conn = state.withLock { s in
            s.channels.insert(channel)
            return s.connection
        }
        if let conn { _ = try await conn.query("LISTEN \(identifier: channel)") }
    }

    public func stop() async {
        let conn = state.withLock { s in
            s.stopped = true
            return s.connection
        }
        continuation.finish()
        await conn?.close()
    }

    private func establish() async throws {
        let conn = try await PostgresConnection.connect(configuration, on: loop)
        let cont = continuation
        conn.setNotificationHandler { cont.yield(.notification($0)) }
        for ch in state.withLock({ $0.channels }) {
            _ = try await conn.query("LISTEN \(identifier: ch)")
        }
        let stopped = state.withLock { s in
            s.connection = conn
            return s.stopped
        }
        if stopped { await conn.close(); return }
        conn.setBrokenHandler { [weak self] _ in
            guard let self else { return }
            cont.yield(.disconnected)
            Task { await self.reconnectLoop() }
        }
    }

    /// Waits `reconnectDelay` before the first attempt too: a session that just broke usually
    /// means a server that is restarting, and the wait is what the delay promises (nothing is
    /// lost meanwhile: consumers catch up from their durable log on `.reconnected`).
    private func reconnectLoop() async {
        var delay = reconnectDelay
        while !state.withLock({ $0.stopped }) {
            try? await Task.sleep(for: delay)
            if state.withLock({ $0.stopped }) { return }
            do {
                try await establish()
                continuation.yield(.reconnected)
                return
            } catch {
                delay = min(delay * 2, .seconds(5))
            }
        }
    }
}
