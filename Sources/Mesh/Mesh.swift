// Mesh: local-node transports (mDNS/DNS-SD, TCP peer links, BLE L2CAP links, presence graph, connection policy).

/// Marker for the module; the real API lives in the other files of this folder.
public enum MeshModule {
    public static let name = "Mesh"
}
