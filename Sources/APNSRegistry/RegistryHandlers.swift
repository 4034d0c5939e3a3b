import AMQPClient
import APNSModel
import APNSRegistryMessages
import Foundation
import Logging

/// Applies registration messages (`apns.registry`): malformed ones are dead, valid ones are
/// applied last-writer-wins (`RegistryStore.apply`), which makes a redelivery change nothing.
struct RegistrationHandler: Sendable {
    let store: RegistryStore
    let logger: Logger

    func handle(_ delivery: AMQPDelivery) async -> RegistryRoute {
        let message: RegistrationMessage
        switch RegistrationMessage.parse(body: delivery.message.body) {
        case .failure(let error): return .dead(error)
        case .success(let parsed): message = parsed
        }
        do {
            let changed = try await store.apply(message)
            logger.debug(
                "registration",
                metadata: [
                    "registry.op": "\(message.op.rawValue)", "apns.bundle": "\(message.bundleID)",
                    "apns.token": "\(DeviceToken(hex: message.token)?.redacted ?? "-")", "registry.at": "\(message.at)",
                    "registry.applied": "\(changed)",
                ])
            return .ack
        } catch {
            return DatabaseFault.route(for: error)
        }
    }
}

/// Fans group jobs (`apns.groups`) out to one section-2 job per active device: pages of
/// `batchSize` devices read in (bundle ID, token) order, each page published with confirms
/// before the next is read, the group job acked after the last confirm. A fan-out interrupted
/// at any point is redone from the start and publishes the same job ids (UUIDv5).
struct GroupFanOut<Publisher: ConfirmedPublishing>: Sendable {
    let store: RegistryStore
    let broker: Publisher
    let recorder: RegistryRecorder?
    let batchSize: Int
    /// `[registry] syncWindow`: background group jobs go through `handleCoalesced`.
    let window: SyncWindow
    let logger: Logger
    /// `[tracing]`: a span per group job and trace context on the jobs it publishes; nil when off.
    var tracing: GroupFanOutTracing? = nil

    func handle(_ delivery: AMQPDelivery) async -> RegistryRoute {
        guard let tracing else { return await fanOut(delivery, trace: nil) }
        let trace = tracing.begin(delivery)
        let route = await fanOut(delivery, trace: trace)
        trace.end(route)
        return route
    }

    private func fanOut(_ delivery: AMQPDelivery, trace: GroupTrace?) async -> RegistryRoute {
        let job: GroupJob
        switch GroupJobParser.parse(body: delivery.message.body, messageID: delivery.message.properties.messageID) {
        case .failure(let error): return .dead(error)
        case .success(let parsed): job = parsed
        }
        if !window.isOff, job.isBackground { return await handleCoalesced(job, trace: trace) }
        var after: DevicePosition? = nil
        var published: [String: Int64] = [:]
        var unroutable = 0
        while true {
            let page: [ActiveDevice]
            do {
                page = try await store.activeDevices(group: job.group, after: after, limit: batchSize)
            } catch {
                return DatabaseFault.route(for: error)
            }
            after = page.last?.position
            let targets = page.filter { job.includes(bundleID: $0.bundleID, token: $0.token) }
            let results = await publish(targets, of: job, trace: trace)
            if !results.unconfirmed.isEmpty {
                return .requeue(
                    "\(results.unconfirmed.count) of \(targets.count) fan-out publishes not confirmed; the group job is fanned out again (same job ids)")
            }
            unroutable += results.unroutable.count
            for (index, device) in targets.enumerated() where !results.unroutable.contains(index) { published[device.bundleID, default: 0] += 1 }
            if page.count < batchSize { break }
        }
        noteUnroutable(unroutable, of: job)
        for (bundleID, count) in published { recorder?.count(bundleID: bundleID, end: .fannedOut, count: count) }
        let total = published.values.reduce(0, +)
        logger.info(
            total == 0 ? "group job reached no active device" : "group job fanned out",
            metadata: [
                "job.id": "\(job.id.uuidString.lowercased())", "registry.group_bytes": "\(job.group.utf8.count)",
                "registry.jobs": "\(total)", "registry.bundles": "\(published.count)",
            ])
        return .ack
    }

    /// Publishes one page concurrently (confirms are pipelined); returns the devices' indices whose
    /// job did not go.
    func publish(_ devices: [ActiveDevice], of job: GroupJob, trace: GroupTrace?) async -> PublishResults {
        let messages = devices.map { device in
            let (id, body) = job.jobBody(bundleID: device.bundleID, token: device.token, environment: device.environment)
            var message = jobMessage(bundleID: device.bundleID, id: id, body: body)
            trace?.stamp(&message)
            return message
        }
        return await publishConfirmed(messages, on: broker)
    }

    /// Devices whose bundle ID no routing key can carry (a row written around the registration
    /// rules, which keep bundle IDs to 155 bytes: an import, another tool, a hand) cannot be sent
    /// a job however often the group job is redone, and the group job is not at fault: they are
    /// skipped, one line per group job that met any, and the other devices are notified.
    func noteUnroutable(_ count: Int, of job: GroupJob) {
        guard count > 0 else { return }
        logger.warning(
            "group job: devices whose bundle ID is longer than an AMQP routing key allows were skipped (registry rows not written by a registration message)",
            metadata: ["job.id": "\(job.id.uuidString.lowercased())", "registry.skipped": "\(count)"])
    }
}
