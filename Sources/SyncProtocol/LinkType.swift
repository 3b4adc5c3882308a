/// The kind of transport a sync link runs on, with Ditto's names: what presence records list
/// (PROTOCOL.md §4.14), what the connection policy matches on and tells its webhook.
public enum LinkType: String, Sendable, Hashable, CaseIterable {
    case webSocket = "WebSocket"
    /// A LAN TCP peer link (Ditto calls LAN links "AccessPoint").
    case accessPoint = "AccessPoint"
    case bluetooth = "Bluetooth"
}
