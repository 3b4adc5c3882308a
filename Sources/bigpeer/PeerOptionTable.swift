/// `OptionRow`s of every option of `bigpeer peer`: what its configuration file
/// (`peer --config FILE`, else `$BIGPEER_PEER_CONFIG`) and its `BIGPEER_PEER_<OPTION>` variables
/// may set (docs/OPERATIONS.md, "Configuration of `bigpeer peer`"). The credentials (`key`, `jwt`,
/// `token`) are secrets; ConfigFileTests fails when a row is missing or names an option `peer`
/// does not have.
enum PeerOptionTable {
    static let rows: [String: OptionRow] = [
        // Store and links.
        "data": .text, "url": .url, "fallback-url": .url,
        // Credentials.
        "key": .secret, "jwt": .secret, "jwt-file": .text, "auth-provider": .text, "token": .secret, "token-file": .text,
        // What it does.
        "subscribe": .text, "execute": .text, "sync-once": .flag, "offline": .flag, "timeout": .integer, "name": .text,
        // LAN and BLE.
        "lan": .flag, "sync-group": .integer, "lan-interface": .text, "ble": .flag, "ble-adapter": .text, "ble-name": .text,
        "listen": .flag, "listen-port": .integer, "peer-policy": .text,
        // Presence and remote queries.
        "presence": .flag, "presence-metadata": .text, "allow-remote-query": .flag,
    ]
}
