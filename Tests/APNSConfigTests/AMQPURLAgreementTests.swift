import AMQPClient
import APNSConfig
import Foundation
import Testing

/// `check-config` and the AMQP client read `[amqp] url` with one reader (`AMQPURLParts`): a URL
/// the configuration loads is one the client connects with, and one the client refuses stops
/// start-up at load, with file, line and key (it passed `check-config` and failed only when the
/// worker connected: ports beyond 65535 or empty, two vhost segments, bad percent-escapes).
@Suite("AMQP URLs: the configuration and the client agree")
struct AMQPURLAgreementTests {
    static let refused = [
        "amqp://rabbit:65536/", "amqp://rabbit:99999999999999999999/", "amqp://rabbit:/", "amqp://rabbit:0/",
        "amqp://rabbit:+5672/", "amqp://rabbit:56 72/", "amqp://[::1]:/", "amqp://[::1]:65536/",
        "amqp://rabbit/prod/eu", "amqp://rabbit//", "amqp://rabbit/%2", "amqp://rabbit/%zz", "amqp://rabbit/%C3%28",
        "amqp://u%zz:p@rabbit/", "amqp://u:p%4@rabbit/", "amqp://rabbit%g1/", "amqp://[::1/", "amqp://[::1]x/",
        "http://rabbit/", "amqp:/rabbit/",
    ]
    static let accepted = [
        "amqp://rabbit", "amqp://rabbit:1/", "amqp://rabbit:65535/prod", "amqps://u:p@rabbit/%2f", "amqp://[::1]:5672/",
        "AMQPS://rabbit/", "amqp://u:p%40q@rabbit/v%2fw", "amqp://u@rabbit", "amqp://rabbit/",
    ]

    static func configLoads(_ url: String) throws -> Bool {
        let directory = try TempDirectory()
        let text = minimalConfig.replacingOccurrences(of: "url = amqp://guest:guest@127.0.0.1:5672/%2f", with: "url = \(url)")
        do {
            _ = try loadConfig(text, in: directory)
            return true
        } catch let error as ConfigurationError {
            #expect(error.description.hasPrefix("\(directory.path)/test.conf:2: [amqp] url: "), "\(error)")
            return false
        }
    }

    @Test(arguments: refused.map { ($0, false) } + accepted.map { ($0, true) })
    func bothReadTheURLAlike(url: String, accepted: Bool) throws {
        let client = Result { try AMQPURL(string: url) }
        #expect(((try? client.get()) != nil) == accepted, "the client: \(client)")
        #expect(try Self.configLoads(url) == accepted, "the configuration")
    }

    /// The client's reason is the configuration's, word for word.
    @Test func theConfigurationSaysWhatTheClientSays() throws {
        let directory = try TempDirectory()
        let text = minimalConfig.replacingOccurrences(of: "url = amqp://guest:guest@127.0.0.1:5672/%2f", with: "url = amqp://u:secret@rabbit:65536/")
        let error = try #require(try loadError(text, in: directory))
        #expect(error.description == "\(directory.path)/test.conf:2: [amqp] url: \"amqp://u:***@rabbit:65536/\" is refused by the AMQP client: the port must be 1…65535")
        #expect(throws: AMQPError.self) { try AMQPURL(string: "amqp://u:secret@rabbit:65536/") }
        do {
            _ = try AMQPURL(string: "amqp://u:secret@rabbit:65536/")
        } catch {
            #expect("\(error)".contains("the port must be 1…65535"), "\(error)")
        }
    }
}
