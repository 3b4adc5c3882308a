import ConfigFile

/// What the configuration file and the environment need to know about one option of a command
/// beyond its declaration: the kind of value it takes and whether it is a secret (`config print`
/// hides it). One table of rows per command that reads a file (`ServeOptionTable`,
/// `PeerOptionTable`); each has a test that fails when a row is missing or names no option.
struct OptionRow: Sendable {
    var kind: Kind
    var secrecy: ConfigOption.Secrecy = .none
    /// Variables read before `<prefix><NAME>` existed, still read after it.
    var olderEnvironment: [String] = []

    enum Kind: Sendable { case flag, integer, text, choice }

    static let flag = OptionRow(kind: .flag)
    static let integer = OptionRow(kind: .integer)
    static let text = OptionRow(kind: .text)
    /// Its words come from the declaration's type (`ExpressibleByArgument.allValueStrings`).
    static let choice = OptionRow(kind: .choice)
    static let secret = OptionRow(kind: .text, secrecy: .whole)
    static let url = OptionRow(kind: .text, secrecy: .url)
}
