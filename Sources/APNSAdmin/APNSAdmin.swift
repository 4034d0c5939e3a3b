/// APNSAdmin: the worker's admin HTTP surface (Hummingbird 2) — liveness and readiness probes,
/// Prometheus metrics, a JSON API over the dead and retry queues, and an HTML status page.
