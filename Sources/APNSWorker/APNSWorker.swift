/// APNSWorker: the per-bundle pipelines that take jobs from the broker, send them through a
/// transport and route every job to exactly one end (contract §4).
public enum APNSWorkerModule {}
