/// The device registry of contract §6 on PostgreSQL (seed part V): which devices are registered,
/// in which group, which Apple reported invalid, and how many notifications reached each end.
///
/// Pure parts (message parsing, UUIDv5 job ids, fan-out planning, count aggregation) have no IO
/// and are tested without sockets; `RegistryStore` is the only type that talks to PostgreSQL, and
/// the consumers (`RegistrationConsumer`, `GroupConsumer`) join it to the broker.
enum APNSRegistryModule {}
