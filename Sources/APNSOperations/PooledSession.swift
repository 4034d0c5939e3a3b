import AMQPClient

/// One broker session kept open for an admin server's side-effect-free reads (queue depths,
/// the hand-back checks after a listing), instead of a new one for each. Opened on first use;
/// a real one (`AMQPConnection`) reconnects by itself once up. A first open that fails is
/// tried again by the next caller.
actor PooledSession {
    let sessions: any BrokerSessionOpening
    private var session: (any BrokerSession)?
    private var opening: Task<any BrokerSession, any Error>?

    init(sessions: any BrokerSessionOpening) {
        self.sessions = sessions
    }

    func get() async throws -> any BrokerSession {
        if let session { return session }
        // Callers that arrive while the open is under way share it (the actor is reentrant
        // across the await, so a second caller would otherwise open a second session).
        if let opening { return try await opening.value }
        let sessions = self.sessions
        let attempt = Task<any BrokerSession, any Error> { try await sessions.open("reads") }
        opening = attempt
        defer { opening = nil }
        let made = try await attempt.value
        session = made
        return made
    }

    /// Closes the session if one was opened; a later `get()` opens a new one.
    func close() async {
        if let session { await session.close() }
        session = nil
    }
}
