//! A fixed, fast hasher for the maps a pass keeps (answers remembered per shape, placement caches): the
//! keys are small tuples of numbers, which the standard library's SipHash, seeded from the operating
//! system, hashes slowly. The hash is the multiply-and-rotate of rustc's `FxHasher`; it is the same on
//! every run, and nothing depends on the order of these maps.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// A `HashMap` with [`FastHasher`].
pub(crate) type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

/// A `HashSet` with [`FastHasher`].
pub(crate) type FastSet<K> = HashSet<K, BuildHasherDefault<FastHasher>>;

/// The `FxHasher` hash: each word is added by rotate, xor and multiply.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct FastHasher(u64);

const K: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FastHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(K);
    }
}

impl Hasher for FastHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w));
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u16(&mut self, i: u16) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::{BuildHasher, Hash};

    fn hash<T: Hash>(t: &T) -> u64 {
        BuildHasherDefault::<FastHasher>::default().hash_one(t)
    }

    #[test]
    fn equal_keys_hash_alike_and_different_ones_apart() {
        assert_eq!(hash(&(1u64, "q", vec![true, false])), hash(&(1u64, "q", vec![true, false])));
        assert_ne!(hash(&(1u64, 2u32)), hash(&(2u64, 1u32)));
        assert_ne!(hash(&"team-a"), hash(&"team-b"));
        assert_ne!(hash(&"abcdefgh1"), hash(&"abcdefgh2"));
        let mut m: FastMap<(u64, Option<Vec<bool>>), usize> = FastMap::default();
        for i in 0..1000u64 {
            m.insert((i, (i % 3 == 0).then(|| vec![i % 2 == 0])), i as usize);
        }
        assert_eq!(m.len(), 1000);
        assert_eq!(m[&(999, Some(vec![false]))], 999);
    }
}
