import APNSConfig
import Foundation
import Testing

/// Other peers: `sslrootcert` for PostgreSQL, and the start-up warnings for connections to a
/// non-loopback peer that may go plaintext or do not verify (broker and database).
@Suite("peer security")
struct PeerSecurityTests {
    static func configuration(amqp: [String], registry: String? = nil) throws -> WorkerConfiguration {
        var configuration = WorkerConfiguration(
            amqp: AMQPSettings(urls: amqp),
            bundles: [BundleConfiguration(bundleID: "com.example.app", auth: .token(teamID: "TEAM123456", keyID: "KEY1234567", tokenKeyFile: "/k.p8"))])
        if let registry { configuration.registry = RegistrySettings(url: try PostgresURL(parsing: registry)) }
        return configuration
    }

    @Test func sslRootCertIsReadAsLibpqDoes() throws {
        let url = try PostgresURL(parsing: "postgres://u:p@db.example.com/apns?sslmode=verify-full&sslrootcert=/etc/ca.pem")
        #expect(url.sslMode == .verifyFull && url.sslRootCert == "/etc/ca.pem" && url.rootCertificateFile == "/etc/ca.pem")
        #expect(url.verifiesCertificate)
        // With a root certificate, even require (and prefer) verify the chain, as in libpq.
        #expect(try PostgresURL(parsing: "postgres://u:p@db/apns?sslmode=require&sslrootcert=ca.pem").verifiesCertificate)
        #expect(try PostgresURL(parsing: "postgres://u:p@db/apns?sslmode=require").verifiesCertificate == false)
        #expect(try PostgresURL(parsing: "postgres://u:p@db/apns?sslmode=disable&sslrootcert=ca.pem").verifiesCertificate == false)
        #expect(try PostgresURL(parsing: "postgres://u:p@db/apns?sslmode=verify-ca").verifiesCertificate)
        // system: the system's roots, only with a host name check (libpq 16).
        let system = try PostgresURL(parsing: "postgres://u:p@db/apns?sslmode=verify-full&sslrootcert=system")
        #expect(system.rootCertificateFile == nil && system.verifiesCertificate)
        #expect(throws: PostgresURLError.self) { try PostgresURL(parsing: "postgres://u:p@db/apns?sslmode=require&sslrootcert=system") }
        #expect(throws: PostgresURLError.self) { try PostgresURL(parsing: "postgres://u:p@db/apns?sslrootcert=") }
    }

    @Test func plaintextOrUnverifiedPeersBeyondLoopbackAreWarnedAbout() throws {
        let quiet = [
            try Self.configuration(amqp: ["amqp://u:p@127.0.0.1:5672/%2f", "amqp://u:p@localhost/%2f", "amqps://u:p@rabbit.example.com/%2f", "AMQPS://u:p@rabbit.example.com/%2f"]),
            try Self.configuration(amqp: ["amqps://u:p@rabbit/%2f"], registry: "postgres://u:p@db.example.com/apns?sslmode=verify-full&sslrootcert=/ca.pem"),
            try Self.configuration(amqp: ["amqps://u:p@rabbit/%2f"], registry: "postgres://u:p@db.example.com/apns?sslmode=verify-ca"),
            try Self.configuration(amqp: ["amqps://u:p@rabbit/%2f"], registry: "postgres://u:p@127.0.0.1/apns?sslmode=disable"),
        ]
        // The host is read by hand (no URLComponents, so no ICU): IPv6 literals, percent-encoding and
        // user info with '@' or ':' are read as the AMQP client reads them, and so are '?' and '#'
        // before the path, which end nothing for the client (they did for a generic URL reader:
        // no warning for a plaintext connection to rabbit.example.com; Fuzz:FuzzPeerHost).
        let loopbackSpellings = try Self.configuration(amqp: [
            "amqp://u:p@[::1]:5672/%2f", "amqp://u:p@%6Cocalhost/%2f", "amqp://u%40x:p%3Aq@127.0.0.1", "amqp://localhost:5672",
            "amqp://rabbit.example.com?@127.0.0.1/%2f",
        ])
        #expect(PeerSecurity.warnings(loopbackSpellings).isEmpty)
        let remoteSpellings = try Self.configuration(amqp: [
            "amqp://u:p@[2001:db8::1]:5672/%2f", "amqp://u:p@127.0.0.1@rabbit.example.com/%2f", "amqp://rabbit.example.com",
            "amqp://u:p@127.0.0.1?@rabbit.example.com/%2f", "amqp://127.0.0.1#@rabbit.example.com",
            // A scheme in any case is the client's plaintext `amqp` (RFC 3986 §3.1).
            "AMQP://u:p@rabbit.example.com/%2f",
        ])
        #expect(PeerSecurity.warnings(remoteSpellings).count == 6)
        for configuration in quiet { #expect(PeerSecurity.warnings(configuration).isEmpty, "\(configuration.amqp.urls)") }

        let broker = PeerSecurity.warnings(try Self.configuration(amqp: ["amqps://u:p@a/%2f", "amqp://u:hunter2@rabbit-2.internal:5672/%2f"]))
        #expect(broker.count == 1)
        #expect(broker.first?.contains("amqp://u:***@rabbit-2.internal:5672/%2f: plaintext AMQP to a non-loopback broker") == true)
        #expect(broker.allSatisfy { !$0.contains("hunter2") })

        for (mode, expected) in [
            ("disable", "plaintext to a non-loopback database"), ("allow", "falls back to plaintext"), ("prefer", "falls back to plaintext"),
            ("require", "verifies no certificate"),
        ] {
            let warnings = PeerSecurity.warnings(
                try Self.configuration(amqp: ["amqps://u:p@a/%2f"], registry: "postgres://u:hunter2@db.example.com/apns?sslmode=\(mode)"))
            #expect(warnings.count == 1 && warnings[0].hasPrefix("[registry] url postgres://u:***@db.example.com"), "\(mode)")
            #expect(warnings.first?.contains(expected) == true, "\(mode): \(warnings)")
            #expect(!warnings.joined().contains("hunter2"))
        }
        // The default (no sslmode) is prefer.
        let defaulted = PeerSecurity.warnings(try Self.configuration(amqp: ["amqps://u:p@a/%2f"], registry: "postgres://u:p@db.example.com/apns"))
        #expect(defaulted.count == 1)
        // require with a CA file verifies: no warning.
        #expect(PeerSecurity.warnings(
            try Self.configuration(amqp: ["amqps://u:p@a/%2f"], registry: "postgres://u:p@db.example.com/apns?sslmode=require&sslrootcert=/ca.pem")).isEmpty)
    }
}
