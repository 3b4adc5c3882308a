import Foundation
import HTTP
import Synchronization

/// Where a JWKS comes from (`--jwks PATH|URL`) and the keys last read from it.
///
/// The keys are cached; they are re-read when a token names a `kid` the cache does not have (at
/// most once per `minimumRefreshInterval`, so tokens with made-up kids cannot turn into a flood of
/// fetches; that token waits for the re-read) and, in the background, once they are older than
/// `maximumKeyAge`, so a provider's key rotation needs no restart. A refresh that fails keeps the
/// keys it had. Concurrent refreshes are one fetch.
///
/// Fetches are `async` (the HTTP client's own loop for a URL, a cooperative-pool task reading a
/// bounded file for a path): nothing here runs on, or blocks, a server event loop.
public final class JWKSSource: Sendable {
    public enum Location: Sendable, Equatable {
        case file(String)
        case url(String)

        /// `http://` or `https://` is a URL, anything else a file path.
        public init(_ text: String) {
            self = text.hasPrefix("https://") || text.hasPrefix("http://") ? .url(text) : .file(text)
        }
    }

    public struct Configuration: Sendable {
        public var location: Location
        public var limits = JWKSet.Limits()
        /// An unknown `kid` causes a re-read at most this often.
        public var minimumRefreshInterval: Duration
        /// Keys older than this are re-read before the next verification.
        public var maximumKeyAge: Duration
        public var fetchTimeout: Duration = .seconds(10)

        /// A URL is re-read every 10 minutes and on an unknown `kid` at most every 30 s (an
        /// identity provider's endpoint, rate-limited, usually served with a max-age of minutes);
        /// a file every 2 s and on an unknown `kid` at most every second (a local read of a few
        /// KiB, and an operator who replaces the file expects it to take effect at once).
        public init(location: Location) {
            self.location = location
            switch location {
            case .url:
                minimumRefreshInterval = .seconds(30)
                maximumKeyAge = .seconds(600)
            case .file:
                minimumRefreshInterval = .seconds(1)
                maximumKeyAge = .seconds(2)
            }
        }
    }

    /// Why a refresh is asked for.
    public enum RefreshReason: Sendable {
        /// A token names a kid the cache does not have.
        case unknownKey
        /// The cached keys may be out of date (`maximumKeyAge`).
        case keyAge
    }

    private struct State {
        var keys: JWKSet?
        /// The document `keys` was parsed from: a re-read that finds the same bytes keeps the keys.
        var document: [UInt8]?
        /// Counts the key sets installed (a changed document); 0 before the first.
        var generation: UInt64 = 0
        /// `keepLoading`'s retries, until a load succeeds or `shutdown`.
        var retrying: Task<Void, Never>?
        var loadedAt: ContinuousClock.Instant?
        var lastAttempt: ContinuousClock.Instant?
        var lastError: JWKError?
        var inFlight: Task<Void, Never>?
        var fetches = 0
    }

    public let configuration: Configuration
    private let client: HTTPClient?
    private let state = Mutex(State())
    private let monotonic: @Sendable () -> ContinuousClock.Instant

    public init(_ configuration: Configuration,
                monotonic: @escaping @Sendable () -> ContinuousClock.Instant = { ContinuousClock.now }) throws(JWKError) {
        self.configuration = configuration
        self.monotonic = monotonic
        guard case .url = configuration.location else {
            client = nil
            return
        }
        let http = HTTPClient.Configuration(timeout: configuration.fetchTimeout, maxResponseBytes: configuration.limits.maxDocumentBytes,
                                            userAgent: "BigPeer JWKS")
        do {
            client = try HTTPClient(configuration: http)
        } catch {
            throw JWKError(nil, "cannot set up the HTTP client for the JWKS: \(error)")
        }
    }

    /// The cached keys (nil before the first successful load).
    public var keys: JWKSet? { state.withLock { $0.keys } }
    /// Why the last fetch failed (nil once one succeeds).
    public var lastError: JWKError? { state.withLock { $0.lastError } }
    /// How many fetches were started.
    public var fetchCount: Int { state.withLock { $0.fetches } }
    /// Changes whenever a different key set is installed, so what was verified with the previous
    /// keys can be verified again (`TokenVerifier`'s cache); a re-read of the same document keeps it.
    public var generation: UInt64 { state.withLock { $0.generation } }

    /// Reads the keys now, whatever the rate limit says (startup: a missing or broken JWKS is a
    /// configuration error the operator should see at once).
    public func load() async throws(JWKError) {
        await refresh(force: true)
        if let error = state.withLock({ $0.keys == nil ? $0.lastError : nil }) { throw error }
    }

    /// Retries loading, with a delay doubling from `firstRetry` up to `minimumRefreshInterval`,
    /// until keys are loaded or `shutdown` (a URL that cannot be reached at start: the server
    /// answers 503 to tokens meanwhile, and needs no request to notice that the keys came back).
    public func keepLoading(firstRetry: Duration = .seconds(1)) {
        let limit = configuration.minimumRefreshInterval
        state.withLock { s in
            guard s.keys == nil, s.retrying == nil else { return }
            s.retrying = Task { [weak self] in
                var delay = firstRetry
                while true {
                    do { try await Task.sleep(for: delay) } catch { return }
                    guard let source = self else { return }
                    await source.refresh(force: true)
                    if source.keys != nil { return }
                    delay = min(delay * 2, max(limit, firstRetry))
                }
            }
        }
    }

    /// Re-reads the keys if `reason` allows it now; returns once that read (or one already under
    /// way) finished, or at once if it is not allowed.
    public func refresh(_ reason: RefreshReason) async {
        await refresh(force: false, reason: reason)
    }

    /// Whether the cached keys are older than `maximumKeyAge` and a re-read is allowed.
    public var isDue: Bool {
        let now = monotonic()
        return state.withLock { allowed($0, .keyAge, now: now) }
    }

    private func allowed(_ s: State, _ reason: RefreshReason, now: ContinuousClock.Instant) -> Bool {
        if let last = s.lastAttempt, now - last < configuration.minimumRefreshInterval { return false }
        switch reason {
        case .unknownKey: return true
        case .keyAge: return s.loadedAt.map { now - $0 >= configuration.maximumKeyAge } ?? true
        }
    }

    /// Starts a re-read if `reason` allows it now, without waiting for it: verifications go on
    /// with the keys at hand while an aged set is re-read.
    public func refreshInBackground(_ reason: RefreshReason) {
        _ = startRefresh(force: false, reason: reason)
    }

    /// Returns once the re-read under way, if any, has finished.
    public func settled() async {
        await state.withLock { $0.inFlight }?.value
    }

    private func refresh(force: Bool, reason: RefreshReason = .unknownKey) async {
        await startRefresh(force: force, reason: reason)?.value
    }

    private func startRefresh(force: Bool, reason: RefreshReason) -> Task<Void, Never>? {
        let now = monotonic()
        return state.withLock { s in
            if let running = s.inFlight { return running }
            guard force || allowed(s, reason, now: now) else { return nil }
            s.lastAttempt = now
            s.fetches += 1
            let task = Task { await self.fetchAndInstall() }
            s.inFlight = task
            return task
        }
    }

    private func fetchAndInstall() async {
        let result: Result<(JWKSet?, [UInt8]), JWKError>
        do {
            let document = try await fetch()
            if state.withLock({ $0.document == document && $0.keys != nil }) {
                result = .success((nil, document))
            } else {
                result = .success((try JWKSet.parse(document, limits: configuration.limits), document))
            }
        } catch {
            result = .failure(error)
        }
        let loadedAt = monotonic()
        state.withLock { s in
            s.inFlight = nil
            switch result {
            case .success(let (set, document)):
                if let set {
                    s.keys = set
                    s.document = document
                    s.generation &+= 1
                }
                s.loadedAt = loadedAt
                s.lastError = nil
            case .failure(let error):
                s.lastError = error
            }
        }
    }

    private func fetch() async throws(JWKError) -> [UInt8] {
        switch configuration.location {
        case .file(let path):
            return try Self.readBounded(path, maxBytes: configuration.limits.maxDocumentBytes)
        case .url(let url):
            guard let client else { throw JWKError(nil, "no HTTP client for \(url)") }
            let response: HTTPClientResponse
            do {
                response = try await client.get(url, headers: ["Accept": "application/json"])
            } catch {
                throw JWKError(nil, "fetching \(url): \(error)")
            }
            guard response.status.code == 200 else { throw JWKError(nil, "fetching \(url): status \(response.status.code)") }
            return response.body
        }
    }

    /// The file's bytes, refused if longer than `maxBytes`.
    static func readBounded(_ path: String, maxBytes: Int) throws(JWKError) -> [UInt8] {
        do {
            let handle = try FileHandle(forReadingFrom: URL(fileURLWithPath: path))
            defer { try? handle.close() }
            let bytes = [UInt8](try handle.read(upToCount: maxBytes + 1) ?? Data())
            guard bytes.count <= maxBytes else { throw JWKError(nil, "\(path) is larger than \(maxBytes) bytes") }
            return bytes
        } catch let error as JWKError {
            throw error
        } catch {
            throw JWKError(nil, "reading \(path): \(error.localizedDescription)")
        }
    }

    public func shutdown() async {
        state.withLock { s in
            s.retrying?.cancel()
            s.retrying = nil
        }
        await client?.shutdown()
    }
}
