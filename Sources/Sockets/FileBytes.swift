// Reading a small file whole (secrets, tokens): bounded, with no Foundation.

#if canImport(Glibc)
import Glibc
#endif

public enum FileBytes {
    /// The file's bytes, or nil if it cannot be read or is larger than `maxBytes`.
    public static func read(_ path: String, maxBytes: Int = 1 << 20) -> [UInt8]? {
        guard let f = fopen(path, "rb") else { return nil }
        defer { fclose(f) }
        var out: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = fread(&buffer, 1, buffer.count, f)
            if n > 0 { out.append(contentsOf: buffer[0..<n]) }
            if out.count > maxBytes { return nil }
            if n < buffer.count { break }
        }
        return ferror(f) == 0 ? out : nil
    }
}
