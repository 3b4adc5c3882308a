// Sync: the replication protocol (messages, codec, sans-I/O session state machine, subscriptions, checkpoints, flow control, fan-out).

/// Marker for the module; the real API lives in the other files of this folder.
public enum SyncModule {
    public static let name = "Sync"
}
