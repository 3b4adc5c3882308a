// CRDT: the document model (HLC clock, site ids, REGISTER/MAP/COUNTER/ATTACHMENT, tombstones, version vectors, deltas, canonical CBOR). Pure; no I/O.

/// Marker for the module; the real API lives in the other files of this folder.
public enum CRDTModule {
    public static let name = "CRDT"
}
