import APNSModel
import PostgresNIO

/// Whose fault a failed registry operation is (contract §4): the message's, when PostgreSQL
/// refused a value it carries (SQLSTATE class 22 "data exception", 23 "integrity constraint
/// violation" or 54 "program limit exceeded"), which makes the message malformed (dead-lettered,
/// consumers go on); anything else (a lost or refused connection, a timeout, a server in
/// trouble) is the registry being unavailable, which holds the consumers and keeps the message
/// in the broker.
enum DatabaseFault: Sendable, Hashable {
    case message(JobError)
    case unavailable

    /// The SQLSTATE classes a message's own values cause (PostgreSQL, Appendix A). 54, "program
    /// limit exceeded", is a value too large for what holds it (an index row over its 2704-byte
    /// limit, an array over its size limit); the statements are ours and fixed, so only a value
    /// can reach it. (53, "insufficient resources", is the server's state: unavailable.)
    static let messageClasses: Set<String> = ["22", "23", "54"]

    /// The decision, from what the server said (pure: tests give it any SQLSTATE).
    static func classify(sqlState: String?, serverMessage: String?, column: String?) -> DatabaseFault {
        guard let refusal = refusal(sqlState: sqlState, serverMessage: serverMessage, of: "message") else { return .unavailable }
        return .message(JobError(kind: .malformedJob, field: column ?? "body", message: refusal))
    }

    /// "PostgreSQL refused a value of this `what` (SQLSTATE …): …" when `sqlState` is one a
    /// value causes; nil otherwise.
    static func refusal(sqlState: String?, serverMessage: String?, of what: String) -> String? {
        guard let sqlState, sqlState.utf8.count == 5, messageClasses.contains(String(sqlState.prefix(2))) else { return nil }
        // PostgreSQL's primary message names the problem, not the values (those are in `detail`,
        // which may hold a token): safe for a log line, `x-apns-error` and an admin's answer.
        let text = (serverMessage ?? "").split(whereSeparator: \.isNewline).joined(separator: " ").prefix(200)
        return "PostgreSQL refused a value of this \(what) (SQLSTATE \(sqlState)): \(text)"
    }

    static func classify(_ error: any Error) -> DatabaseFault {
        guard let error = error as? PSQLError, error.code == .server, let info = error.serverInfo else { return .unavailable }
        return classify(sqlState: info[.sqlState], serverMessage: info[.message], column: info[.columnName])
    }

    /// The handlers' route for a failed registry operation.
    static func route(for error: any Error) -> RegistryRoute {
        switch classify(error) {
        case .message(let malformed): .dead(malformed)
        case .unavailable: .requeueAndHold(error)
        }
    }
}

extension RegistryStore {
    /// Why PostgreSQL refused a value of a request (the admin's registry routes answer 400 with
    /// it), or nil when the failure is the registry being unavailable (503): the same SQLSTATE
    /// classes that make a message malformed.
    public static func refusedValue(_ error: any Error) -> String? {
        guard let error = error as? PSQLError, error.code == .server, let info = error.serverInfo else { return nil }
        return DatabaseFault.refusal(sqlState: info[.sqlState], serverMessage: info[.message], of: "request")
    }
}
