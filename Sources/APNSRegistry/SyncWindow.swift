import Foundation

/// One device's sync window as PostgreSQL keeps it (contract §6, "Background pushes are
/// coalesced per device"). Times are the database's clock in ms since the epoch, so every
/// instance reads the same time whatever its own clock says.
public struct SyncWindowState: Sendable, Hashable {
    /// When the current window ends; nil: the device never had a coalesced push.
    public var windowEnd: Int64?
    /// The group job whose push opened the window (immediately, or as a trailing push): a
    /// redelivery of that group job sends its push again (same UUIDv5 id) instead of merging it.
    public var openedBy: UUID?
    /// The latest group job merged into the window: its push is the trailing push, due at `windowEnd`.
    public var trailing: UUID?
    /// Bumped by every write: the compare-and-set that makes two instances' fan-outs safe.
    public var version: Int64

    public init(windowEnd: Int64? = nil, openedBy: UUID? = nil, trailing: UUID? = nil, version: Int64 = 0) {
        self.windowEnd = windowEnd
        self.openedBy = openedBy
        self.trailing = trailing
        self.version = version
    }
}

/// What a background group job does to one device, and the state to store for it.
public enum SyncWindowAction: Sendable, Hashable {
    /// Publish the device's job now; store `state` (nil: the stored state already says so).
    case sendNow(SyncWindowState?)
    /// Fold the group job into the window's trailing push; store `state` (nil: already merged).
    case merge(SyncWindowState?)
    /// The group job does not reach the device (`except`, `bundleIds`): nothing changes.
    case nothing
}

/// The sync window as a pure decision: device state + group job + now → send now, merge, or
/// nothing. `RegistryStore` stores what it decides with a compare-and-set per device, and the
/// trailing pusher (`TrailingPusher`) sends what it merged when the window ends.
public struct SyncWindow: Sendable, Hashable {
    /// The window's length in ms; 0 turns coalescing off.
    public let lengthMS: Int64

    public init(length: Duration) {
        let (seconds, attoseconds) = length.components
        lengthMS = max(0, seconds * 1000 + attoseconds / 1_000_000_000_000_000)
    }

    public var isOff: Bool { lengthMS == 0 }

    /// The decision for one device a background group job (`job`) reaches at `now`.
    /// - A window that has not ended holds the job: merged, unless the job opened it itself (a
    ///   redelivery, which sends its push again rather than delaying it).
    /// - Otherwise the job opens a new window with an immediate push; a trailing push still
    ///   waiting (due while the pusher was late or every instance down) is replaced by it: this
    ///   push is newer, so no change is lost.
    public func decide(_ state: SyncWindowState?, job: UUID, included: Bool, now: Int64) -> SyncWindowAction {
        guard included else { return .nothing }
        let state = state ?? SyncWindowState()
        if let end = state.windowEnd, now < end {
            if state.openedBy == job { return .sendNow(nil) }
            if state.trailing == job { return .merge(nil) }
            var merged = state
            merged.trailing = job
            return .merge(merged)
        }
        var opened = state
        opened.windowEnd = now + lengthMS
        opened.openedBy = job
        opened.trailing = nil
        return .sendNow(opened)
    }

    /// The state after the trailing push of `state` went out at `now`: it opens the next window.
    public func afterTrailingPush(_ state: SyncWindowState, now: Int64) -> SyncWindowState {
        var next = state
        next.windowEnd = now + lengthMS
        next.openedBy = state.trailing
        next.trailing = nil
        return next
    }
}
