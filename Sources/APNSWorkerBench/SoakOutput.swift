/// What a soak leaves in its directory: `samples.csv` (a row per sample, written as taken, so an
/// interrupted run keeps its data), `events.log` (each event, when and how long it took; each
/// problem met) and `summary.txt` (the verdict).
import APNSModel
import Foundation

struct SoakOutput: Sendable {
    let directory: String

    var samplesPath: String { directory + "/samples.csv" }
    var eventsPath: String { directory + "/events.log" }
    var summaryPath: String { directory + "/summary.txt" }

    init(directory: String) throws {
        self.directory = directory
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try (SoakSample.csvHeader + "\n").write(toFile: samplesPath, atomically: true, encoding: .utf8)
        try "".write(toFile: eventsPath, atomically: true, encoding: .utf8)
    }

    func sample(_ sample: SoakSample) {
        append(sample.csvLine + "\n", to: samplesPath)
    }

    func event(_ at: Duration, _ text: String) {
        append(String(format: "%8.1f s  ", at.timeInterval) + text + "\n", to: eventsPath)
    }

    private func append(_ text: String, to path: String) {
        guard let handle = FileHandle(forWritingAtPath: path) else { return }
        defer { try? handle.close() }
        _ = try? handle.seekToEnd()
        try? handle.write(contentsOf: Data(text.utf8))
    }
}
