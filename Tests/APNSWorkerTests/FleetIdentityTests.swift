import AMQPClient
import APNSFleet
import APNSTopologyNames
import Foundation
import Testing

@testable import APNSWorker

/// This instance's fleet identity on a machine with a long host name (a DNS name may have 253
/// bytes): its id is a heartbeat's `id` and names its fleet queue, both bounded.
struct FleetIdentityTests {
    static func heartbeat(_ identity: FleetIdentity) -> FleetInstance {
        FleetInstance(
            id: identity.instanceID, host: identity.host, pid: identity.pid, version: identity.version, startedAt: identity.startedAt,
            rssBytes: 1, cpuSeconds: 0, broker: "connected", heartbeatInterval: 5, bundles: [:])
    }

    /// Was: the id was the whole host name and more, so a view ignored every heartbeat of the
    /// instance and its fleet queue's name was longer than AMQP allows (the fleet service failed
    /// to declare it, `invalidName`).
    @Test(arguments: [
        String(repeating: "h", count: 253),
        String(repeating: "node-ü.", count: 36),  // 288 bytes; a cut must not split the ü
        "a" + String(repeating: ".b", count: 126),
    ])
    func anIdentityOnALongHostNameFitsItsHeartbeatAndItsQueueName(host: String) {
        let identity = FleetIdentity.of(host: host, pid: .max, version: "1.0.0")
        #expect(identity.instanceID.utf8.count <= FleetInstance.maxIDBytes)
        #expect(AMQPShortString.fits(TopologyNames.fleetQueue(instanceID: identity.instanceID)))
        #expect(identity.host.utf8.count <= FleetInstance.maxHostBytes && host.hasPrefix(identity.host))
        #expect(Self.heartbeat(identity).isWellFormed)
        #expect(identity.instanceID.hasSuffix("-\(Int32.max)-" + identity.instanceID.suffix(6)))
    }

    @Test func aShortHostNameIsKeptWhole() {
        let identity = FleetIdentity.of(host: "worker-7.example.com", pid: 42, version: "1.0.0")
        #expect(identity.instanceID.hasPrefix("worker-7.example.com-42-") && identity.instanceID.utf8.count == "worker-7.example.com-42-".utf8.count + 6)
        #expect(identity.host == "worker-7.example.com")
        #expect(Self.heartbeat(identity).isWellFormed)
    }
}
