import AMQPClient
import APNSConfig
import APNSModel
import APNSTopology
import APNSTopologyNames
import Foundation
import Testing

@Suite("configuration loader")
struct LoaderTests {
    @Test func defaults() throws {
        let directory = try TempDirectory()
        let configuration = try loadConfig(minimalConfig, in: directory)
        #expect(configuration.amqp == AMQPSettings(urls: ["amqp://guest:guest@127.0.0.1:5672/%2f"]))
        #expect(configuration.amqp.prefetch == 500)
        #expect(configuration.amqp.heartbeat == .seconds(30))
        #expect(configuration.amqp.queueType == .quorum)
        #expect(configuration.amqp.caFile == nil)
        #expect(configuration.retry.delays == [.seconds(10), .seconds(60), .seconds(300), .seconds(900), .seconds(900)])
        #expect(configuration.retry.maxAttempts == 6)
        #expect(configuration.admin.listen == ListenAddress(host: "127.0.0.1", port: 8080))
        #expect(configuration.admin.token == nil)
        #expect(configuration.worker == WorkerSettings())
        #expect(configuration.worker.shutdownDeadline == .seconds(30))
        #expect(configuration.bundles.count == 1)
        let bundle = try #require(configuration.bundles.first)
        #expect(bundle.bundleID == "com.example.app")
        #expect(bundle.transport == .http2)
        #expect(bundle.environment == .production)
        // Relative paths resolve against the directory of the configuration file.
        #expect(bundle.auth == .token(teamID: "TEAM123456", keyID: "KEY1234567", tokenKeyFile: directory.path + "/AuthKey_KEY1234567.p8"))
        #expect(bundle.connections == 2)
        #expect(bundle.rollout.isOpen)
        #expect(bundle.binaryHoldWindow == .seconds(1))
        #expect(bundle.feedbackInterval == .seconds(3600))
        #expect(bundle.feedbackPort == 2196)
        #expect(bundle.feedbackEndpoint(for: .production) == nil)
        #expect(bundle.host == nil && bundle.port == nil && bundle.caFile == nil)
        #expect(bundle.line == 4)
        #expect(bundle.endpoint(for: .production) == ("api.push.apple.com", 443))
        #expect(bundle.endpoint(for: .sandbox) == ("api.sandbox.push.apple.com", 443))
    }

    /// The longest bundle ID taken (contract §6's 155 bytes): its longest queue names fit AMQP's
    /// 255 bytes (156 bytes is refused with its line, `errorCases`).
    @Test func aBundleIDOf155BytesIsTakenAndItsQueueNamesFitAShortString() throws {
        let directory = try TempDirectory()
        let bundleID = "com." + String(repeating: "x", count: 151)
        let text = minimalConfig + "\n[apns \"\(bundleID)\"]\ncertFile = c\nkeyFile = k"
        let bundle = try #require(try loadConfig(text, in: directory).bundles.last)
        #expect(bundle.bundleID == bundleID)
        #expect(TopologyNames.retryQueue(bundleID, delay: .seconds(86_399)).utf8.count <= 255)
        #expect(TopologyNames.pauseMarker(bundleID).utf8.count <= 255)
    }

    @Test("feedbackInterval = 0 turns feedback polling off for a binary bundle")
    func feedbackPollingOff() throws {
        let directory = try TempDirectory()
        let text = minimalConfig + "\n[apns \"com.example.legacy\"]\ntransport = binary\ncertFile = c\nkeyFile = k\nhost = 127.0.0.1\nfeedbackInterval = 0"
        let legacy = try #require(try loadConfig(text, in: directory).bundles.last)
        #expect(legacy.feedbackInterval == .zero)
        #expect(legacy.feedbackEndpoint(for: .production) == nil)
    }

    @Test func everyKey() throws {
        let directory = try TempDirectory()
        let text = """
            [AMQP]
            url = amqp://a:pw@rabbit-1:5672/%2f
            URL = amqps://a:pw@rabbit-2:5671/prod
            Prefetch = 50
            heartbeat = 1m
            queuetype = Classic
            caFile = certs/rabbit-ca.pem

            [retry]
            delays = 250ms, 2s, 1h30m
            maxAttempts = 10

            [admin]
            listen = [::1]:0
            token = "0123456789abcdef-secret"
            heartbeatInterval = 1500ms

            [worker]
            shutdownDeadline = 5s
            requestTimeout = 3s
            connectTimeout = 2s
            probeInterval = 1m
            providerTokenRefresh = 30m
            maxDeliveries = 5

            [apns "com.example.token"]
            transport = http2
            environment = sandbox
            teamId = TEAM123456
            keyId = KEY1234567
            tokenKeyFile = /etc/apns/AuthKey_KEY1234567.p8
            host = simulator.local
            port = 8443
            caFile = ../ca.pem
            connections = 4
            allowSyncServers = Sync1.example.com, sync2.example.com
            denySyncServers = bad.example.com
            rolloutPercentage = 25%

            [apns "com.example.legacy"]
            transport = binary
            domain = sandbox.push.apple.com
            certFile = client.pem
            keyFile = client.key
            binaryHoldWindow = 250ms
            feedbackInterval = 10m
            feedbackPort = 12196
            """
        let configuration = try loadConfig(text, in: directory)
        let base = directory.path
        let parent = directory.url.deletingLastPathComponent().standardizedFileURL.path
        #expect(
            configuration.amqp
                == AMQPSettings(
                    urls: ["amqp://a:pw@rabbit-1:5672/%2f", "amqps://a:pw@rabbit-2:5671/prod"], prefetch: 50,
                    heartbeat: .seconds(60), queueType: .classic, caFile: base + "/certs/rabbit-ca.pem", prefetchWritten: true))
        #expect(configuration.amqp.maskedURLs == ["amqp://a:***@rabbit-1:5672/%2f", "amqps://a:***@rabbit-2:5671/prod"])
        #expect(configuration.retry == RetrySettings(delays: [.milliseconds(250), .seconds(2), .seconds(5400)], maxAttempts: 10))
        #expect(configuration.admin == AdminSettings(
                listen: ListenAddress(host: "::1", port: 0), token: "0123456789abcdef-secret", heartbeatInterval: .milliseconds(1500)))
        #expect(configuration.admin.listen.description == "[::1]:0")
        #expect(
            configuration.worker
                == WorkerSettings(
                    shutdownDeadline: .seconds(5), requestTimeout: .seconds(3), connectTimeout: .seconds(2),
                    probeInterval: .seconds(60), providerTokenRefresh: .seconds(1800), maxDeliveries: 5))
        #expect(configuration.bundles.count == 2)
        let token = configuration.bundles[0]
        #expect(
            token
                == BundleConfiguration(
                    bundleID: "com.example.token", transport: .http2, environment: .sandbox,
                    auth: .token(teamID: "TEAM123456", keyID: "KEY1234567", tokenKeyFile: "/etc/apns/AuthKey_KEY1234567.p8"),
                    host: "simulator.local", port: 8443, caFile: parent + "/ca.pem", connections: 4,
                    rollout: RolloutGate(
                        allowSyncServers: ["sync1.example.com", "sync2.example.com"], denySyncServers: ["bad.example.com"],
                        percentage: 25),
                    line: 26))
        #expect(token.endpoint(for: .production) == ("simulator.local", 8443))
        let legacy = configuration.bundles[1]
        #expect(
            legacy
                == BundleConfiguration(
                    bundleID: "com.example.legacy", transport: .binary, environment: .sandbox,
                    auth: .certificate(certFile: base + "/client.pem", keyFile: base + "/client.key"),
                    binaryHoldWindow: .milliseconds(250), feedbackInterval: .seconds(600), feedbackPort: 12196, line: 40))
        #expect(legacy.connections == 1)
        #expect(try #require(legacy.feedbackEndpoint(for: .sandbox)) == ("feedback.sandbox.push.apple.com", 12196))
        #expect(try #require(legacy.feedbackEndpoint(for: .production)) == ("feedback.push.apple.com", 12196))
        #expect(token.feedbackEndpoint(for: .sandbox) == nil)
        #expect(legacy.endpoint(for: .sandbox) == ("gateway.sandbox.push.apple.com", 2195))
        #expect(legacy.endpoint(for: .production) == ("gateway.push.apple.com", 2195))
        #expect(configuration.topologyPlan.queues.map(\.name).contains("apns.com.example.legacy.retry.1h30m"))
        #expect(configuration.summaryLines == [
            "amqp: 2 urls (failover): amqp://a:***@rabbit-1:5672/%2f, amqps://a:***@rabbit-2:5671/prod; prefetch 50, maxInFlight 2000: 50 per bundle × 2, classic queues",
            "retry: delays 250ms, 2s, 1h30m, maxAttempts 10",
            "admin: listen [::1]:0, bearer token set, fleet heartbeat every 1500ms",
            "bundles: 2",
            "  com.example.token: http2, token auth, sandbox, simulator.local:8443, 4 connections, rollout gate on",
            "  com.example.legacy: binary, certificate auth, sandbox, gateway.sandbox.push.apple.com:2195, 1 connection",
        ])
    }

    @Test func domainSelectsEnvironmentAndAgreesWithIt() throws {
        let directory = try TempDirectory()
        for (lines, expected) in [
            ("domain = push.apple.com", APNSEnvironment.production),
            ("domain = sandbox.push.apple.com", .sandbox),
            ("environment = sandbox\ndomain = sandbox.push.apple.com", .sandbox),
            ("environment = Production", .production),
        ] {
            let configuration = try loadConfig(minimalConfig + "\n" + lines, in: directory)
            #expect(configuration.bundles[0].environment == expected, "\(lines)")
        }
    }

    @Test func repeatedURLFormsAFailoverListAndAnEmptyValueResetsIt() throws {
        let directory = try TempDirectory()
        let text = minimalConfig.replacingOccurrences(
            of: "url = amqp://guest:guest@127.0.0.1:5672/%2f",
            with: "url = amqp://old/\nurl =\nurl = amqp://one/\nurl = amqp://two/")
        let configuration = try loadConfig(text, in: directory)
        #expect(configuration.amqp.urls == ["amqp://one/", "amqp://two/"])
    }

    @Test func environmentOverrides() throws {
        let directory = try TempDirectory()
        let environment = [
            "APNS_WORKER_AMQP_URL": "amqp://env-1/, amqp://env-2/",
            "APNS_WORKER_AMQP_PREFETCH": "7",
            "APNS_WORKER_AMQP_MAXINFLIGHT": "300",
            "APNS_WORKER_AMQP_QUEUETYPE": "classic",
            "APNS_WORKER_AMQP_HEARTBEAT": "",  // empty: unset
            "APNS_WORKER_RETRY_DELAYS": "1s,2s",
            "APNS_WORKER_RETRY_MAXATTEMPTS": "3",
            "APNS_WORKER_ADMIN_LISTEN": "0.0.0.0:9000",
            "APNS_WORKER_ADMIN_TOKEN": "token-from-the-environment",
            "APNS_WORKER_WORKER_SHUTDOWNDEADLINE": "5s",
            "APNS_WORKER_CONFIG": "not one of the overrides",  // another part of the program's variable
            "PATH": "/usr/bin",
        ]
        let configuration = try loadConfig(minimalConfig + "\n[retry]\nmaxAttempts = 9\n", in: directory, environment: environment)
        #expect(configuration.amqp.urls == ["amqp://env-1/", "amqp://env-2/"])
        #expect(configuration.amqp.prefetch == 7)
        #expect(configuration.amqp.maxInFlight == 300)
        #expect(configuration.amqp.queueType == .classic)
        #expect(configuration.amqp.heartbeat == .seconds(30))
        #expect(configuration.retry == RetrySettings(delays: [.seconds(1), .seconds(2)], maxAttempts: 3))
        #expect(configuration.admin == AdminSettings(listen: ListenAddress(host: "0.0.0.0", port: 9000), token: "token-from-the-environment"))
        #expect(configuration.worker.shutdownDeadline == .seconds(5))
    }

    /// Written in the file or the environment, `prefetch` bounds each bundle's window; unwritten,
    /// the default 500 is only where the window starts.
    @Test func aWrittenPrefetchIsKnownAsABound() throws {
        let directory = try TempDirectory()
        let unwritten = try loadConfig(minimalConfig, in: directory).amqp
        #expect(unwritten.prefetch == 500 && !unwritten.prefetchWritten && !unwritten.inFlightBudget.prefetchBoundsWindow)
        let text = minimalConfig.replacingOccurrences(
            of: "url = amqp://guest:guest@127.0.0.1:5672/%2f", with: "url = amqp://guest:guest@127.0.0.1:5672/%2f\nprefetch = 50")
        let written = try loadConfig(text, in: directory).amqp
        #expect(written.prefetch == 50 && written.prefetchWritten && written.inFlightBudget.prefetchBoundsWindow)
        let fromEnvironment = try loadConfig(minimalConfig, in: directory, environment: ["APNS_WORKER_AMQP_PREFETCH": "64"]).amqp
        #expect(fromEnvironment.prefetch == 64 && fromEnvironment.prefetchWritten)
    }

    @Test func maxInFlightFromTheFileSetsEachBundlesShareAndTheSummaryShowsIt() throws {
        let directory = try TempDirectory()
        #expect(try loadConfig(minimalConfig, in: directory).amqp.maxInFlight == 2000)
        let text = minimalConfig.replacingOccurrences(
            of: "url = amqp://guest:guest@127.0.0.1:5672/%2f", with: "url = amqp://guest:guest@127.0.0.1:5672/%2f\nmaxinflight = 100")
        let configuration = try loadConfig(text, in: directory)
        #expect(configuration.amqp.maxInFlight == 100)
        #expect(configuration.amqp.inFlightBudget == InFlightBudget(maxInFlight: 100, prefetch: 500))
        #expect(configuration.summaryLines[0].hasSuffix("; prefetch 500, maxInFlight 100: 100 per bundle × 1, quorum queues"))
        // The environment wins over the file, as for every key.
        let overridden = try loadConfig(text, in: directory, environment: ["APNS_WORKER_AMQP_MAXINFLIGHT": "64"])
        #expect(overridden.amqp.maxInFlight == 64)
        // Below 1 bundle × the floor: the summary warns with the figures.
        let thin = try loadConfig(text, in: directory, environment: ["APNS_WORKER_AMQP_MAXINFLIGHT": "8"])
        #expect(thin.summaryLines[0].hasSuffix("maxInFlight 8: 32 per bundle × 1, quorum queues"))
        #expect(thin.summaryLines[1].hasPrefix("  warning: [amqp] maxInFlight = 8 is less than 1 bundle × the floor of 32 jobs each"))
    }

    @Test func environmentAloneCanProvideTheBroker() throws {
        let directory = try TempDirectory()
        let text = minimalConfig.replacingOccurrences(of: "[amqp]\nurl = amqp://guest:guest@127.0.0.1:5672/%2f\n", with: "")
        let configuration = try loadConfig(text, in: directory, environment: ["APNS_WORKER_AMQP_URL": "amqp://broker/"])
        #expect(configuration.amqp.urls == ["amqp://broker/"])
    }

    /// (environment, expected error line): the location is the variable.
    @Test(arguments: [
        (["APNS_WORKER_RETRY_MAXATTEMPTS": "abc"],
         "environment APNS_WORKER_RETRY_MAXATTEMPTS: [retry] maxAttempts: \"abc\" is not a whole number"),
        (["APNS_WORKER_RETRY_DELAYS": "10s, 10x"],
         "environment APNS_WORKER_RETRY_DELAYS: [retry] delays: \"10x\" is not a duration (use e.g. 10s, 1m, 500ms, 1h30m)"),
        (["APNS_WORKER_AMQP_URL": "amqp://ok/,http://x"],
         "environment APNS_WORKER_AMQP_URL: [amqp] url: \"http://x\" is not an AMQP URL (amqp://user:password@host:5672/vhost or amqps://…)"),
        (["APNS_WORKER_AMQP_MAXINFLIGHT": "-5"],
         "environment APNS_WORKER_AMQP_MAXINFLIGHT: [amqp] maxInFlight: -5 is out of range (1 to 1000000)"),
        (["APNS_WORKER_AMQP_MAXINFLIGHT": "lots"],
         "environment APNS_WORKER_AMQP_MAXINFLIGHT: [amqp] maxInFlight: \"lots\" is not a whole number"),
        (["APNS_WORKER_ADMIN_LISTEN": "9000"],
         "environment APNS_WORKER_ADMIN_LISTEN: [admin] listen: \"9000\" is not host:port (e.g. 127.0.0.1:8080 or [::1]:8080)"),
        (["APNS_WORKER_RETRY_MAXATEMPTS": "3"],
         "environment APNS_WORKER_RETRY_MAXATEMPTS: [retry]: unknown override (known: APNS_WORKER_RETRY_DELAYS, APNS_WORKER_RETRY_MAXATTEMPTS)"),
    ])
    func environmentErrors(environment: [String: String], expected: String) throws {
        let directory = try TempDirectory()
        let error = try loadError(minimalConfig + "\n[retry]\nmaxAttempts = 2\ndelays = 1s", in: directory, environment: environment)
        #expect(error?.description == expected)
        #expect(error?.location == .environment(variable: environment.keys.first!))
    }

    /// Text appended to `minimalConfig` (which ends on line 7), or a whole file when it starts
    /// with "!"; the expected line (nil: none), section, key, kind and message.
    @Test(arguments: [
        ErrorCase("\n[rety]\ndelays = 1s", 9, "[rety]", nil, .unknownSection, "unknown section (known: [amqp], [retry], [admin], [worker], [registry], [tracing], [apns \"bundle.id\"])"),
        ErrorCase("\n[retry]\nmaxAttemps = 3", 10, "[retry]", "maxAttemps", .unknownKey, "unknown key (known: delays, maxAttempts)"),
        ErrorCase("\nhostname = x", 9, "[apns \"com.example.app\"]", "hostname", .unknownKey, "unknown key (known: transport,"),
        ErrorCase("\n[retry]\ndelays = 10s, 10x", 10, "[retry]", "delays", .badValue, "\"10x\" is not a duration (use e.g. 10s, 1m, 500ms, 1h30m)"),
        ErrorCase("\n[retry]\ndelays = 0s", 10, "[retry]", "delays", .badValue, "\"0s\" must be whole milliseconds from 1ms to 168h"),
        ErrorCase("\n[retry]\ndelays = ,", 10, "[retry]", "delays", .badValue, "has an empty item"),
        ErrorCase("\n[retry]\nmaxAttempts = 0", 10, "[retry]", "maxAttempts", .badValue, "0 is out of range (1 to 1000)"),
        ErrorCase("\n[retry]\nmaxattempts = six", 10, "[retry]", "maxAttempts", .badValue, "\"six\" is not a whole number"),
        ErrorCase("\n[amqp]", 9, "[amqp]", nil, .duplicate, "appears again (first at line 1)"),
        ErrorCase("!\n[amqp]\nprefetch = 0\nurl = amqp://h/\n[apns \"a.b\"]\ncertFile = c\nkeyFile = k", 3, "[amqp]", "prefetch", .badValue, "0 is out of range (1 to 65535)"),
        ErrorCase("!\n[amqp]\nmaxInFlight = 0\nurl = amqp://h/\n[apns \"a.b\"]\ncertFile = c\nkeyFile = k", 3, "[amqp]", "maxInFlight", .badValue, "0 is out of range (1 to 1000000)"),
        ErrorCase("!\n[amqp]\nurl = amqp://h/\nmaxinflight = 2k\n[apns \"a.b\"]\ncertFile = c\nkeyFile = k", 4, "[amqp]", "maxInFlight", .badValue, "\"2k\" is not a whole number"),
        ErrorCase("!\n[amqp]\nurl = amqp://h/\nmaxInFlight = 1000001\n[apns \"a.b\"]\ncertFile = c\nkeyFile = k", 4, "[amqp]", "maxInFlight", .badValue, "1000001 is out of range (1 to 1000000)"),
        ErrorCase("!\n[amqp]\nurl = amqp://h/\nmaxInFlight = 10\nmaxInFlight = 20\n[apns \"a.b\"]\ncertFile = c\nkeyFile = k", 5, "[amqp]", "maxInFlight", .duplicate, "set again (first at line 4)"),
        ErrorCase("!\n[amqp]\nheartbeat = 1.5s\nurl = amqp://h/\n[apns \"a.b\"]\ncertFile = c\nkeyFile = k", 3, "[amqp]", "heartbeat", .badValue, "\"1.5s\" must be whole seconds from 0s (off) to 65535s"),
        ErrorCase("!\n[amqp]\nqueueType = lazy\nurl = amqp://h/\n[apns \"a.b\"]\ncertFile = c\nkeyFile = k", 3, "[amqp]", "queueType", .badValue, "\"lazy\" is not a queue type (quorum or classic)"),
        ErrorCase("!\n[amqp]\nurl = amqp://h/\nurl = http://h/\n[apns \"a.b\"]\ncertFile = c\nkeyFile = k", 4, "[amqp]", "url", .badValue, "\"http://h/\" is not an AMQP URL"),
        ErrorCase("!\n[amqp]\nurl = amqp://u:secret@/\n[apns \"a.b\"]\ncertFile = c\nkeyFile = k", 3, "[amqp]", "url", .badValue, "\"amqp://u:***@/\" has no host"),
        ErrorCase("!\n[amqp]\nurl = amqp://rabbit?@/\n[apns \"a.b\"]\ncertFile = c\nkeyFile = k", 3, "[amqp]", "url", .badValue, "has no host"),
        // Read by the one host reader the plaintext warning uses (`PeerSecurity.host(of:)`): what
        // the AMQP client refuses only when it connects stops start-up here, with file and line.
        ErrorCase("!\n[amqp]\nurl = amqp://u:secret@rabbit%zz/\n[apns \"a.b\"]\ncertFile = c\nkeyFile = k", 3, "[amqp]", "url", .badValue,
                  "\"amqp://u:***@rabbit%zz/\" has bad percent-encoding in its host (% must be followed by two hex digits, decoding to UTF-8)"),
        ErrorCase("!\n[amqp]\nurl = amqps://rabbit%C3%28.example/%2f\n[apns \"a.b\"]\ncertFile = c\nkeyFile = k", 3, "[amqp]", "url", .badValue,
                  "has bad percent-encoding in its host"),
        ErrorCase("!\n[amqp]\nurl = amqp://rabbit%4/\n[apns \"a.b\"]\ncertFile = c\nkeyFile = k", 3, "[amqp]", "url", .badValue, "has bad percent-encoding in its host"),
        ErrorCase("!\n[amqp]\nurl = amqp://u:p@[::1:5672/%2f\n[apns \"a.b\"]\ncertFile = c\nkeyFile = k", 3, "[amqp]", "url", .badValue,
                  "\"amqp://u:***@[::1:5672/%2f\" has no host: its IPv6 address has no closing ] (amqp://[::1]:5672/)"),
        ErrorCase("!\n[amqp]\nurl = amqp://[]:5672/\n[apns \"a.b\"]\ncertFile = c\nkeyFile = k", 3, "[amqp]", "url", .badValue, "\"amqp://[]:5672/\" has no host"),
        ErrorCase("!\n[amqp]\nurl = amqp://::1/\n[apns \"a.b\"]\ncertFile = c\nkeyFile = k", 3, "[amqp]", "url", .badValue,
                  "\"amqp://::1/\" has no host (an IPv6 address goes in brackets: amqp://[::1]:5672/)"),
        ErrorCase("!\n[amqp]\nurl = amqp://u@:5672/\n[apns \"a.b\"]\ncertFile = c\nkeyFile = k", 3, "[amqp]", "url", .badValue, "\"amqp://u@:5672/\" has no host"),
        ErrorCase("!\n[amqp]\nprefetch = 10\n\n[apns \"a.b\"]\ncertFile = c\nkeyFile = k", 2, "[amqp]", "url", .missingKey, "missing: at least one url"),
        ErrorCase("!\n[apns \"a.b\"]\ncertFile = c\nkeyFile = k", nil, "[amqp]", "url", .missingKey, "missing: at least one url"),
        ErrorCase("!\n[amqp]\nurl = amqp://h/\n", nil, nil, nil, .noBundles, "no [apns \"bundle.id\"] section: configure at least one bundle"),
        ErrorCase("\n[admin]\nlisten = 8080", 10, "[admin]", "listen", .badValue, "\"8080\" is not host:port"),
        ErrorCase("\n[admin]\nlisten = 0.0.0.0:8080", 10, "[admin]", "token", .missingKey, "required when listen (0.0.0.0:8080) is not a loopback address"),
        ErrorCase("\n[admin]\nheartbeatInterval = 50ms", 10, "[admin]", "heartbeatInterval", .badValue, "\"50ms\" is out of range (100ms to 5m)"),
        ErrorCase("\n[admin]\nheartbeatInterval = often", 10, "[admin]", "heartbeatInterval", .badValue, "\"often\" is not a duration"),
        ErrorCase("\n[admin]\ntoken = short", 10, "[admin]", "token", .badValue, "must be at least 16 printable ASCII characters"),
        ErrorCase("\n[worker]\nshutdownDeadline = 2h", 10, "[worker]", "shutdownDeadline", .badValue, "\"2h\" is out of range (0s to 1h)"),
        ErrorCase("\n[worker]\nrequestTimeout = 10", 10, "[worker]", "requestTimeout", .badValue, "\"10\" is not a duration"),
        ErrorCase("\n[worker]\nconnectTimeout = 10ms", 10, "[worker]", "connectTimeout", .badValue, "out of range (100ms to 5m)"),
        ErrorCase("\n[worker]\nprobeInterval = 2h", 10, "[worker]", "probeInterval", .badValue, "out of range (100ms to 1h)"),
        ErrorCase("\n[worker]\nproviderTokenRefresh = 10m", 10, "[worker]", "providerTokenRefresh", .badValue, "\"10m\" is out of range (20m to 60m, as Apple asks)"),
        ErrorCase("\n[worker]\nmaxDeliveries = 0", 10, "[worker]", "maxDeliveries", .badValue, "out of range"),
        ErrorCase("\n[worker]\nprobeInterval", 10, "[worker]", "probeInterval", .badValue, "needs a value (probeInterval = …)"),
        ErrorCase("\nteamId = TEAM654321", 9, "[apns \"com.example.app\"]", "teamId", .duplicate, "set again (first at line 5); only url in [amqp] may repeat"),
        ErrorCase("\ntransport = http3", 9, "[apns \"com.example.app\"]", "transport", .badValue, "\"http3\" is not a transport (http2 or binary)"),
        ErrorCase("\nenvironment = development", 9, "[apns \"com.example.app\"]", "environment", .badValue, "\"development\" is not an environment (production or sandbox)"),
        ErrorCase("\ndomain = gateway.push.apple.com", 9, "[apns \"com.example.app\"]", "domain", .badValue, "is not an APNs domain"),
        ErrorCase("\nenvironment = production\ndomain = sandbox.push.apple.com", 10, "[apns \"com.example.app\"]", "domain", .conflict, "\"sandbox.push.apple.com\" contradicts environment = production (line 9); keep one"),
        ErrorCase("\ncertFile = c.pem\nkeyFile = c.key", 9, "[apns \"com.example.app\"]", "certFile", .conflict, "both token auth (teamId, keyId, tokenKeyFile) and certificate auth (certFile, keyFile) are given; keep one"),
        ErrorCase("\ntransport = binary", 5, "[apns \"com.example.app\"]", "teamId", .conflict, "the binary transport needs certificate auth"),
        ErrorCase("\nhost = https://example.com", 9, "[apns \"com.example.app\"]", "host", .badValue, "is not a host name or address"),
        ErrorCase("\nport = 70000", 9, "[apns \"com.example.app\"]", "port", .badValue, "70000 is out of range (1 to 65535)"),
        ErrorCase("\nconnections = 0", 9, "[apns \"com.example.app\"]", "connections", .badValue, "0 is out of range (1 to 16)"),
        ErrorCase("\nrolloutPercentage = 101", 9, "[apns \"com.example.app\"]", "rolloutPercentage", .badValue, "101 is out of range (0 to 100)"),
        ErrorCase("\nevents = some", 9, "[apns \"com.example.app\"]", "events", .badValue, "\"some\" is not an events level (none, ends or all)"),
        ErrorCase("\nallowSyncServers = a,,b", 9, "[apns \"com.example.app\"]", "allowSyncServers", .badValue, "has an empty item"),
        ErrorCase("\nbinaryHoldWindow = 1s", 9, "[apns \"com.example.app\"]", "binaryHoldWindow", .conflict, "only applies to transport = binary (this bundle uses http2)"),
        ErrorCase("\nfeedbackInterval = 1h", 9, "[apns \"com.example.app\"]", "feedbackInterval", .conflict, "only applies to transport = binary (this bundle uses http2"),
        ErrorCase("\nfeedbackPort = 2196", 9, "[apns \"com.example.app\"]", "feedbackPort", .conflict, "only applies to transport = binary"),
        ErrorCase("\nchannelPort = 70000", 9, "[apns \"com.example.app\"]", "channelPort", .badValue, "70000 is out of range (1 to 65535)"),
        ErrorCase("\nchannelHost = https://x", 9, "[apns \"com.example.app\"]", "channelHost", .badValue, "no scheme, no port: use channelPort"),
        ErrorCase("\n[apns \"com.example.legacy\"]\ntransport = binary\ncertFile = c\nkeyFile = k\nchannelPort = 2195", 13, "[apns \"com.example.legacy\"]", "channelPort", .conflict, "only applies to transport = http2"),
        ErrorCase("\n[apns \"com.example.legacy\"]\ntransport = binary\ncertFile = c\nkeyFile = k\nfeedbackInterval = 500ms", 13, "[apns \"com.example.legacy\"]", "feedbackInterval", .badValue, "\"500ms\" is out of range (0 to turn polling off, or 1s to 24h)"),
        ErrorCase("\n[apns \"com.example.legacy\"]\ntransport = binary\ncertFile = c\nkeyFile = k\nfeedbackInterval = often", 13, "[apns \"com.example.legacy\"]", "feedbackInterval", .badValue, "\"often\" is not a duration"),
        ErrorCase("\n[apns \"com.example.legacy\"]\ntransport = binary\ncertFile = c\nkeyFile = k\nfeedbackPort = 0", 13, "[apns \"com.example.legacy\"]", "feedbackPort", .badValue, "0 is out of range (1 to 65535)"),
        ErrorCase("\ncaFile = \"\"", 9, "[apns \"com.example.app\"]", "caFile", .badValue, "is empty"),
        ErrorCase("\n[apns \"com.example.legacy\"]\ntransport = binary\ncertFile = c\nkeyFile = k\nbinaryHoldWindow = 5ms", 13, "[apns \"com.example.legacy\"]", "binaryHoldWindow", .badValue, "\"5ms\" is out of range (10ms to 1m)"),
        ErrorCase("\n[apns \"com example\"]\ncertFile = c\nkeyFile = k", 9, "[apns \"com example\"]", nil, .badValue, "\"com example\" is not a bundle ID"),
        ErrorCase("\n[apns \"com.\(String(repeating: "x", count: 152))\"]\ncertFile = c\nkeyFile = k", 9, "[apns \"com.\(String(repeating: "x", count: 152))\"]", nil, .badValue, "the bundle ID is 156 bytes; at most 155, so that its queue names fit AMQP's 255"),
        // A name wrong in its characters is told so even when it is also too long; a dot at either end is no reverse-DNS name.
        ErrorCase("\n[apns \"com_\(String(repeating: "x", count: 152))\"]\ncertFile = c\nkeyFile = k", 9, "[apns \"com_\(String(repeating: "x", count: 152))\"]", nil, .badValue, "is not a bundle ID (letters, digits"),
        ErrorCase("\n[apns \"com.example.\"]\ncertFile = c\nkeyFile = k", 9, "[apns \"com.example.\"]", nil, .badValue, "\"com.example.\" is not a bundle ID"),
        ErrorCase("\n[apns \".com.example\"]\ncertFile = c\nkeyFile = k", 9, "[apns \".com.example\"]", nil, .badValue, "\".com.example\" is not a bundle ID"),
        ErrorCase("\n[apns \"COM.example.APP\"]\ncertFile = c\nkeyFile = k", 9, "[apns \"COM.example.APP\"]", nil, .duplicate, "the same bundle ID as the section at line 4"),
        ErrorCase("\n[apns]\ncertFile = c", 9, "[apns]", nil, .syntax, "needs the bundle ID: [apns \"com.example.app\"]"),
        ErrorCase("\n[retry \"x\"]\ndelays = 1s", 9, "[retry \"x\"]", nil, .syntax, "[retry] takes no subsection"),
        ErrorCase("!\n[amqp]\nurl = amqp://h/\n[apns \"a.b\"]\nteamId = TEAM123456\ntokenKeyFile = k.p8", 4, "[apns \"a.b\"]", "keyId", .missingKey, "token auth incomplete: teamId, keyId and tokenKeyFile are all required"),
        ErrorCase("!\n[amqp]\nurl = amqp://h/\n[apns \"a.b\"]\ncertFile = c", 4, "[apns \"a.b\"]", "keyFile", .missingKey, "certificate auth incomplete: certFile and keyFile are both required"),
        ErrorCase("!\n[amqp]\nurl = amqp://h/\n[apns \"a.b\"]\ntransport = http2", 4, "[apns \"a.b\"]", nil, .missingKey, "no credentials: give teamId, keyId and tokenKeyFile"),
        ErrorCase("!\n[amqp]\nurl = amqp://h/\n[apns \"a.b\"]\nteamId = team\nkeyId = KEY1234567\ntokenKeyFile = k.p8", 5, "[apns \"a.b\"]", "teamId", .badValue, "\"team\" is not a 10-character Apple ID"),
    ])
    func errors(_ testCase: ErrorCase) throws {
        let directory = try TempDirectory()
        let text = testCase.text.hasPrefix("!") ? String(testCase.text.dropFirst()) : minimalConfig + "\n" + testCase.text
        let error = try #require(try loadError(text, in: directory))
        let path = directory.path + "/test.conf"
        #expect(error.kind == testCase.kind)
        #expect(error.location == .file(path: path, line: testCase.line))
        #expect(error.section == testCase.section)
        #expect(error.key == testCase.key)
        var prefix = path + (testCase.line.map { ":\($0)" } ?? "") + ": "
        if let section = testCase.section { prefix += testCase.key == nil ? "\(section): " : "\(section) " }
        if let key = testCase.key { prefix += "\(key): " }
        #expect(error.description.hasPrefix(prefix), "\(error)")
        #expect(error.description.dropFirst(prefix.count).contains(testCase.message), "\(error)")
        #expect(!error.description.contains("\n"))
    }

    /// `[amqp] url` is read by the host reader of the plaintext warning: a URL whose host that
    /// reader finds loads (brackets, percent-encoding, `@` and `:` in the user info, `?` before
    /// the path), and the host the warning is about is the one the client connects to.
    @Test(arguments: [
        ("amqp://u:p@[::1]:5672/%2f", "::1"), ("amqps://u%40x:p%3Aq@r%61bbit.example:5671/prod", "rabbit.example"),
        ("amqp://?@rabbit/", "rabbit"), ("amqp://u:p@127.0.0.1@rabbit.example.com/%2f", "rabbit.example.com"),
        ("amqp://[fe80::1%25eth0]/", "fe80::1%eth0"), ("amqp://h", "h"),
    ])
    func aURLWhoseHostIsReadLoads(url: String, host: String) throws {
        let directory = try TempDirectory()
        let text = minimalConfig.replacingOccurrences(of: "url = amqp://guest:guest@127.0.0.1:5672/%2f", with: "url = \(url)")
        #expect(try loadConfig(text, in: directory).amqp.urls == [url])
        #expect(PeerSecurity.host(of: url) == host)
    }

    @Test func exampleErrorLineFromTheBrief() throws {
        let directory = try TempDirectory()
        let error = try #require(try loadError(minimalConfig + "\n\n[retry]\ndelays = 10x", in: directory))
        #expect(error.description == "\(directory.path)/test.conf:10: [retry] delays: \"10x\" is not a duration (use e.g. 10s, 1m, 500ms, 1h30m)")
    }
}

struct ErrorCase: Sendable, CustomTestStringConvertible {
    var text: String
    var line: Int?
    var section: String?
    var key: String?
    var kind: ConfigurationError.Kind
    var message: String
    init(_ text: String, _ line: Int?, _ section: String?, _ key: String?, _ kind: ConfigurationError.Kind, _ message: String) {
        self.text = text
        self.line = line
        self.section = section
        self.key = key
        self.kind = kind
        self.message = message
    }
    var testDescription: String { "\(kind) \(section ?? "") \(key ?? ""): \(message)" }
}
