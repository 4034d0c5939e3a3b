/// APNSConfig: the gcfg-style configuration file of contract §3, environment overrides, and the
/// typed configuration the worker runs on. Every error names the file, line and key.
public enum APNSConfigModule {}
