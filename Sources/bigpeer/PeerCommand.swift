import ArgumentParser
import ConnectionPolicy
import LANDiscovery
import Logging
import Glibc
import SmallPeer
import Sockets
import Synchronization
import SyncProtocol
import Values

/// `bigpeer peer`: a small peer from the shell (docs/SMALLPEER.md "The CLI").
///
/// Output is JSON lines on stdout: one per `--execute` / prompt statement (the result), and one
/// per document that changed through sync in a subscription (`{"event": "upsert"|"removed", ...}`).
/// Errors go to stderr; the exit status is non-zero when a statement fails or sync cannot finish.
struct PeerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "peer",
        abstract: "Run a small peer: a local store in --data, synced with a BigPeer server over WebSocket.",
        discussion: """
            --execute runs statements against the local store and prints each result as JSON. --offline never \
            connects. --sync-once connects, exchanges until both sides are caught up for the subscriptions, \
            prints what changed, and exits. With neither, it stays connected and reads DQL from stdin, one \
            statement per line, printing results and incoming changes.
            """)

    @Option(name: .customLong("config"), help: "YAML file of these options, each key a long option name (docs/OPERATIONS.md, \"Configuration of bigpeer peer\"); BIGPEER_PEER_<OPTION> variables override it, options given here override both (default: $BIGPEER_PEER_CONFIG).")
    var configFile: String?

    @Option(name: .customLong("data"), help: "Directory of the peer's local store (created if absent).")
    var dataDirectory: String

    @Option(help: "Server URL, ws://HOST:PORT or wss://HOST:PORT (path defaults to /api/v4/sync), or tcp://HOST:PORT / tls://HOST:PORT for a local node's LAN peer link (bigpeer serve --lan).")
    var url: String?
    @Option(name: .customLong("fallback-url"), help: "Another link to the same server, used while --url is down (repeatable, best first; e.g. --url tcp://node:4040 --fallback-url l2cap://AA:BB:CC:DD:EE:FF/129). The session moves between them without starting over (PROTOCOL.md §4.16).")
    var fallbackURLs: [String] = []

    @Option(help: "API key sent in the sync handshake.")
    var key: String?

    @Option(help: "A JWT sent in the sync handshake instead of an API key (see `bigpeer token`).")
    var jwt: String?

    @Option(name: .customLong("jwt-file"), help: "A file holding the JWT; re-read every 5 s, and a new token is sent to the server in the running session (docs/PROTOCOL.md §4.13).")
    var jwtFile: String?

    @Option(name: .customLong("auth-provider"), help: "Log in with --token through the server's authentication webhook of this provider (serve --auth-webhook NAME=URL).")
    var authProvider: String?
    @Option(help: "The token for --auth-provider.")
    var token: String?
    @Option(name: .customLong("token-file"), help: "A file holding the token for --auth-provider (instead of --token); read again when the server says the login is about to expire, and the new token is sent in the running session (docs/PROTOCOL.md §4.13).")
    var tokenFile: String?

    @Option(name: .customLong("subscribe"), help: "A sync subscription: SELECT * FROM collection [WHERE ...] (repeatable).")
    var subscriptions: [String] = []

    @Option(name: .customLong("execute"), help: "A DQL statement to run on the local store (repeatable, in order).")
    var statements: [String] = []

    @Flag(name: .customLong("sync-once"), help: "Connect, sync until caught up, print what changed, exit.")
    var syncOnce = false

    @Flag(help: "Never connect.")
    var offline = false

    @Option(help: "Seconds --sync-once may take before it gives up.")
    var timeout: Int = 30

    @Option(help: "Device name announced to the server.")
    var name = "bigpeer-cli"

    @Flag(name: .customLong("lan"), help: "Find a BigPeer local node on the LAN with mDNS (_bigpeer._tcp, same --sync-group) and sync with it over TCP, instead of --url.")
    var lan = false
    @Option(name: .customLong("sync-group"), help: "With --lan: only a node of this sync group.") var syncGroup: UInt32 = 0
    @Option(name: .customLong("lan-interface"), help: "With --lan: an interface to browse on (repeatable; default: all that are up, multicast-capable and not loopback).")
    var lanInterfaces: [String] = []

    @Flag(name: .customLong("ble"), help: "Sync over a BLE L2CAP channel: with --url l2cap://ADDRESS/PSM[?random] (the node's address and the PSM it advertises), or without --url with a node found by scanning through BlueZ (moving to another when it is lost). Fails with \"BLE unavailable: …\" where there is no Bluetooth or no BlueZ.")
    var ble = false
    @Option(name: .customLong("ble-adapter"), help: "With --ble and no --url: the Bluetooth adapter to scan on.")
    var bleAdapter = "hci0"
    @Option(name: .customLong("ble-name"), help: "With --ble and no --url: only a node advertising this local name (its device name).")
    var bleName: String?

    @Flag(name: .customLong("listen"), help: "With --lan: advertise this peer (role=peer) and link with every node and small peer of the sync group found on the LAN, one link per pair, with no one server: it dials the nodes and the peers with a higher peer key, and serves the links the others dial on --listen-port.")
    var listen = false
    @Option(name: .customLong("listen-port"), help: "With --listen: the TCP port other small peers link to (0: any free port).")
    var listenPort = 0
    @Option(name: .customLong("peer-policy"), help: "With --listen: a connection policy file (the format of `bigpeer serve --peer-policy`, docs/LOCAL-NODE.md) deciding which peers that dial this one may sync.")
    var peerPolicy: String?

    @Flag(help: "Print the presence graph as JSON ({\"presence\": graph}): with --sync-once once after syncing, else whenever it changes (docs/LOCAL-NODE.md, \"Presence\").")
    var presence = false

    @Option(name: .customLong("presence-metadata"), help: "A JSON object this peer publishes in presence (peerMetadata, at most 4 KiB).")
    var presenceMetadata: String?
    @Flag(name: .customLong("allow-remote-query"), help: "Answer the server's remote queries (POST /api/v4/sync/remote_execute: a SELECT run on this peer's store); off: they are answered \"not allowed\".")
    var allowRemoteQuery = false

    func validate() throws {
        if syncOnce && offline { throw ValidationError("--sync-once and --offline exclude each other") }
        if lan && url != nil { throw ValidationError("--lan and --url exclude each other") }
        if lan && offline { throw ValidationError("--lan and --offline exclude each other") }
        if ble && (lan || offline) { throw ValidationError("--ble excludes --lan and --offline") }
        if let url, url.hasPrefix("l2cap://") && !ble { throw ValidationError("an l2cap:// --url needs --ble") }
        if !fallbackURLs.isEmpty && url == nil { throw ValidationError("--fallback-url needs --url") }
        if fallbackURLs.contains(where: { $0.hasPrefix("l2cap://") }) && !ble { throw ValidationError("an l2cap:// --fallback-url needs --ble") }
        if (bleAdapter != "hci0" || bleName != nil) && (!ble || url != nil) { throw ValidationError("--ble-adapter and --ble-name need --ble without --url") }
        guard BLEOptions.isAdapterName(bleAdapter) else { throw ValidationError("--ble-adapter must be hciN") }
        if !lan && (syncGroup != 0 || !lanInterfaces.isEmpty || listen) { throw ValidationError("--sync-group, --lan-interface and --listen need --lan") }
        if !listen && (listenPort != 0 || peerPolicy != nil) { throw ValidationError("--listen-port and --peer-policy need --listen") }
        if listen && syncOnce { throw ValidationError("--listen and --sync-once exclude each other") }
        if !(0...65535).contains(listenPort) { throw ValidationError("--listen-port must be 0...65535") }
        if syncOnce && url == nil && !lan && !ble { throw ValidationError("--sync-once needs --url, --lan or --ble") }
        if [key != nil, jwt != nil, jwtFile != nil, authProvider != nil].filter({ $0 }).count > 1 {
            throw ValidationError("--key, --jwt, --jwt-file and --auth-provider exclude each other")
        }
        if (authProvider == nil) != (token == nil && tokenFile == nil) { throw ValidationError("--auth-provider goes with --token or --token-file") }
        if token != nil && tokenFile != nil { throw ValidationError("--token and --token-file exclude each other") }
        if timeout < 1 { throw ValidationError("--timeout must be at least 1 second") }
    }

    func run() async throws {
        if ble {
            if let unavailable = PacketSockets.bluetoothUnavailable() {
                Output.error("\(unavailable)")
                throw ExitCode.failure
            }
            if let url, !([url] + fallbackURLs).contains(where: { $0.hasPrefix("l2cap://") }) {
                Output.error("--ble needs an l2cap://ADDRESS/PSM --url or --fallback-url, or no --url (a node is found by scanning)")
                throw ExitCode.failure
            }
        }
        let peer: SmallPeer
        do { peer = try SmallPeer(directory: dataDirectory) } catch {
            Output.error("cannot open \(dataDirectory): \(error)")
            throw ExitCode.failure
        }
        defer { peer.close() }
        var failed = false
        for statement in statements where !Output.run(statement, on: peer) { failed = true }
        if failed { throw ExitCode.failure }

        // Changes to subscribed documents that arrive through sync are printed; local writes are not
        // (each event says which it is: one may arrive while a local statement runs).
        var observers: [CancelHandle] = []
        for query in subscriptions {
            do {
                _ = try peer.subscribe(query)
                let handle = try peer.registerObserver(query) { event in
                    if event.isInitial || event.isLocal { return }
                    Output.changes(event, query: query)
                }
                observers.append(handle)
            } catch {
                Output.error("--subscribe \(query): \(error)")
                throw ExitCode.failure
            }
        }
        defer { observers.forEach { $0.cancel() } }

        var target = url
        if lan && !listen {
            do {
                let found = try await LANNodeFinder.find(syncGroup: syncGroup, interfaces: lanInterfaces, timeout: .seconds(timeout),
                                                         logger: Logger(label: "bigpeer.peer.lan") { _ in SwiftLogNoOpLogHandler() })
                Output.error("found \(found.advertisement.name) at \(found.url)")
                target = found.url
            } catch {
                Output.error("\(error)")
                throw ExitCode.failure
            }
        }
        guard target != nil || listen || ble, !offline else {
            if offline && !statements.isEmpty { return }
            return prompt(peer)
        }
        if let presenceMetadata {
            guard case .object(let m)? = try? JSON.parse(presenceMetadata) else {
                Output.error("--presence-metadata must be a JSON object")
                throw ExitCode.failure
            }
            do { try peer.setPresenceMetadata(m) } catch {
                Output.error("--presence-metadata: \(error)")
                throw ExitCode.failure
            }
        }
        // With --listen every link's URL comes from discovery (`PeerLANLinks` sets it per dial).
        var config = SyncClient.Configuration(url: target ?? "", apiKey: key)
        config.deviceName = name
        config.allowRemoteQueries = allowRemoteQuery
        config.fallbackURLs = fallbackURLs
        config.jwt = jwt
        if let authProvider, let token { config.providerLogin = (authProvider, token) }
        // A token file is read again whenever the server says the credentials expire soon.
        for (path, what) in [(jwtFile, "a JWT"), (tokenFile, "a token")] {
            guard let path else { continue }
            guard let token = Self.readToken(path) else {
                Output.error("cannot read \(what) from \(path)")
                throw ExitCode.failure
            }
            if let authProvider { config.providerLogin = (authProvider, token) } else { config.jwt = token }
            config.tokenProvider = { Self.readToken(path) }
        }
        if syncOnce { config.maxConnectAttempts = 3 }
        let client: any PeerSyncClient
        if target == nil && ble {
            do {
                client = try await PeerBLELink.start(peer: peer, client: config, adapter: bleAdapter, name: bleName, timeout: .seconds(timeout),
                                                     logger: Self.stderrLogger("bigpeer.peer.ble"))
            } catch {
                Output.error("\(error)")
                throw ExitCode.failure
            }
        } else {
            guard target != nil else { return try await runLinked(peer, client: config) }
            do { client = try SyncClient(peer: peer, configuration: config) } catch {
                Output.error("\(error)")
                throw ExitCode.failure
            }
        }
        let url = target ?? "the BLE node"
        let initialToken = config.jwt
        let rereader = jwtFile.map { path in
            Task {
                var current = initialToken
                while !Task.isCancelled {
                    try? await Task.sleep(for: .seconds(5))
                    // A file being rewritten may read empty or cut: only a new, non-empty token counts.
                    guard let token = Self.readToken(path), token != current else { continue }
                    current = token
                    client.updateCredentials(jwt: token)
                }
            }
        }
        defer { rereader?.cancel() }
        if syncOnce {
            do {
                try await client.waitUntilCaughtUp(timeout: .seconds(timeout))
            } catch {
                await client.stop()
                Output.error("sync with \(url) failed: \(error)")
                throw ExitCode.failure
            }
            if presence {
                // Records follow the welcome within a gossip round or two (PROTOCOL.md §4.14): wait
                // (at most 2 s) until every peer shown has sent its own, or peers without presence
                // support would be told apart from peers whose record is on its way by luck.
                for _ in 0..<40 where peer.presenceGraph.remotePeers.contains(where: { $0.sdkVersion.isEmpty }) {
                    try? await Task.sleep(for: .milliseconds(50))
                }
                Output.line(.object(["presence": peer.presenceGraph.json]))
            }
            let status = client.status
            await client.stop()
            for (key, message) in status.subscriptionErrors { Output.error("subscription \(key.split(separator: "\u{0}").first ?? ""): \(message)") }
            for r in status.rejectedUploads { Output.error("upload rejected: \(r)") }
            if !status.subscriptionErrors.isEmpty || !status.rejectedUploads.isEmpty { throw ExitCode.failure }
            return
        }
        let presenceObserver = presence ? peer.observePresence { Output.line(.object(["presence": $0.json])) } : nil
        defer { presenceObserver?.cancel() }
        prompt(peer)
        await client.stop()
    }

    /// `--lan --listen`: no one server; this peer links with every node and small peer of its
    /// sync group it finds (`PeerLANLinks`: it dials nodes and the peers with a higher key, and
    /// serves the links the others dial), reads DQL from stdin, and prints what changes.
    private func runLinked(_ peer: SmallPeer, client: SyncClient.Configuration) async throws {
        peer.setDeviceName(client.deviceName)
        let policy: PeerPolicy
        do { policy = PeerPolicy(ruleFile: try peerPolicy.map { path throws(PolicyConfigurationError) in try PolicyRulesFile(path: path) }, webhook: nil) } catch {
            Output.error("--peer-policy: \(error)")
            throw ExitCode.failure
        }
        let presenceObserver = presence ? peer.observePresence { Output.line(.object(["presence": $0.json])) } : nil
        defer { presenceObserver?.cancel() }
        let links: PeerLANLinks
        do {
            links = try await PeerLANLinks.start(peer: peer, client: client, syncGroup: syncGroup, interfaces: lanInterfaces, listenPort: listenPort,
                                                 policy: policy, logger: Self.stderrLogger("bigpeer.peer.lan"))
        } catch {
            Output.error("--listen: \(error)")
            throw ExitCode.failure
        }
        prompt(peer)
        await links.stop()
    }

    /// What `--listen` and `--ble` log goes to stderr (stdout carries the JSON lines), from `notice` up.
    static func stderrLogger(_ label: String) -> Logger {
        var logger = Logger(label: label) { StreamLogHandler.standardError(label: $0) }
        logger.logLevel = .notice
        return logger
    }

    /// The token in `path` without surrounding whitespace; nil when unreadable or empty.
    static func readToken(_ path: String) -> String? {
        guard let bytes = JWTOptions.readFile(path), bytes.count <= 16 << 10 else { return nil }
        let space: Set<UInt8> = [9, 10, 13, 32]  // a file written by `echo` ends with a newline
        let token = String(decoding: bytes.drop { space.contains($0) }.reversed().drop { space.contains($0) }.reversed(), as: UTF8.self)
        return token.isEmpty ? nil : token
    }

    /// Reads statements from stdin until EOF; runs each locally.
    func prompt(_ peer: SmallPeer) {
        let interactive = isatty(0) != 0
        while true {
            if interactive { Output.prompt() }
            guard let line = readLine() else { return }
            let text = line.trimmingCharacters()
            if text.isEmpty { continue }
            if text == "exit" || text == "quit" { return }
            _ = Output.run(text, on: peer)
        }
    }
}

/// Serialized writes to stdout/stderr (observer events arrive on the sync thread).
enum Output {
    static let lock = Mutex(())

    static func line(_ value: Value) {
        lock.withLock { _ in write(1, JSON.string(value) + "\n") }
    }

    static func error(_ message: String) {
        lock.withLock { _ in write(2, "bigpeer peer: \(message)\n") }
    }

    static func prompt() {
        lock.withLock { _ in write(1, "dql> ") }
    }

    /// Writes all of `text` to `fd` (unbuffered, so lines reach a pipe at once).
    static func write(_ fd: Int32, _ text: String) {
        var bytes = Array(text.utf8)[...]
        while !bytes.isEmpty {
            let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return }
            bytes = bytes.dropFirst(n)
        }
    }

    /// Runs one statement and prints its result (or the error to stderr); false on error.
    static func run(_ statement: String, on peer: SmallPeer) -> Bool {
        do {
            let r = try peer.execute(statement)
            line(.object(["queryType": .string(r.queryType), "items": .array(r.items),
                          "mutatedDocumentIds": .array(r.mutatedDocumentIDs), "warnings": .array(r.warnings.map { .string($0) })]))
            return true
        } catch {
            Output.error("\(statement): \(error)")
            return false
        }
    }

    static func changes(_ event: ObserverEvent, query: String) {
        let byID = Dictionary(event.items.compactMap { item in item["_id"].map { ($0, item) } }, uniquingKeysWith: { a, _ in a })
        for id in event.insertions + event.updates {
            line(.object(["event": .string("upsert"), "subscription": .string(query), "_id": id, "value": byID[id] ?? .null]))
        }
        for id in event.deletions {
            line(.object(["event": .string("removed"), "subscription": .string(query), "_id": id]))
        }
    }
}

extension String {
    func trimmingCharacters() -> String {
        let scalars = unicodeScalars.drop { $0 == " " || $0 == "\t" || $0 == "\r" }
        return String(String.UnicodeScalarView(scalars.reversed().drop { $0 == " " || $0 == "\t" || $0 == "\r" }.reversed()))
    }
}
