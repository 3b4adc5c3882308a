// The DQL module has an enum named `DQL`, so `DQL.TypeDeclarations` does not name the module's
// type; this file imports DQL alone and names the types the store needs from both modules.
import DQL

typealias DQLTypeDeclarations = TypeDeclarations
typealias DQLFieldType = FieldType
