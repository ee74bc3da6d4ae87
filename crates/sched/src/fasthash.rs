//! A fixed, fast hasher for the maps a pass keeps (answers remembered per shape, placement caches): the
//! keys are small tuples of numbers, which the standard library's SipHash, seeded from the operating
//! system, hashes slowly. rustc's `FxHasher` (the `rustc-hash` crate) is the same on every run, and
//! nothing depends on the order of these maps.

/// A `HashMap` with the Fx hasher.
pub(crate) type FastMap<K, V> = rustc_hash::FxHashMap<K, V>;

/// A `HashSet` with the Fx hasher.
pub(crate) type FastSet<K> = rustc_hash::FxHashSet<K>;
