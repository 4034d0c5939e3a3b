@testable import APNSConfig
import Testing

@Suite("value syntax")
struct ValueSyntaxTests {
    @Test(arguments: [
        ("10s", Duration.seconds(10)), ("1m", .seconds(60)), ("5m", .seconds(300)), ("1h30m", .seconds(5400)),
        ("250ms", .milliseconds(250)), ("1.5s", .milliseconds(1500)), ("0", .zero), ("0s", .zero),
        ("2h", .seconds(7200)), ("1m30s", .seconds(90)), (".5s", .milliseconds(500)), ("1s500ms", .milliseconds(1500)),
    ])
    func durations(text: String, expected: Duration) throws {
        #expect(try ValueSyntax.duration(text) == expected)
    }

    @Test(arguments: ["10x", "", "s", "10", "1.s", "-1s", "10 s", "1d", "ms10", "99999999999999h"])
    func badDurations(text: String) {
        #expect(throws: ValueProblem.self) { try ValueSyntax.duration(text) }
    }

    @Test func lists() throws {
        #expect(try ValueSyntax.list("10s, 1m,5m ,  15m") == ["10s", "1m", "5m", "15m"])
        #expect(try ValueSyntax.list("one") == ["one"])
        #expect(try ValueSyntax.list("") == [])
        #expect(throws: ValueProblem.self) { try ValueSyntax.list("a,,b") }
        #expect(throws: ValueProblem.self) { try ValueSyntax.list("a,") }
    }

    @Test(arguments: [("true", true), ("YES", true), ("on", true), ("1", true), ("false", false), ("No", false), ("off", false), ("0", false)])
    func booleans(text: String, expected: Bool) throws {
        #expect(try ValueSyntax.bool(text) == expected)
    }

    @Test func integersAndHostPort() throws {
        #expect(try ValueSyntax.int("500", in: 1...65535) == 500)
        #expect(throws: ValueProblem.self) { try ValueSyntax.int("0", in: 1...65535) }
        #expect(throws: ValueProblem.self) { try ValueSyntax.int("1e3", in: 1...65535) }
        for (text, host, port) in [("127.0.0.1:8080", "127.0.0.1", 8080), ("[::1]:0", "::1", 0), ("localhost:9000", "localhost", 9000)] {
            let parsed = try ValueSyntax.hostPort(text, portRange: 0...65535)
            #expect(parsed.host == host)
            #expect(parsed.port == port)
        }
        for bad in ["8080", ":8080", "host:", "host:70000", "::1:80", "[::1]80", "a b:1"] {
            #expect(throws: ValueProblem.self, "\(bad)") { try ValueSyntax.hostPort(bad, portRange: 0...65535) }
        }
    }

    @Test func passwordsAreMasked() {
        #expect(AMQPSettings.maskingPassword("amqp://guest:guest@127.0.0.1:5682/%2f") == "amqp://guest:***@127.0.0.1:5682/%2f")
        #expect(AMQPSettings.maskingPassword("amqps://u:p@ss:w@host/vh") == "amqps://u:***@host/vh")
        #expect(AMQPSettings.maskingPassword("amqp://host:5672/") == "amqp://host:5672/")
        #expect(AMQPSettings.maskingPassword("amqp://user@host") == "amqp://user@host")
    }

    /// Masking stopped at the first "/", "?" or "#", which a password may hold, and
    /// only looked at a URL at the start of the text.
    @Test func theWholePasswordIsMaskedInEveryURL() {
        #expect(AMQPSettings.maskingPassword("amqp://u:pa/ss@host/vh") == "amqp://u:***@host/vh")
        #expect(AMQPSettings.maskingPassword("amqps://u:a?b#c/d@host:5671/%2f") == "amqps://u:***@host:5671/%2f")
        #expect(AMQPSettings.maskingPassword("postgres://app:s/e?c#r@db.example.com/reg?sslmode=verify-full")
            == "postgres://app:***@db.example.com/reg?sslmode=verify-full")
        let message = #"could not connect to "amqp://a:x/y@one" nor amqps://b:p?q@two:5671/vh: refused"#
        let masked = AMQPSettings.maskingPassword(message)
        #expect(masked == #"could not connect to "amqp://a:***@one" nor amqps://b:***@two:5671/vh: refused"#)
        for secret in ["x/y", "p?q"] { #expect(!masked.contains(secret)) }
        #expect(AMQPSettings.maskingPassword("no url here") == "no url here")
    }

    @Test func retryDelaySchedule() {
        let retry = RetrySettings(delays: [.seconds(1), .seconds(2)], maxAttempts: 4)
        #expect(retry.delay(afterAttempt: 1) == .seconds(1))
        #expect(retry.delay(afterAttempt: 2) == .seconds(2))
        #expect(retry.delay(afterAttempt: 3) == .seconds(2))
        #expect(retry.delay(afterAttempt: 4) == nil)
        #expect(RetrySettings().delay(afterAttempt: 5) == .seconds(900))
        #expect(RetrySettings().delay(afterAttempt: 6) == nil)
    }
}
