// Pure parts of AMQPClient: URL parsing, backoff, error-text parsing. No broker needed.
import Testing

@testable import AMQPClient

@Suite struct URLParsingTests {
    @Test func fullURLIsPercentDecoded() throws {
        let url = try AMQPURL(string: "amqp://us%40er:p%3Ass%2Fw@broker.example:5673/my%2Fvhost")
        #expect(url == AMQPURL(tls: false, host: "broker.example", port: 5673, user: "us@er", password: "p:ss/w", vhost: "my/vhost"))
    }

    @Test func defaultsFollowRabbitMQsURISpec() throws {
        #expect(try AMQPURL(string: "amqp://localhost") == AMQPURL(host: "localhost", port: 5672, vhost: "/"))
        #expect(try AMQPURL(string: "amqp://h/%2f").vhost == "/")
        #expect(try AMQPURL(string: "amqp://h/").vhost == "")
        #expect(try AMQPURL(string: "amqp://h/prod").vhost == "prod")
        let tls = try AMQPURL(string: "amqps://alice@h")
        #expect(tls.tls && tls.port == 5671 && tls.user == "alice" && tls.password == "guest")
    }

    /// Was: only the lower-case schemes were taken, while the configuration's check took
    /// `AMQP://` (RFC 3986 §3.1: a scheme is case-insensitive), so such a config loaded and then
    /// failed at every connect with `invalidURL`.
    @Test(arguments: [("AMQP://u:p@h:5673/v", false), ("Amqps://u:p@h:5673/v", true), ("aMqP://u:p@h:5673/v", false)])
    func theSchemeIsReadInAnyCase(_ string: String, tls: Bool) throws {
        #expect(try AMQPURL(string: string) == AMQPURL(tls: tls, host: "h", port: 5673, user: "u", password: "p", vhost: "v"))
    }

    @Test func ipv6Hosts() throws {
        let url = try AMQPURL(string: "amqp://[::1]:5682/%2f")
        #expect(url.host == "::1" && url.port == 5682)
        #expect(url.description == "amqp://guest@[::1]:5682/%2f")
    }

    /// The last two have their `@` before the scheme: the error message's redaction trapped.
    @Test(arguments: ["http://h", "amqpx://h", "AMQP:/h", "amqp://h:0", "amqp://h:70000", "amqp://h:x", "amqp://h/a/b", "amqp://h/%zz", "u:p@amqp://h", "x@amqp://h/%2f"])
    func invalidURLsAreRejected(_ string: String) {
        #expect(throws: AMQPError.self) { try AMQPURL(string: string) }
        do {
            _ = try AMQPURL(string: string)
        } catch {
            #expect(error.code == .invalidURL)
        }
    }

    @Test func descriptionAndErrorsNeverShowThePassword() throws {
        let url = try AMQPURL(string: "amqp://bob:hunter2@h:1234/v")
        #expect(!url.description.contains("hunter2"))
        do {
            _ = try AMQPURL(string: "amqp://bob:hunter2@h:99999/v")
            Issue.record("expected an error")
        } catch {
            #expect(!error.message.contains("hunter2"))
        }
    }

    @Test func configurationFromURLStrings() throws {
        let configuration = try AMQPConfiguration(urlStrings: ["amqp://a", "amqps://b/%2f"])
        #expect(configuration.urls.map(\.host) == ["a", "b"])
        #expect(configuration.heartbeat == .seconds(30))
        #expect(throws: AMQPError.self) { try AMQPConfiguration(urlStrings: []) }
    }
}

@Suite struct BackoffTests {
    @Test func nominalDelayDoublesUpToTheCap() {
        let backoff = AMQPBackoff(initial: .milliseconds(500), maximum: .seconds(30))
        #expect(backoff.nominalDelay(attempt: 0) == .milliseconds(500))
        #expect(backoff.nominalDelay(attempt: 1) == .seconds(1))
        #expect(backoff.nominalDelay(attempt: 3) == .seconds(4))
        #expect(backoff.nominalDelay(attempt: 10) == .seconds(30))
        #expect(backoff.nominalDelay(attempt: 1000) == .seconds(30))
    }

    @Test func jitterStaysBetweenHalfAndTheNominalDelay() {
        let backoff = AMQPBackoff(initial: .seconds(1), maximum: .seconds(8))
        var generator = SystemRandomNumberGenerator()
        var seen = Set<Duration>()
        for attempt in 0..<8 {
            for _ in 0..<50 {
                let delay = backoff.delay(attempt: attempt, using: &generator)
                let nominal = backoff.nominalDelay(attempt: attempt)
                #expect(delay >= nominal / 2 && delay <= nominal)
                seen.insert(delay)
            }
        }
        #expect(seen.count > 10, "jitter must spread reconnects")
    }
}

@Suite struct ErrorTests {
    @Test func inequivalentArgumentIsFoundInTheReplyText() {
        let text = "PRECONDITION_FAILED - inequivalent arg 'x-message-ttl' for queue 'q' in vhost '/': received the value '2000' of type 'long' but current is the value '1000' of type 'long'"
        #expect(AMQPError.inequivalentArgument(in: text) == "x-message-ttl")
        #expect(AMQPError.inequivalentArgument(in: "NOT_FOUND - no queue 'q'") == nil)
    }

    @Test func descriptionCarriesReplyAndLibraryStatus() {
        let error = AMQPError(.channelClosed, "publish failed", replyCode: 404, replyText: "NOT_FOUND - no exchange 'x'", libraryStatus: "a socket error occurred")
        #expect(error.description.contains("404 NOT_FOUND"))
        #expect(error.description.contains("a socket error occurred"))
        #expect(error.code == .channelClosed && !error.isTransient)
        #expect(AMQPError(.connectionLost, "x").isTransient)
    }
}
