/// SeededRandom: a deterministic random number generator (`SeededGenerator`) for the simulator's
/// fault rates, the benchmarks and the randomized tests, so a run can be replayed from its seed
/// (a leaf: the standard library only).
public enum SeededRandomModule {}
