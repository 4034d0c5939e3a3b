/// APNSAdmin: the operator surface over HTTP: health, readiness, Prometheus metrics, the dead and
/// retry queues as JSON, and an HTML overview page.
public enum APNSAdminModule {}
