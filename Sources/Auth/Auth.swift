// Auth: API keys, JWT (HS256/RS256/ES256), auth webhook, per-collection permission rules.

/// Marker for the module; the real API lives in the other files of this folder.
public enum AuthModule {
    public static let name = "Auth"
}
