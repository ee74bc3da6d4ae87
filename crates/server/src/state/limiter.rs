//! The login limiter, shared in the [`AppState`](super::AppState): failed sign-ins in a sliding window.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A (user, address) pair used up its failed logins for the window.
#[derive(Debug, thiserror::Error)]
#[error("too many failed logins for {user} from this address; try again in {wait_secs} seconds")]
pub struct TooManyFailures {
    /// The user name tried.
    pub user: String,
    /// Seconds until the pair may try again (at least 1).
    pub wait_secs: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum LimitKey {
    Pair(String, IpAddr),
    User(String),
    Addr(IpAddr),
}

/// Failed logins in a sliding window, kept so that an attacker is slowed without locking the real
/// user out: a (user, address) pair that used up its failures is refused for the rest of the window;
/// failures of a user from every address, and of an address for every user, only add a growing delay
/// (doubling from 250 ms up to 8 s). The correct password from another address still works.
#[derive(Debug)]
pub struct LoginLimiter {
    per_pair: usize,
    window: Duration,
    failures: Mutex<HashMap<LimitKey, VecDeque<Instant>>>,
}

/// Most entries the limiter keeps before it forgets expired ones (bounded memory under a spray).
const LIMITER_ENTRIES: usize = 10_000;

/// The longest delay the limiter adds.
pub const MAX_LOGIN_DELAY: Duration = Duration::from_secs(8);

impl LoginLimiter {
    /// `per_pair` failures per user and address within `window`.
    pub fn new(per_pair: usize, window: Duration) -> Self {
        Self { per_pair: per_pair.max(1), window, failures: Mutex::new(HashMap::new()) }
    }

    fn count(&self, map: &mut HashMap<LimitKey, VecDeque<Instant>>, key: &LimitKey, now: Instant) -> usize {
        let Some(q) = map.get_mut(key) else { return 0 };
        while q.front().is_some_and(|t| now.duration_since(*t) > self.window) {
            q.pop_front();
        }
        q.len()
    }

    fn backoff(excess: usize) -> Duration {
        if excess == 0 {
            return Duration::ZERO;
        }
        let exp = u32::try_from(excess - 1).unwrap_or(u32::MAX).min(6);
        (Duration::from_millis(250) * 2u32.pow(exp)).min(MAX_LOGIN_DELAY)
    }

    /// Refuses with 429 when this user from this address used up its failures (saying how long to wait);
    /// otherwise the delay to wait before checking the password.
    pub fn check(&self, user: &str, addr: IpAddr, now: Instant) -> Result<Duration, TooManyFailures> {
        let mut map = self.failures.lock().unwrap();
        let pair = LimitKey::Pair(user.to_owned(), addr);
        if self.count(&mut map, &pair, now) >= self.per_pair {
            let first = map.get(&pair).and_then(|q| q.front().copied()).unwrap_or(now);
            let wait = self.window.saturating_sub(now.duration_since(first)).as_secs().max(1);
            return Err(TooManyFailures { user: user.to_owned(), wait_secs: wait });
        }
        let by_user = self.count(&mut map, &LimitKey::User(user.to_owned()), now);
        let by_addr = self.count(&mut map, &LimitKey::Addr(addr), now);
        Ok(Self::backoff(by_user.saturating_sub(self.per_pair))
            .max(Self::backoff(by_addr.saturating_sub(self.per_pair * 4))))
    }

    /// Records a failure.
    pub fn fail(&self, user: &str, addr: IpAddr, now: Instant) {
        let mut map = self.failures.lock().unwrap();
        if map.len() + 3 > LIMITER_ENTRIES {
            self.make_room(&mut map, now);
        }
        // a count beyond this changes nothing (the delay is at its longest): older failures go
        let longest = self.per_pair * 4 + 8;
        for key in [LimitKey::Pair(user.to_owned(), addr), LimitKey::User(user.to_owned()), LimitKey::Addr(addr)] {
            let q = map.entry(key).or_default();
            q.push_back(now);
            while q.len() > longest {
                q.pop_front();
            }
        }
    }

    /// Forgets expired entries, and if that is not enough, those whose last failure is oldest, down to
    /// three quarters of [`LIMITER_ENTRIES`] (so that a spray of names costs one sort per many
    /// failures, and what was failed most recently, such as the sprayer's own address, is kept).
    fn make_room(&self, map: &mut HashMap<LimitKey, VecDeque<Instant>>, now: Instant) {
        let window = self.window;
        map.retain(|_, q| q.back().is_some_and(|t| now.duration_since(*t) <= window));
        let keep = LIMITER_ENTRIES * 3 / 4;
        if map.len() <= keep {
            return;
        }
        let mut lasts: Vec<Instant> = map.values().filter_map(|q| q.back().copied()).collect();
        let drop = lasts.len() - keep;
        let (_, cut, _) = lasts.select_nth_unstable(drop - 1);
        let cut = *cut;
        map.retain(|_, q| q.back().is_some_and(|t| *t > cut));
    }

    /// Entries kept now (users, addresses and pairs with failures).
    pub fn entries(&self) -> usize {
        self.failures.lock().unwrap().len()
    }

    /// Forgets the failures of this user from this address after a successful login.
    pub fn succeed(&self, user: &str, addr: IpAddr) {
        self.failures.lock().unwrap().remove(&LimitKey::Pair(user.to_owned(), addr));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limiter_refuses_the_pair_and_only_slows_the_rest() {
        let l = LoginLimiter::new(3, Duration::from_secs(60));
        let t0 = Instant::now();
        let (attacker, alice_ip): (IpAddr, IpAddr) = ("203.0.113.9".parse().unwrap(), "198.51.100.7".parse().unwrap());
        for _ in 0..3 {
            assert_eq!(l.check("alice", attacker, t0).unwrap(), Duration::ZERO);
            l.fail("alice", attacker, t0);
        }
        let e = l.check("alice", attacker, t0).unwrap_err();
        assert!(e.wait_secs >= 1 && e.wait_secs <= 60, "{e}");
        // the real user from elsewhere is not locked out, nor another user from the attacker's address
        assert_eq!(l.check("alice", alice_ip, t0).unwrap(), Duration::ZERO);
        assert_eq!(l.check("bob", attacker, t0).unwrap(), Duration::ZERO);
        // more failures for alice from other addresses slow every try for her, boundedly
        for i in 0..20u8 {
            l.fail("alice", IpAddr::from([192, 0, 2, i]), t0);
        }
        let d = l.check("alice", alice_ip, t0).unwrap();
        assert!(d > Duration::ZERO && d <= MAX_LOGIN_DELAY, "{d:?}");
        // after the window everything is forgotten
        let later = t0 + Duration::from_secs(61);
        assert_eq!(l.check("alice", attacker, later).unwrap(), Duration::ZERO);
    }

    #[test]
    fn a_spray_of_names_keeps_the_limiter_bounded_and_the_sprayer_slowed() {
        let l = LoginLimiter::new(3, Duration::from_secs(300));
        let t0 = Instant::now();
        let sprayer: IpAddr = "203.0.113.9".parse().unwrap();
        for i in 0..(3 * LIMITER_ENTRIES) {
            let at = t0 + Duration::from_millis(i as u64);
            l.fail(&format!("user{i}"), IpAddr::from([198, 51, (i >> 8) as u8, i as u8]), at);
            l.fail(&format!("name{i}"), sprayer, at);
            assert!(l.entries() <= LIMITER_ENTRIES, "{} entries after {i}", l.entries());
        }
        let now = t0 + Duration::from_millis(3 * LIMITER_ENTRIES as u64);
        // the sprayer's address failed last of all: it is kept, and still slowed to the longest delay
        assert_eq!(l.check("someone", sprayer, now).unwrap(), MAX_LOGIN_DELAY);
        // each key's failures are bounded too: the address's count stops at what the delay needs
        let longest = l.failures.lock().unwrap().values().map(VecDeque::len).max().unwrap();
        assert!(longest <= 3 * 4 + 8, "{longest}");
        // the most recent entries survive the spray
        let last = 3 * LIMITER_ENTRIES - 1;
        let map = l.failures.lock().unwrap();
        assert!(map.contains_key(&LimitKey::Pair(format!("name{last}"), sprayer)));
        assert!(map.contains_key(&LimitKey::User(format!("user{last}"))));
        drop(map);
        // and once the window has passed, everything old is forgotten at the next room-making
        let later = now + Duration::from_secs(301);
        l.fail("x", sprayer, later);
        for i in 0..LIMITER_ENTRIES {
            l.fail(&format!("again{i}"), sprayer, later);
        }
        assert!(l.entries() <= LIMITER_ENTRIES);
    }
}
