/// The change between two readings of a configuration (contract §3, changes while running) as
/// pure logic: real files in a temporary directory, real credentials, no socket.
import APNSConfig
import APNSModel
import Foundation
import Testing

@Suite("configuration change while running")
struct ConfigurationChangeTests {
    /// A directory with two token keys and a certificate pair, and a configuration writer.
    struct Setup {
        let directory: TempDirectory
        let credentials: TestCredentials
        let path: String

        init() throws {
            directory = try TempDirectory()
            credentials = try TestCredentials()
            try directory.write("keys/AuthKey_KEYAAAAAAA.p8", credentials.p8)
            try directory.write("keys/AuthKey_KEYBBBBBBB.p8", credentials.otherKeyPEM)
            try directory.write("keys/client.pem", credentials.certificatePEM)
            try directory.write("keys/client.key", credentials.certificateKeyPEM)
            path = directory.path + "/worker.conf"
        }

        /// Writes the configuration and reads it as the worker does (credentials checked).
        func read(_ text: String) throws -> LoadedConfiguration {
            try directory.write("worker.conf", text)
            return try LoadedConfiguration.read(path: path, environment: [:])
        }
    }

    static func config(
        bundles: [String], retry: String = "10s, 1m", amqpLines: String = "", adminLines: String = "", workerLines: String = "",
        extra: [String: String] = [:]
    ) -> String {
        var text = """
            [amqp]
            url = amqp://guest:guest@127.0.0.1:5672/%2f
            \(amqpLines)

            [retry]
            delays = \(retry)

            [admin]
            listen = 127.0.0.1:8080
            \(adminLines)

            [worker]
            requestTimeout = 10s
            \(workerLines)

            """
        for bundle in bundles {
            text += """
                [apns "\(bundle)"]
                \(extra[bundle] ?? "teamId = TEAM123456\nkeyId = KEYAAAAAAA\ntokenKeyFile = keys/AuthKey_KEYAAAAAAA.p8")

                """
        }
        return text
    }

    @Test func theSameFileReadAgainIsNoChange() throws {
        let setup = try Setup()
        let first = try setup.read(Self.config(bundles: ["com.example.a", "com.example.b"]))
        // Rewritten with the same bytes, the key file too: nothing changed.
        try setup.directory.write("keys/AuthKey_KEYAAAAAAA.p8", setup.credentials.p8)
        let second = try setup.read(Self.config(bundles: ["com.example.a", "com.example.b"]))
        let change = first.change(to: second)
        #expect(change.isEmpty)
        #expect(!change.needsApplying)
        #expect(first.fingerprint == second.fingerprint)
    }

    @Test func bundlesAddedAndRemovedAreNamedInFileOrder() throws {
        let setup = try Setup()
        let before = try setup.read(Self.config(bundles: ["com.example.a", "com.example.b"]))
        let after = try setup.read(Self.config(bundles: ["com.example.c", "com.example.a", "com.example.d"]))
        let change = before.change(to: after)
        #expect(change.added.map(\.bundleID) == ["com.example.c", "com.example.d"])
        #expect(change.removed == ["com.example.b"])
        // Bundle a moved down the file (its section's line changed): not a change of a.
        #expect(change.reconnected.isEmpty)
        #expect(change.updated.isEmpty)
        #expect(change.restartOnly.isEmpty)
        #expect(change.needsApplying)
        #expect(change.summary == ["added [apns \"com.example.c\"]", "added [apns \"com.example.d\"]", "removed [apns \"com.example.b\"]"])
    }

    @Test func aKeyRotatedInPlaceIsACredentialChange() throws {
        let setup = try Setup()
        let before = try setup.read(Self.config(bundles: ["com.example.a"]))
        // Same path, other content: what a Kubernetes secret update looks like.
        try setup.directory.write("keys/AuthKey_KEYAAAAAAA.p8", setup.credentials.otherKeyPEM)
        let after = try setup.read(Self.config(bundles: ["com.example.a"]))
        let change = before.change(to: after)
        #expect(change.reconnected.map(\.bundleID) == ["com.example.a"])
        #expect(change.reconnected.first?.keys == ["tokenKeyFile (content)"])
        #expect(change.added.isEmpty && change.removed.isEmpty && change.updated.isEmpty)
        #expect(before.fingerprint != after.fingerprint)
    }

    @Test func aNewKeyIdAndFileAreACredentialChange() throws {
        let setup = try Setup()
        let before = try setup.read(Self.config(bundles: ["com.example.a", "com.example.b"]))
        let after = try setup.read(
            Self.config(
                bundles: ["com.example.a", "com.example.b"],
                extra: ["com.example.a": "teamId = TEAM123456\nkeyId = KEYBBBBBBB\ntokenKeyFile = keys/AuthKey_KEYBBBBBBB.p8"]))
        let change = before.change(to: after)
        #expect(change.reconnected.map(\.bundleID) == ["com.example.a"])
        #expect(change.reconnected.first?.keys == ["keyId", "tokenKeyFile"])
        #expect(change.reconnected.first?.old.auth == .token(teamID: "TEAM123456", keyID: "KEYAAAAAAA", tokenKeyFile: setup.directory.path + "/keys/AuthKey_KEYAAAAAAA.p8"))
    }

    /// A key's scope is what each bundle's router refuses by: a change to it rebuilds the
    /// bundle's unit, and the log line names the key, not "other keys".
    @Test func aKeyScopeChangeNamesItsKeys() throws {
        let setup = try Setup()
        let key = "teamId = TEAM123456\nkeyId = KEYAAAAAAA\ntokenKeyFile = keys/AuthKey_KEYAAAAAAA.p8\nkeyEnvironment = production\n"
        let before = try setup.read(Self.config(bundles: ["com.example.a"], extra: ["com.example.a": key + "keyTopics = com.example.a"]))
        let after = try setup.read(
            Self.config(bundles: ["com.example.a"], extra: ["com.example.a": key + "keyTopics = com.example.a, com.example.a.voip"]))
        let change = before.change(to: after)
        #expect(change.reconnected.map(\.bundleID) == ["com.example.a"])
        #expect(change.reconnected.first?.keys == ["keyTopics"])
        #expect(change.summary == ["[apns \"com.example.a\"] keyTopics"])
        let both = try setup.read(Self.config(bundles: ["com.example.a"]))
        #expect(after.change(to: both).reconnected.first?.keys == ["keyEnvironment", "keyTopics"])
    }

    @Test func certificateFilesAndEndpointsAreConnectionChanges() throws {
        let setup = try Setup()
        let certificate = "certFile = keys/client.pem\nkeyFile = keys/client.key"
        let before = try setup.read(Self.config(bundles: ["com.example.a", "com.example.b"], extra: ["com.example.a": certificate]))
        // The certificate pair replaced in place (another pair, same paths), and b's endpoint.
        let other = try TestCredentials()
        try setup.directory.write("keys/client.pem", other.certificatePEM)
        try setup.directory.write("keys/client.key", other.certificateKeyPEM)
        let endpoint = "teamId = TEAM123456\nkeyId = KEYAAAAAAA\ntokenKeyFile = keys/AuthKey_KEYAAAAAAA.p8\nhost = 127.0.0.1\nport = 8443"
        let after = try setup.read(
            Self.config(bundles: ["com.example.a", "com.example.b"], extra: ["com.example.a": certificate, "com.example.b": endpoint]))
        let change = before.change(to: after)
        #expect(change.reconnected.map(\.bundleID) == ["com.example.a", "com.example.b"])
        #expect(change.reconnected.map(\.keys) == [["certFile (content)", "keyFile (content)"], ["host", "port"]])
    }

    @Test func switchingFromTokenToCertificateIsNamed() throws {
        let setup = try Setup()
        let before = try setup.read(Self.config(bundles: ["com.example.a"]))
        let after = try setup.read(
            Self.config(bundles: ["com.example.a"], extra: ["com.example.a": "certFile = keys/client.pem\nkeyFile = keys/client.key"]))
        #expect(before.change(to: after).reconnected.first?.keys == ["authentication (token → certificate)"])
    }

    @Test func rolloutKeysAreUpdatesNotReconnections() throws {
        let setup = try Setup()
        let key = "teamId = TEAM123456\nkeyId = KEYAAAAAAA\ntokenKeyFile = keys/AuthKey_KEYAAAAAAA.p8"
        let before = try setup.read(Self.config(bundles: ["com.example.a"]))
        let after = try setup.read(
            Self.config(bundles: ["com.example.a"], extra: ["com.example.a": key + "\nrolloutPercentage = 10\ndenySyncServers = sync1.example.com"]))
        let change = before.change(to: after)
        #expect(change.reconnected.isEmpty)
        #expect(change.updated.map(\.bundleID) == ["com.example.a"])
        #expect(change.updated.first?.keys == ["denySyncServers", "rolloutPercentage"])
        #expect(change.updated.first?.new.rollout.percentage == 10)
        // A rollout change with a connection change is one reconnection naming both.
        let both = try setup.read(
            Self.config(bundles: ["com.example.a"], extra: ["com.example.a": key + "\nrolloutPercentage = 20\nconnections = 4"]))
        let combined = after.change(to: both)
        #expect(combined.updated.isEmpty)
        #expect(combined.reconnected.first?.keys == ["connections", "denySyncServers", "rolloutPercentage"])
    }

    /// Contract §8's `events`, like the rollout keys: applied to jobs taken after the change.
    @Test func eventsIsReadAndItsChangeIsAnUpdate() throws {
        let setup = try Setup()
        let key = "teamId = TEAM123456\nkeyId = KEYAAAAAAA\ntokenKeyFile = keys/AuthKey_KEYAAAAAAA.p8"
        let before = try setup.read(Self.config(bundles: ["com.example.a"]))
        #expect(before.configuration.bundles.first?.events == DeliveryEventLevel.none)
        let after = try setup.read(Self.config(bundles: ["com.example.a"], extra: ["com.example.a": key + "\nevents = ends"]))
        #expect(after.configuration.bundles.first?.events == .ends)
        let change = before.change(to: after)
        #expect(change.reconnected.isEmpty)
        #expect(change.updated.first?.keys == ["events"])
        #expect(change.updated.first?.new.events == .ends)
    }

    @Test func retryIsAppliedAndTheGlobalSectionsNeedARestart() throws {
        let setup = try Setup()
        let before = try setup.read(Self.config(bundles: ["com.example.a"]))
        let after = try setup.read(
            Self.config(
                bundles: ["com.example.a"], retry: "5s, 1m", amqpLines: "prefetch = 50", adminLines: "heartbeatInterval = 10s",
                workerLines: "probeInterval = 5s"))
        let change = before.change(to: after)
        #expect(change.retryChanged)
        #expect(change.restartOnly == ["[amqp]", "[admin]", "[worker]"])
        #expect(change.summary == ["[retry]"])
        #expect(change.needsApplying)

        // What is in force afterwards: the new retry, the old restart-only sections; read
        // again, the same file reports the restart-only sections still waiting, nothing else.
        let inForce = before.applying(after)
        #expect(inForce.configuration.retry == after.configuration.retry)
        #expect(inForce.configuration.amqp == before.configuration.amqp)
        #expect(inForce.configuration.admin == before.configuration.admin)
        #expect(inForce.configuration.worker == before.configuration.worker)
        let again = inForce.change(to: after)
        #expect(again.restartOnly == ["[amqp]", "[admin]", "[worker]"])
        #expect(!again.needsApplying)
    }

    @Test func aRestartOnlyChangeAloneAppliesNothing() throws {
        let setup = try Setup()
        let before = try setup.read(Self.config(bundles: ["com.example.a"]))
        let after = try setup.read(Self.config(bundles: ["com.example.a"], amqpLines: "url = amqp://guest:guest@127.0.0.2:5672/%2f"))
        let change = before.change(to: after)
        #expect(change.restartOnly == ["[amqp]"])
        #expect(!change.needsApplying)
        #expect(change.summary.isEmpty)
    }

    @Test func removingBundlesLeavesThemToBeAddedByTheNextRead() throws {
        let setup = try Setup()
        let before = try setup.read(Self.config(bundles: ["com.example.a"]))
        let after = try setup.read(Self.config(bundles: ["com.example.a", "com.example.b"]))
        let failed = before.applying(after).removingBundles(["com.example.b"])
        #expect(failed.change(to: after).added.map(\.bundleID) == ["com.example.b"])
    }

    @Test func namedFilesAreEveryCredentialOnce() throws {
        let setup = try Setup()
        let loaded = try setup.read(
            Self.config(
                bundles: ["com.example.a", "com.example.b"],
                extra: ["com.example.b": "certFile = keys/client.pem\nkeyFile = keys/client.key\ncaFile = keys/client.pem"]))
        let root = setup.directory.path + "/keys/"
        #expect(LoadedConfiguration.namedFiles(loaded.configuration) == [root + "AuthKey_KEYAAAAAAA.p8", root + "client.pem", root + "client.key"])
        #expect(Set(loaded.fileDigests.keys) == Set(LoadedConfiguration.namedFiles(loaded.configuration)))
    }
}

@Suite("bounded file reads")
struct BoundedFileTests {
    @Test func aFileOverItsBoundIsAnErrorNotARead() throws {
        let directory = try TempDirectory()
        let path = try directory.write("big.p8", Data(repeating: 0x41, count: 2048))
        #expect(throws: BoundedFile.Problem.tooLarge(limit: 1024)) { try BoundedFile.read(path, limit: 1024) }
        #expect(try BoundedFile.read(path, limit: 2048).count == 2048)
        #expect(BoundedFile.digest(path, limit: 1024) == "unreadable: is larger than 1 KiB")
        #expect(throws: BoundedFile.Problem.missing) { try BoundedFile.read(directory.path + "/absent", limit: 1) }
        #expect(throws: BoundedFile.Problem.directory) { try BoundedFile.read(directory.path, limit: 1) }
    }

    @Test func anOversizedConfigurationOrCredentialFileIsAOneLineError() throws {
        let directory = try TempDirectory()
        let huge = String(repeating: "; padding\n", count: BoundedFile.configurationLimit / 10 + 1)
        let error = try #require(try loadError(minimalConfig + "\n" + huge, in: directory))
        #expect(error.description == "\(directory.path)/test.conf: cannot read the file (it is larger than 1024 KiB)")

        let credentials = try TestCredentials()
        try directory.write("AuthKey_KEY1234567.p8", credentials.p8 + String(repeating: "\n", count: BoundedFile.credentialLimit))
        let keyError = try #require(try loadError(minimalConfig, in: directory, credentials: .verifyFiles))
        #expect(keyError.description.hasSuffix("AuthKey_KEY1234567.p8 is larger than 1024 KiB"))
        #expect(!keyError.description.contains("\n"))
    }

    @Test func aSymlinkIsFollowedAsItIsNow() throws {
        // Kubernetes: the file is a link through `..data`, swapped to a new directory.
        let directory = try TempDirectory()
        try directory.write("..2026_01/key.p8", "first")
        try directory.write("..2026_02/key.p8", "second")
        let manager = FileManager.default
        try manager.createSymbolicLink(atPath: directory.path + "/..data", withDestinationPath: "..2026_01")
        try manager.createSymbolicLink(atPath: directory.path + "/key.p8", withDestinationPath: "..data/key.p8")
        let before = BoundedFile.digest(directory.path + "/key.p8", limit: 100)
        try manager.createSymbolicLink(atPath: directory.path + "/..data_tmp", withDestinationPath: "..2026_02")
        // The atomic swap Kubernetes does: rename(2) of a new link over `..data`.
        #expect(rename(directory.path + "/..data_tmp", directory.path + "/..data") == 0)
        #expect(try String(decoding: BoundedFile.read(directory.path + "/key.p8", limit: 100), as: UTF8.self) == "second")
        #expect(BoundedFile.digest(directory.path + "/key.p8", limit: 100) != before)
    }
}
