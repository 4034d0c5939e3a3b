import AMQPClient
import APNSModel
import APNSRegistryMessages
import APNSTopologyNames
import Foundation
import Logging

/// The fan-out of a background group job while `[registry] syncWindow` is on (contract §6): per
/// page, one statement reads the devices with their windows, `SyncWindow.decide` decides each,
/// one statement stores the decisions (compare-and-set), and only the devices whose push goes out
/// now are published; the merged ones wait in PostgreSQL for `TrailingPusher`.
///
/// The window is stored before the push is published. A crash in between redoes the group job,
/// and its redelivery finds the window it opened itself (`openedBy`): it publishes the same push
/// (same UUIDv5 id) again rather than merging it.
extension GroupFanOut {
    /// How often a page's devices are decided again after other instances changed them meanwhile
    /// before the group job is requeued (it then starts again on a later delivery).
    static var maxWindowAttempts: Int { 8 }

    func handleCoalesced(_ job: GroupJob, trace: GroupTrace?) async -> RegistryRoute {
        var after: DevicePosition? = nil
        var sentNow: [String: Int64] = [:], merged: [String: Int64] = [:]
        var unroutable = 0
        while true {
            let page: (now: Int64, devices: [WindowedDevice])
            let decided: [(device: ActiveDevice, now: Bool)]?
            do {
                page = try await store.activeDevicesWithWindows(group: job.group, after: after, limit: batchSize)
                decided = try await decideAndStore(page, job: job)
            } catch {
                return DatabaseFault.route(for: error)
            }
            guard let decided else {
                return .requeue("sync windows of group job \(job.id.uuidString.lowercased()) kept changing under other instances; fanned out again")
            }
            after = page.devices.last?.device.position
            let immediate = decided.filter(\.now).map(\.device)
            let results = await publish(immediate, of: job, trace: trace)
            if !results.unconfirmed.isEmpty {
                return .requeue(
                    "\(results.unconfirmed.count) of \(immediate.count) fan-out publishes not confirmed; the group job is fanned out again (same job ids)")
            }
            unroutable += results.unroutable.count
            let skipped = Set(results.unroutable.map { immediate[$0].position })
            for (device, now) in decided where !skipped.contains(device.position) {
                if now { sentNow[device.bundleID, default: 0] += 1 } else { merged[device.bundleID, default: 0] += 1 }
            }
            if page.devices.count < batchSize { break }
        }
        noteUnroutable(unroutable, of: job)
        for (bundleID, count) in sentNow { recorder?.count(bundleID: bundleID, end: .fannedOut, count: count) }
        for (bundleID, count) in merged { recorder?.count(bundleID: bundleID, end: .coalesced, count: count) }
        let (now, later) = (sentNow.values.reduce(0, +), merged.values.reduce(0, +))
        logger.info(
            now + later == 0 ? "group job reached no active device" : "group job fanned out",
            metadata: [
                "job.id": "\(job.id.uuidString.lowercased())", "registry.group_bytes": "\(job.group.utf8.count)",
                "registry.jobs": "\(now)", "registry.coalesced": "\(later)",
                "registry.bundles": "\(Set(sentNow.keys).union(merged.keys).count)",
            ])
        return .ack
    }

    /// Decides every device of a page and stores what changed; the devices another instance
    /// changed meanwhile are read and decided again. Nil when that keeps happening.
    private func decideAndStore(_ page: (now: Int64, devices: [WindowedDevice]), job: GroupJob) async throws -> [(device: ActiveDevice, now: Bool)]? {
        var (now, pending) = page
        var decided: [(device: ActiveDevice, now: Bool)] = []
        for _ in 0..<Self.maxWindowAttempts {
            var writes: [SyncWindowWrite] = []
            var round: [(device: ActiveDevice, now: Bool)] = []
            for windowed in pending {
                let device = windowed.device
                let included = job.includes(bundleID: device.bundleID, token: device.token)
                switch window.decide(windowed.window, job: job.id, included: included, now: now) {
                case .nothing:
                    continue
                case .sendNow(let state):
                    round.append((device, true))
                    if let state { writes.append(SyncWindowWrite(position: device.position, window: state, trailingBody: nil)) }
                case .merge(let state):
                    round.append((device, false))
                    if let state {
                        let body = job.jobBody(bundleID: device.bundleID, token: device.token, environment: device.environment).body
                        writes.append(SyncWindowWrite(position: device.position, window: state, trailingBody: body))
                    }
                }
            }
            let written = try await store.storeWindows(writes)
            let lost = Set(writes.map(\.position)).subtracting(written)
            decided += round.filter { !lost.contains($0.device.position) }
            if lost.isEmpty { return decided }
            (now, pending) = try await store.windows(of: Array(lost))
        }
        return nil
    }
}

/// What became of a batch of publishes, by index: `unconfirmed` ones (the connection was lost,
/// the broker nacked or returned them) may go through when sent again; `unroutable` ones the AMQP
/// client refused before sending (`AMQPError.invalidName`: the device's bundle ID, from a row
/// no registration message wrote, is longer than a routing key can be), and no retry sends them.
struct PublishResults: Sendable, Equatable {
    var unconfirmed: Set<Int> = []
    var unroutable: Set<Int> = []
}

/// Publishes messages concurrently (confirms are pipelined); returns those that did not go.
func publishConfirmed(_ messages: [AMQPOutboundMessage], on broker: some ConfirmedPublishing) async -> PublishResults {
    guard !messages.isEmpty else { return PublishResults() }
    return await withTaskGroup(of: (Int, refused: Bool)?.self) { group in
        for (index, message) in messages.enumerated() {
            group.addTask {
                do {
                    try await broker.publish(message)
                    return nil
                } catch let error as AMQPError where error.code == .invalidName {
                    return (index, refused: true)
                } catch {
                    return (index, refused: false)
                }
            }
        }
        var results = PublishResults()
        for await failure in group {
            guard let (index, refused) = failure else { continue }
            if refused { results.unroutable.insert(index) } else { results.unconfirmed.insert(index) }
        }
        return results
    }
}

/// A section-2 job for `apns.jobs` (routing key = the device's bundle ID), persistent, its id as `message_id`.
func jobMessage(bundleID: String, id: UUID, body: [UInt8]) -> AMQPOutboundMessage {
    var properties = AMQPProperties.persistentJSON
    properties.messageID = id.uuidString.lowercased()
    return AMQPOutboundMessage(exchange: TopologyNames.jobsExchange, routingKey: bundleID, body: body, properties: properties)
}
