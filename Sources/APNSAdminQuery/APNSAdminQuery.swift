/// APNSAdminQuery: the admin server's query parameters, parsed as pure functions (`AdminQuery`).
/// Used only by `APNSAdmin`; a module of its own so that its fuzz target (Fuzz/FuzzAdminQuery)
/// builds without Hummingbird, PostgresNIO and the rest of what the admin serves.
public enum APNSAdminQueryModule {}
