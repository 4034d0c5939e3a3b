/// `apns-worker check-config FILE`: validates a configuration file, credential files included,
/// and prints a short summary (exit 0) or the one-line error on stderr (exit 1).
import APNSConfig
import APNSModel
import ArgumentParser
import Foundation

struct CheckConfigCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "check-config",
        abstract: "Validate a configuration file and the credential files it names.",
        discussion: """
            Reads FILE and the APNS_WORKER_<SECTION>_<KEY> environment overrides exactly as \
            `apns-worker run` does, opens every key, certificate and CA file, and prints a \
            summary with passwords masked. On a problem, prints one line naming the file, \
            line and key to stderr and exits 1.
            """
    )

    @Argument(help: "The configuration file.")
    var file: String

    @Flag(help: "Check syntax and values only; do not open credential files (for shipped examples).")
    var skipCredentials = false

    func run() throws {
        do {
            let configuration = try ConfigurationLoader.load(
                path: file, credentials: skipCredentials ? .skipFiles : .verifyFiles)
            print("\(file): OK\(skipCredentials ? " (credential files not checked)" : "")")
            for line in configuration.summaryLines { print(line) }
            if !skipCredentials {
                // The same fingerprint the admin page shows for the configuration in force: equal
                // when the running worker applied this file and these credential files.
                let loaded = try LoadedConfiguration.read(path: file)
                print("read at \(RFC3339.string(from: loaded.loadedAt)), fingerprint \(loaded.fingerprint) (compare the admin page's configuration in force)")
            }
            for warning in PeerSecurity.warnings(configuration) { print("warning: insecure connection: \(warning)") }
        } catch {
            FileHandle.standardError.write(Data("\(error)\n".utf8))
            throw ExitCode.failure
        }
    }
}
