// The loop-confined half of the sync client (SyncClient.swift): owns the links (one, or several
// to the same server, best first), the current `SyncClientSession`, the reconnect timer and the
// heartbeat tick; performs the session's actions against the local store. Every method runs on
// the client's event-loop thread.
//
// With several links the session runs on the best one that is up (`active`):
//   a link connects, none active        ─▶ it carries the session (new, or resumed: §4.16)
//   a better link connects              ─▶ the session moves there (the old link is closed)
//   a worse link connects               ─▶ it is closed and halted while a better one carries
//   the active link drops               ─▶ every other link connects now; the first up resumes

import CRDT
import Sockets
import SyncPeer
import SyncProtocol
import Synchronization
import Values

/// A `Mutex` in a class, so the client and its loop-confined core share one.
final class Locked<Value: Sendable>: Sendable {
    private let mutex: Mutex<Value>
    init(_ value: Value) { mutex = Mutex(value) }
    func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R { try mutex.withLock { try body(&$0) } }
}

/// The loop-confined half of `SyncClient`.
final class SyncClientCore: SyncLinkDelegate {
    typealias Session = SyncClientSession<PendingUpload>
    let peer: SmallPeer
    let configuration: SyncClient.Configuration
    /// Best first.
    let links: [SyncLink]
    /// The index in `links` of the link the session runs on.
    var active: Int?
    /// A better link the session is moving to: its `hello` with `resume` is out, the active link
    /// carries on until its `welcome` (PROTOCOL.md §4.16).
    var candidate: Int?
    /// Links that connected while the active one was still in its handshake: open, idle, ready
    /// to carry the session at once if that handshake fails.
    var standby: Set<Int> = []
    let loop: EventLoop
    let status: Locked<SyncClient.Status>
    var session: Session?
    var tickTimer: TimerID?
    var stopped = false
    /// The current link's session was refused: its reason stays the status's `lastError` (the
    /// link's close, which may race the refusal and carry only the code, does not replace it).
    var refusedOnThisLink = false
    /// The newest credentials (`SyncClient.updateCredentials`); the next `hello` carries them.
    var credentials: SyncCredentials?
    /// What this link's session runs on: its `hello`'s credentials, then each accepted `auth`.
    var sessionCredentials: SyncCredentials?
    /// Credentials sent with `auth`, not yet answered (one refresh at a time).
    var refreshInFlight: SyncCredentials?
    /// This client's link in the peer's presence gossip.
    let linkID = PeerPresence.nextLinkID()
    /// The site of the server this link's session runs with: what it sends is logged with it as
    /// origin, so the sessions the peer serves do not echo it back there; the checkpoints and the
    /// upload state this link uses are that server's.
    var serverSite: UInt64?

    init(peer: SmallPeer, configuration: SyncClient.Configuration, links: [SyncLink], status: Locked<SyncClient.Status>) {
        self.peer = peer
        self.configuration = configuration
        self.links = links
        self.loop = links[0].loop
        self.status = status
        credentials = configuration.providerLogin.map { .provider($0.provider, token: $0.token) }
            ?? configuration.jwt.map { .jwt($0) } ?? configuration.apiKey.map { .apiKey($0) }
    }

    static func nowMillis() -> UInt64 { NanoTime.now().nanoseconds / 1_000_000 }

    // MARK: - The links: SyncClientCore+Links.swift

    /// A new session on the active link: `hello`.
    func startSession() {
        var c = Session.Configuration(site: peer.siteID.rawValue, peerKey: configuration.peerKey ?? Self.peerKey(peer.siteID.rawValue),
                                      deviceName: configuration.deviceName, credentials: credentials)
        sessionCredentials = credentials
        refreshInFlight = nil
        c.metadata = ["client": .string("SmallPeer")]
        c.remoteQueries = configuration.allowRemoteQueries ? .allowed : .refused
        c.resumable = configuration.resumable || !configuration.fallbackURLs.isEmpty
        c.renewsCredentials = configuration.tokenProvider != nil
        peer.presence.identify(peerKey: c.peerKey, deviceName: c.deviceName)
        var s = Session(configuration: c)
        let actions = s.start(now: Self.nowMillis())
        session = s
        perform(actions)
        scheduleTick()
    }

    func stop() {
        stopped = true
        if let t = tickTimer { loop.cancelTimer(t); tickTimer = nil }
        let carrying = link
        for other in links where other !== carrying { other.stop() }
        if var s = session, let carrying, carrying.isOpen {
            let actions = s.close()
            session = s
            perform(actions)
            carrying.stop()
            return  // .stopped once the close completes (syncLinkDown)
        }
        carrying?.stop()
        setPhase(.stopped)
    }

    /// New credentials: sent at once to a session in progress (`auth`), else used by the next
    /// `hello`. A client that had failed on refused credentials tries again with them.
    func updateCredentials(_ new: SyncCredentials) {
        credentials = new
        if status.withLock({ $0.phase == .failed }), !stopped {
            status.withLock { $0.phase = .connecting }
            for link in links { link.connectNow() }
            return
        }
        sendRefreshIfNeeded()
    }

    /// Asks `tokenProvider` for a fresh token of the current kind and sends it (`auth`).
    func renewCredentials() {
        guard let provider = configuration.tokenProvider, let current = credentials else { return }
        let bound = LoopBound(self, loop: loop)
        Task {
            guard let token = await provider() else { return }
            bound.loop.execute { bound.value.updateCredentials(current.replacingToken(token)) }
        }
    }

    func sendRefreshIfNeeded() {
        guard refreshInFlight == nil, let credentials, credentials != sessionCredentials, var s = session, s.state == .ready else { return }
        let actions = s.refreshCredentials(credentials)
        session = s
        refreshInFlight = credentials
        perform(actions)
    }

    // MARK: - Working

    /// The server is a link of the peer's presence gossip; its peer key is its site id's bytes
    /// (PROTOCOL.md §4.14). Records for it are sent from this client's loop.
    func presenceLinkUp(_ welcome: Welcome) {
        let type = PacketLinkURL.linkType(of: link?.configuration.url ?? configuration.url)
        let bound = LoopBound(self, loop: loop)
        peer.presence.linkUp(linkID, peerKey: Self.peerKey(welcome.site), type: type) { records in
            bound.loop.execute {
                let core = bound.value
                guard var s = core.session else { return }
                let actions = s.presence(records)
                core.session = s
                core.perform(actions)
            }
        }
    }

    func perform(_ actions: [Session.Action]) {
        for action in actions {
            switch action {
            case .send(let bytes):
                link?.send(bytes)
            case .close(let code, let reason):
                if session?.state == .closed { noteSessionEnd("closed (\(code)): \(reason)") }
                link?.close(code: code, reason: reason)
            case .moveFailed(let reason):
                if let candidate {
                    // The server may run the session there already: leave the link, not the session.
                    links[candidate].close(code: SyncCloseCode.linkLeft.rawValue, reason: reason)
                    self.candidate = nil
                }
            case .resumed(let welcome):
                link?.sessionWasAccepted()
                presenceLinkUp(welcome)
                status.withLock { s in s.phase = .connected; s.resumes += 1; s.lastError = nil }
                syncSubscriptions()  // changed while the session had no link
                sendRefreshIfNeeded()
                settleStandby()
            case .connected(let welcome):
                // A session's second link, welcomed into a new session: the resume was not found.
                if (session?.linksUsed ?? 0) > 1 { noteSessionEnd("the server answered a resume with a new session") }
                serverSite = welcome.site
                do { try peer.linkServer(welcome.site) } catch { localFailure(error); return }
                link?.sessionWasAccepted()
                presenceLinkUp(welcome)
                status.withLock { s in s.phase = .connected; s.sessions += 1; s.lastError = nil; s.clientInfo = welcome.credentials.clientInfo }
                syncSubscriptions()
                sendRefreshIfNeeded()  // updated while the handshake ran
                settleStandby()
            case .refused(let code, let reason):
                // 4003 is not final: "too many sessions" passes (PROTOCOL.md §4.2); the backoff
                // keeps the other policy refusals (a denied peer key) cheap for the server.
                let fatal = [SyncCloseCode.unauthorized, .unsupportedVersion].map(\.rawValue).contains(code)
                refusedOnThisLink = true
                status.withLock { s in
                    s.lastError = "the server refused the session (\(code)): \(reason)"
                    if fatal { s.phase = .failed }
                }
                if fatal { link?.halt() }
                // A policy denial says when to try again (PROTOCOL.md §4.2); at most a day.
                if code == SyncCloseCode.policy.rawValue, let seconds = RetryHint.seconds(in: reason) {
                    link?.holdOff(atLeast: .seconds(min(seconds, 86_400)))
                }
            case .apply(let entries, let bytes):
                status.withLock { $0.receivedEntries += entries.count }
                do {
                    let wanted = try peer.applyFromServer(entries, origin: serverSite)
                    if var s = session {
                        let more = s.applied(bytes: bytes, wanted: wanted)
                        session = s
                        perform(more)
                    }
                } catch {
                    localFailure(error)
                }
            case .saveCheckpoints(let cps):
                guard let serverSite else { break }
                do { try peer.saveCheckpoints(cps.map { ($0.key, $0.value) }, server: serverSite) } catch { localFailure(error) }
            case .acknowledged(let sent, let rejected):
                do {
                    guard let serverSite else { break }
                    let dropped = try peer.acknowledge(sent, rejected: rejected, server: serverSite)
                    if !dropped.isEmpty {
                        status.withLock { s in s.rejectedUploads += dropped.map { "\($0.0.collection) \(JSON.string($0.0.id)): \($0.1)" } }
                    }
                } catch {
                    localFailure(error)
                }
            case .subscriptionFailed(let key, let message):
                status.withLock { $0.subscriptionErrors[key] = message }
            case .credentialsRefreshed(let granted):
                sessionCredentials = refreshInFlight
                refreshInFlight = nil
                status.withLock { $0.credentialRefreshes += 1; $0.clientInfo = granted.clientInfo }
                sendRefreshIfNeeded()  // updated again meanwhile
            case .credentialsExpiring:
                status.withLock { $0.expiryNotices += 1 }
                renewCredentials()
            case .presence(let records):
                peer.presenceReceived(records, link: linkID)
            case .remoteQuery(let query):
                // On the loop, under an evaluation budget (`SmallPeer.remoteQuerySteps`): the store is in memory.
                let (outcome, warnings) = peer.runRemoteQuery(query)
                if var s = session {
                    let more = s.answerQuery(id: query.id, outcome, warnings: warnings, now: Self.nowMillis())
                    session = s
                    perform(more)
                }
            case .gone(let refs):
                do { _ = try peer.evictGone(refs) } catch { localFailure(error) }
            case .fullResyncFinished(let key, let delivered):
                guard let sub = peer.subscriptions.first(where: { $0.key == key }) else { break }
                do { _ = try peer.evictNotResent(sub, delivered: delivered) } catch { localFailure(error) }
            }
        }
    }

    /// The store could not be written: drop the link (nothing unpersisted was acknowledged) and retry later.
    private func localFailure(_ error: SmallPeerError) {
        status.withLock { $0.lastError = "local store: \(error)" }
        if error == .closed {
            // The application closed the peer: nothing left to sync into, so stop instead of retrying.
            status.withLock { $0.phase = .failed }
            return stop()
        }
        guard var s = session else { return }
        let actions = s.close(code: SyncCloseCode.internalError.rawValue, reason: "local store failure")
        session = s
        perform(actions)
    }

    /// A local write or a subscription change.
    func localChange() {
        syncSubscriptions()
        flushUploads()
    }

    func syncSubscriptions() {
        guard var s = session, s.state == .ready, let serverSite else { return }
        let subs = peer.subscriptions
        var actions = s.keepOnly(Set(subs.map(\.key)))
        for sub in subs where !s.subscriptionKeys.contains(sub.key) {
            actions += s.subscribe(sub, resume: peer.resume(for: sub, server: serverSite))
        }
        session = s
        perform(actions)
        flushUploads()
    }

    func flushUploads() {
        while var s = session, s.canUpload, let serverSite {
            let uploads = peer.takeUploads(excluding: s.uploadingDocuments, maxDocuments: s.configuration.uploadBatchDocuments,
                                           maxBytes: s.configuration.uploadBatchBytes, server: serverSite)
            if uploads.isEmpty { return }
            let actions = s.upload(uploads, seq: peer.allocateUploadSeq())
            session = s
            status.withLock { $0.uploadedDocuments += uploads.count }
            perform(actions)
        }
    }

    func scheduleTick() {
        tickTimer = loop.scheduleTimer(after: .milliseconds(50)) { [weak self] in
            guard let self else { return }
            self.tickTimer = nil
            guard var s = self.session else { return }
            let now = Self.nowMillis()
            let actions = s.tick(now: now)
            self.session = s
            self.perform(actions)
            self.giveUpSlowHandshake(now: now)
            self.peer.presence.tick()
            let outboxEmpty = self.serverSite.map { self.peer.pendingUploadCount(server: $0) == 0 } ?? (self.peer.pendingUploadCount == 0)
            let waitingFor = s.waitingFor(now: now, quietMillis: self.configuration.quietMillis, outboxEmpty: outboxEmpty)
            self.status.withLock { st in
                st.caughtUp = waitingFor == nil
                st.waitingFor = waitingFor
            }
            if self.session != nil { self.scheduleTick() }
        }
    }

    func setPhase(_ phase: SyncClient.Status.Phase) {
        status.withLock { s in if s.phase != .failed || phase == .stopped { s.phase = phase } }
    }

    /// A stable peer key derived from the site id when none is configured (8 bytes, big-endian).
    static func peerKey(_ site: UInt64) -> [UInt8] { (0..<8).map { UInt8(truncatingIfNeeded: site >> (56 - 8 * $0)) } }
}

extension SyncCredentials {
    /// The same kind of credentials (and provider) with another token.
    func replacingToken(_ token: String) -> SyncCredentials {
        switch self {
        case .jwt: .jwt(token)
        case .apiKey: .apiKey(token)
        case .provider(let name, _): .provider(name, token: token)
        }
    }
}
