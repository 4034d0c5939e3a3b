/// A logger whose lines a test reads back (level, message, metadata as text): for the tests that
/// check what an operator is told, and how often.
import Logging
import Synchronization

public final class CapturedLog: Sendable {
    public struct Entry: Sendable {
        public var level: Logger.Level
        public var message: String
        public var metadata: [String: String]
    }

    private let lines = Mutex<[Entry]>([])
    private let label: String

    public init(label: String = "test") {
        self.label = label
    }

    public var entries: [Entry] { lines.withLock { $0 } }

    public var logger: Logger {
        var logger = Logger(label: label) { _ in Handler(log: self) }
        logger.logLevel = .debug
        return logger
    }

    struct Handler: LogHandler {
        let log: CapturedLog
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .debug

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            let all = metadata.merging(event.metadata ?? [:]) { $1 }
            log.lines.withLock {
                $0.append(Entry(level: event.level, message: event.message.description, metadata: all.mapValues(\.description)))
            }
        }
    }
}
