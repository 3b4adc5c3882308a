import Foundation

/// A directory of the test's own under the temporary directory, removed with the last reference.
public final class TemporaryDirectory: Sendable {
    public let path: String

    public init(_ prefix: String = "bigpeer") throws {
        path = NSTemporaryDirectory() + "\(prefix)-\(getpid())-\(UInt64.random(in: 0...UInt64.max))"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    deinit { try? FileManager.default.removeItem(atPath: path) }

    /// Writes `text` to `name` (inside the directory) as editors do: a new file renamed over the
    /// old one. Returns the file's path.
    @discardableResult
    public func write(_ name: String, _ text: String) throws -> String {
        let file = "\(path)/\(name)"
        try Data(text.utf8).write(to: URL(fileURLWithPath: file), options: .atomic)
        return file
    }
}
