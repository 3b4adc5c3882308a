import Testing
@testable import Postgres
