import APNSConfig
import Foundation
import Testing

@Suite("credential files")
struct CredentialTests {
    /// A token bundle and a certificate bundle whose files are named by the arguments.
    static func config(tokenKey: String, certFile: String, keyFile: String, caFile: String? = nil) -> String {
        """
        [amqp]
        url = amqp://guest:guest@127.0.0.1:5672/%2f

        [apns "com.example.token"]
        teamId = TEAM123456
        keyId = KEY1234567
        tokenKeyFile = \(tokenKey)

        [apns "com.example.cert"]
        certFile = \(certFile)
        keyFile = \(keyFile)
        \(caFile.map { "caFile = \($0)" } ?? "")
        """
    }

    @Test func validCredentialsPass() throws {
        let directory = try TempDirectory()
        let credentials = try TestCredentials()
        try directory.write("keys/AuthKey_KEY1234567.p8", credentials.p8)
        try directory.write("keys/client.pem", credentials.certificatePEM + credentials.certificatePEM)  // a chain
        try directory.write("keys/client.key", credentials.certificateKeyPEM)
        try directory.write("keys/ca.pem", credentials.certificatePEM)
        let text = Self.config(
            tokenKey: "keys/AuthKey_KEY1234567.p8", certFile: "keys/client.pem", keyFile: "keys/client.key", caFile: "keys/ca.pem")
        let configuration = try loadConfig(text, in: directory, credentials: .verifyFiles)
        #expect(configuration.bundles.map(\.auth.kindName) == ["token", "certificate"])
        #expect(configuration.bundles[1].caFile == directory.path + "/keys/ca.pem")
    }

    enum Mutation: String, CaseIterable, Sendable {
        case missingTokenKey, tokenKeyIsCertificate, tokenKeyIsP384, tokenKeyOfOtherKeyID, tokenKeyIsDER
        case certificateIsKey, keyIsCertificate, keyDoesNotMatch, keyIsEncrypted, missingCertificate
        case caFileHasNoCertificate, keyFileIsDirectory
    }

    /// Each broken file gives one line naming the file, line and key at fault.
    @Test(arguments: Mutation.allCases)
    func brokenCredentials(_ mutation: Mutation) throws {
        let directory = try TempDirectory()
        let credentials = try TestCredentials()
        var tokenKey = "AuthKey_KEY1234567.p8"
        var certFile = "client.pem"
        var keyFile = "client.key"
        var caFile: String?
        try directory.write("AuthKey_KEY1234567.p8", credentials.p8)
        try directory.write("client.pem", credentials.certificatePEM)
        try directory.write("client.key", credentials.certificateKeyPEM)
        let line: Int
        let key: String
        let section: String
        let message: String
        switch mutation {
        case .missingTokenKey:
            tokenKey = "absent.p8"
            (line, key, section, message) = (7, "tokenKeyFile", "token", "\(directory.path)/absent.p8 does not exist")
        case .tokenKeyIsCertificate:
            tokenKey = "cert.p8"
            try directory.write("cert.p8", credentials.certificatePEM)
            (line, key, section, message) = (7, "tokenKeyFile", "token", "\(directory.path)/cert.p8 is not a PEM EC P-256 private key (an APNs .p8 auth key)")
        case .tokenKeyIsP384:
            tokenKey = "p384.p8"
            try directory.write("p384.p8", credentials.p384KeyPEM)
            (line, key, section, message) = (7, "tokenKeyFile", "token", "\(directory.path)/p384.p8 is not a PEM EC P-256 private key")
        case .tokenKeyOfOtherKeyID:
            tokenKey = "AuthKey_OTHER12345.p8"
            try directory.write("AuthKey_OTHER12345.p8", credentials.p8)
            (line, key, section, message) = (7, "tokenKeyFile", "token", "\(directory.path)/AuthKey_OTHER12345.p8 is the key of OTHER12345, not of keyId KEY1234567")
        case .tokenKeyIsDER:
            tokenKey = "der.p8"
            try directory.write("der.p8", credentials.certificateDER)
            (line, key, section, message) = (7, "tokenKeyFile", "token", "\(directory.path)/der.p8 is not a PEM file")
        case .certificateIsKey:
            certFile = "client.key"
            (line, key, section, message) = (10, "certFile", "cert", "\(directory.path)/client.key is not a PEM X.509 certificate")
        case .keyIsCertificate:
            keyFile = "client.pem"
            (line, key, section, message) = (11, "keyFile", "cert", "\(directory.path)/client.pem is not a PEM private key")
        case .keyDoesNotMatch:
            keyFile = "other.key"
            try directory.write("other.key", credentials.otherKeyPEM)
            (line, key, section, message) = (11, "keyFile", "cert", "\(directory.path)/other.key does not match the certificate in certFile (line 10)")
        case .keyIsEncrypted:
            keyFile = "enc.key"
            try directory.write("enc.key", "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIB\n-----END ENCRYPTED PRIVATE KEY-----\n")
            (line, key, section, message) = (11, "keyFile", "cert", "\(directory.path)/enc.key is encrypted")
        case .missingCertificate:
            certFile = "/nonexistent/client.pem"
            (line, key, section, message) = (10, "certFile", "cert", "/nonexistent/client.pem does not exist")
        case .caFileHasNoCertificate:
            caFile = "ca.pem"
            try directory.write("ca.pem", credentials.otherKeyPEM)
            (line, key, section, message) = (12, "caFile", "cert", "\(directory.path)/ca.pem holds no PEM certificate")
        case .keyFileIsDirectory:
            keyFile = "sub"
            try FileManager.default.createDirectory(atPath: directory.path + "/sub", withIntermediateDirectories: true)
            (line, key, section, message) = (11, "keyFile", "cert", "\(directory.path)/sub is a directory")
        }
        let text = Self.config(tokenKey: tokenKey, certFile: certFile, keyFile: keyFile, caFile: caFile)
        // Without credential checks the same file is fine: only the files are wrong.
        _ = try loadConfig(text, in: directory, credentials: .skipFiles)
        let error = try #require(try loadError(text, in: directory, credentials: .verifyFiles))
        #expect(error.kind == .credential)
        let prefix = "\(directory.path)/test.conf:\(line): [apns \"com.example.\(section)\"] \(key): \(message)"
        #expect(error.description.hasPrefix(prefix), "\(error)")
    }

    @Test func amqpCAFileIsChecked() throws {
        let directory = try TempDirectory()
        let credentials = try TestCredentials()
        try directory.write("AuthKey_KEY1234567.p8", credentials.p8)
        let text = minimalConfig.replacingOccurrences(of: "%2f\n", with: "%2f\ncaFile = missing-ca.pem\n")
        let error = try #require(try loadError(text, in: directory, credentials: .verifyFiles))
        #expect(error.description == "\(directory.path)/test.conf:3: [amqp] caFile: \(directory.path)/missing-ca.pem does not exist")
        // From the environment the location is the variable, and the path is relative to the working directory.
        let fromEnvironment = try #require(
            try loadError(
                minimalConfig, in: directory, environment: ["APNS_WORKER_AMQP_CAFILE": "/nonexistent/ca.pem"],
                credentials: .verifyFiles))
        #expect(fromEnvironment.description == "environment APNS_WORKER_AMQP_CAFILE: [amqp] caFile: /nonexistent/ca.pem does not exist")
    }

    /// config/local.conf against credentials laid out as the simulator writes them.
    @Test func localConfigurationWithGeneratedCredentials() throws {
        let directory = try TempDirectory()
        let credentials = try TestCredentials()
        try credentials.writeSimulatorSet(to: directory, under: ".local/credentials")
        let shipped = try String(contentsOf: repositoryRoot.appendingPathComponent("config/local.conf"), encoding: .utf8)
        try directory.write("config/local.conf", shipped)
        let configuration = try ConfigurationLoader.load(
            path: directory.path + "/config/local.conf", environment: [:], credentials: .verifyFiles)
        #expect(configuration.amqp.urls == ["amqp://guest:guest@127.0.0.1:5682/%2f"])
        let app = try #require(configuration.bundles.first { $0.bundleID == "com.example.app" })
        #expect(app.transport == .http2)
        #expect(app.auth == .token(teamID: "TEAM123456", keyID: "KEY1234567", tokenKeyFile: directory.path + "/.local/credentials/AuthKey_KEY1234567.p8"))
        #expect(app.endpoint(for: app.environment) == ("127.0.0.1", 8443))
        #expect(app.caFile == directory.path + "/.local/credentials/ca.pem")
        #expect(configuration.bundles.map(\.bundleID) == ["com.example.app", "com.example.legacy"])
        let legacy = try #require(configuration.bundles.first { $0.bundleID == "com.example.legacy" })
        #expect(legacy.transport == .binary)
        #expect(legacy.auth == .certificate(
            certFile: directory.path + "/.local/credentials/client.pem", keyFile: directory.path + "/.local/credentials/client.key"))
        #expect(legacy.endpoint(for: legacy.environment) == ("127.0.0.1", 2195))
        #expect(legacy.caFile == directory.path + "/.local/credentials/ca.pem")
        #expect(legacy.binaryHoldWindow == .seconds(1))
        #expect(legacy.connections == 1)
    }

    @Test func localConfigurationWithoutCredentialsNamesTheMissingFile() throws {
        let directory = try TempDirectory()
        let shipped = try String(contentsOf: repositoryRoot.appendingPathComponent("config/local.conf"), encoding: .utf8)
        let path = try directory.write("config/local.conf", shipped)
        #expect {
            try ConfigurationLoader.load(path: path, environment: [:], credentials: .verifyFiles)
        } throws: { error in
            let text = "\(error)"
            return text.hasPrefix("\(path):") && text.contains("[apns \"com.example.app\"] tokenKeyFile: ")
                && text.hasSuffix("/.local/credentials/AuthKey_KEY1234567.p8 does not exist")
        }
    }

    /// The shipped production example parses (its credential paths do not exist here).
    @Test func shippedExampleParses() throws {
        let configuration = try ConfigurationLoader.load(
            path: repositoryRoot.appendingPathComponent("config/apns-worker.conf").path, environment: [:],
            credentials: .skipFiles)
        #expect(configuration.amqp.urls.count == 2)
        // The sample production broker is reached over TLS, with no start-up warning.
        #expect(configuration.amqp.urls.allSatisfy { $0.hasPrefix("amqps://") })
        #expect(PeerSecurity.warnings(configuration).isEmpty)
        #expect(configuration.retry == RetrySettings())
        #expect(configuration.worker == WorkerSettings())
        #expect(configuration.admin == AdminSettings())
        #expect(configuration.bundles.map(\.bundleID) == ["com.omnigroup.OmniFocus2.iPad", "com.omnigroup.OmniFocus2.iPhone"])
        #expect(configuration.bundles.map(\.transport) == [.http2, .binary])
        #expect(configuration.bundles.map(\.auth.kindName) == ["token", "certificate"])
    }
}
