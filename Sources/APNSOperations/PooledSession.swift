import AMQPClient
import Logging

/// One broker connection kept open for an admin server's side-effect-free reads (queue depths,
/// the hand-back checks after a listing, pause markers), instead of a new connection for each.
/// Made on first use; once up it reconnects by itself (`AMQPConnection`). A first connect that
/// fails is tried again by the next caller.
public actor PooledConnection {
    let configuration: AMQPConfiguration
    let logger: Logger
    private var connection: AMQPConnection?
    private var connecting: Task<AMQPConnection, any Error>?

    public init(configuration: AMQPConfiguration, logger: Logger) {
        self.configuration = configuration
        self.logger = logger
    }

    public func get() async throws -> AMQPConnection {
        if let connection { return connection }
        // Callers that arrive while the connect is under way share it (the actor is reentrant
        // across the await, so a second caller would otherwise open a second connection).
        if let connecting { return try await connecting.value }
        let configuration = self.configuration
        let logger = self.logger
        let attempt = Task { try await AMQPConnection.connect(configuration: configuration, logger: logger) }
        connecting = attempt
        defer { connecting = nil }
        let made = try await attempt.value
        connection = made
        return made
    }

    /// Closes the connection if one was made; a later `get()` makes a new one.
    public func close() async {
        if let connection { await connection.close() }
        connection = nil
    }
}
