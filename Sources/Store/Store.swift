// Store: the document store on PostgreSQL (schema in migrations/, CRDT state + materialized JSONB, change log, DQL execution).

/// Marker for the module; the real API lives in the other files of this folder.
public enum StoreModule {
    public static let name = "Store"
}
