// SmallPeer: a Swift client with a local store on the same CRDT engine, a sync client, and observers.

/// Marker for the module; the real API lives in the other files of this folder.
public enum SmallPeerModule {
    public static let name = "SmallPeer"
}
