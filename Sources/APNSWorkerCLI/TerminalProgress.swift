/// The progress line of `dead|retry requeue|purge` on a terminal: redrawn in place on stderr
/// (carriage return, erase to the end of the line), finished with a newline. Only when stderr is
/// a terminal and the output is not `--json`: scripts and pipes see nothing extra.
import APNSOperations
import Foundation
import Synchronization

final class TerminalProgress: Sendable {
    private let meter: Mutex<(ProgressMeter, last: OperationProgress?)>

    /// A progress line for this process, or nil when it should print none.
    static func make(verb: String, json: Bool) -> TerminalProgress? {
        guard !json, isatty(STDERR_FILENO) == 1 else { return nil }
        return TerminalProgress(verb: verb)
    }

    private init(verb: String) {
        meter = Mutex((ProgressMeter(verb: verb, start: .now), nil))
    }

    /// What `QueueInspector` calls as it goes.
    var handler: OperationProgressHandler {
        { [self] progress in
            let line = meter.withLock { state in
                state.last = progress
                return state.0.line(progress, at: .now)
            }
            if let line { Self.draw(line) }
        }
    }

    /// Draws the last state once more, whatever the interval, and ends the line.
    func finish() {
        let line = meter.withLock { state in state.last.flatMap { state.0.line($0, at: .now, final: true) } }
        guard let line else { return }
        Self.draw(line)
        FileHandle.standardError.write(Data("\n".utf8))
    }

    private static func draw(_ line: String) {
        FileHandle.standardError.write(Data("\r\(line)\u{1B}[K".utf8))
    }
}
