// The objects a connection exports, and the answers to method calls on them, without I/O:
// the standard interfaces `org.freedesktop.DBus.Properties` (Get, GetAll; Set is refused: every
// exported property is read-only), `org.freedesktop.DBus.ObjectManager.GetManagedObjects` on a
// manager's root, `org.freedesktop.DBus.Introspectable.Introspect` (minimal) and
// `org.freedesktop.DBus.Peer.Ping`, plus each object's own methods.

/// One interface of an exported object: read-only properties and method handlers.
public struct DBusInterface: Sendable {
    public typealias Method = @Sendable (DBusMessage) -> Result<[DBusValue], DBusMethodError>
    public var name: String
    public var properties: [String: DBusValue]
    public var methods: [String: Method]

    public init(name: String, properties: [String: DBusValue] = [:], methods: [String: Method] = [:]) {
        self.name = name
        self.properties = properties
        self.methods = methods
    }
}

/// An error reply a method handler returns (`org.bluez.Error.Failed`, …).
public struct DBusMethodError: Error, Sendable, Equatable {
    public var name: String
    public var message: String
    public init(name: String, message: String) {
        self.name = name
        self.message = message
    }
}

public enum DBusStandardInterface {
    public static let properties = "org.freedesktop.DBus.Properties"
    public static let objectManager = "org.freedesktop.DBus.ObjectManager"
    public static let introspectable = "org.freedesktop.DBus.Introspectable"
    public static let peer = "org.freedesktop.DBus.Peer"
}

public struct DBusObjectTable: Sendable {
    /// Exported objects by path: their interfaces by name.
    public private(set) var objects: [String: [String: DBusInterface]] = [:]
    /// Paths that answer `GetManagedObjects` for the objects below them.
    public private(set) var managerRoots: Set<String> = []

    public init() {}

    public mutating func export(path: String, interfaces: [DBusInterface]) throws(DBusError) {
        guard isValidObjectPath(path) else { throw .invalidValue("invalid object path \"\(path)\"") }
        objects[path] = Dictionary(interfaces.map { ($0.name, $0) }, uniquingKeysWith: { _, last in last })
    }

    public mutating func exportObjectManager(at path: String) throws(DBusError) {
        guard isValidObjectPath(path) else { throw .invalidValue("invalid object path \"\(path)\"") }
        managerRoots.insert(path)
    }

    /// Removes the object at `path` and, when it was a manager root, the objects below it.
    public mutating func unexport(path: String) {
        objects[path] = nil
        if managerRoots.remove(path) != nil {
            for p in objects.keys where Self.isBelow(p, root: path) { objects[p] = nil }
        }
    }

    static func isBelow(_ path: String, root: String) -> Bool {
        root == "/" ? path != "/" : path.hasPrefix(root + "/")
    }

    /// The reply to a method call addressed to this connection, or nil when the call asked for none.
    public func handle(_ call: DBusMessage) -> DBusMessage? {
        let result = answer(call)
        if call.flags.contains(.noReplyExpected) { return nil }
        switch result {
        case .success(let body): return .methodReturn(to: call, body: body)
        case .failure(let e): return .error(to: call, name: e.name, message: e.message)
        }
    }

    private func answer(_ call: DBusMessage) -> Result<[DBusValue], DBusMethodError> {
        guard let path = call.path, let member = call.member else { return .failure(Self.unknownMethod("a call without path or member")) }
        let interface = call.interface
        func isCall(_ standard: String, _ name: String) -> Bool { member == name && (interface == nil || interface == standard) }
        let interfaces = objects[path]
        if isCall(DBusStandardInterface.peer, "Ping") { return .success([]) }
        if isCall(DBusStandardInterface.introspectable, "Introspect") { return .success([.string(introspection(of: path))]) }
        if isCall(DBusStandardInterface.objectManager, "GetManagedObjects"), managerRoots.contains(path) {
            return .success([managedObjects(below: path)])
        }
        if interface == DBusStandardInterface.properties {
            switch member {
            case "GetAll":
                guard case .string(let name)? = call.body.first, call.body.count == 1 else { return .failure(Self.invalidArgs("GetAll takes one string")) }
                guard let interfaces else { return .failure(Self.unknownObject(path)) }
                return .success([.properties(interfaces[name]?.properties ?? [:])])
            case "Get":
                guard call.body.count == 2, case .string(let name) = call.body[0], case .string(let property) = call.body[1] else {
                    return .failure(Self.invalidArgs("Get takes two strings"))
                }
                guard let value = interfaces?[name]?.properties[property] else {
                    return .failure(DBusMethodError(name: "org.freedesktop.DBus.Error.UnknownProperty", message: "no property \(name).\(property) at \(path)"))
                }
                return .success([.variant(value)])
            case "Set":
                return .failure(DBusMethodError(name: "org.freedesktop.DBus.Error.PropertyReadOnly", message: "properties at \(path) are read-only"))
            default:
                return .failure(Self.unknownMethod("no method \(DBusStandardInterface.properties).\(member)"))
            }
        }
        guard let interfaces else { return .failure(Self.unknownObject(path)) }
        let candidates = interface.map { interfaces[$0].map { [$0] } ?? [] } ?? interfaces.values.sorted { $0.name < $1.name }
        for candidate in candidates {
            if let method = candidate.methods[member] { return method(call) }
        }
        return .failure(Self.unknownMethod("no method \(interface ?? "*").\(member) at \(path)"))
    }

    /// `a{oa{sa{sv}}}`: every object below `root`, with its interfaces and their properties.
    func managedObjects(below root: String) -> DBusValue {
        let paths = objects.keys.filter { Self.isBelow($0, root: root) }.sorted()
        return .dictionary(key: .objectPath, value: .array(.dictEntry(.string, .array(.dictEntry(.string, .variant)))), paths.map { path in
            let interfaces = (objects[path] ?? [:]).values.sorted { $0.name < $1.name }
            return (.objectPath(path), .dictionary(key: .string, value: .array(.dictEntry(.string, .variant)),
                                                    interfaces.map { (.string($0.name), .properties($0.properties)) }))
        })
    }

    /// Interfaces by name and child nodes: enough for `busctl introspect` and `gdbus introspect`.
    func introspection(of path: String) -> String {
        var xml = "<!DOCTYPE node PUBLIC \"-//freedesktop//DTD D-BUS Object Introspection 1.0//EN\" "
            + "\"http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd\">\n<node>\n"
        for name in ((objects[path] ?? [:]).keys.sorted()) { xml += "  <interface name=\"\(name)\"/>\n" }
        let prefix = path == "/" ? "/" : path + "/"
        var children = Set<String>()
        for p in objects.keys where p.hasPrefix(prefix) && p != path {
            if let first = p.dropFirst(prefix.count).split(separator: "/").first { children.insert(String(first)) }
        }
        for child in children.sorted() { xml += "  <node name=\"\(child)\"/>\n" }
        return xml + "</node>\n"
    }

    static func unknownObject(_ path: String) -> DBusMethodError {
        DBusMethodError(name: "org.freedesktop.DBus.Error.UnknownObject", message: "no object at \(path)")
    }

    static func unknownMethod(_ why: String) -> DBusMethodError {
        DBusMethodError(name: "org.freedesktop.DBus.Error.UnknownMethod", message: why)
    }

    static func invalidArgs(_ why: String) -> DBusMethodError {
        DBusMethodError(name: "org.freedesktop.DBus.Error.InvalidArgs", message: why)
    }
}
