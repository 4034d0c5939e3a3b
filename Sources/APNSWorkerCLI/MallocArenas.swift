/// The number of glibc malloc arenas `apns-worker run` lets its threads use.
///
/// glibc gives a thread that finds the heap's lock taken an arena of its own, up to eight per core,
/// and an arena keeps the pages it once used. The worker's threads (NIO's event loops, the Swift
/// executor's, the AMQP owner thread) each ended up with one: seven arenas held 5.6 MiB at the
/// kit's peak. One arena lowered that peak by 1.5 MiB (12 interleaved runs) at the same CPU per job
/// (docs/benchmarks.md, "Resident memory"): most allocations of the hot path are served by each
/// thread's tcache, which takes no arena lock.
///
/// An operator's own `MALLOC_ARENA_MAX` (or `glibc.malloc.arena_max` in `GLIBC_TUNABLES`) wins.
#if canImport(Glibc)
import Glibc
#endif

enum MallocArenas {
    static let count: Int32 = 1

    /// Call before any thread starts: threads that already took an arena keep it.
    static func bound() {
        #if canImport(Glibc)
        if getenv("MALLOC_ARENA_MAX") != nil { return }
        if let tunables = getenv("GLIBC_TUNABLES"), String(cString: tunables).contains("arena_max") { return }
        // `mallopt` and `M_ARENA_MAX` (-8) live in <malloc.h>, which the Glibc module does not
        // import; the function is looked up in the process's own symbols instead.
        typealias Mallopt = @convention(c) (Int32, Int32) -> Int32
        let mArenaMax: Int32 = -8
        guard let process = dlopen(nil, RTLD_NOW), let symbol = dlsym(process, "mallopt") else { return }
        _ = unsafeBitCast(symbol, to: Mallopt.self)(mArenaMax, count)
        #endif
    }
}
