//! The clock seam: the controller, the service layer and the monitor read the time only through
//! [`Clock`], so tests can hold it still or move it ([`ManualClock`]). It lives beside the engine
//! interface so that a crate needing the time or the nodes (the monitor) needs no controller.

use chrono::{DateTime, Utc};
use std::sync::Mutex;

/// Where the time comes from.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Now.
    fn now(&self) -> DateTime<Utc>;
}

/// The system's clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock that stands still until a test moves it.
#[derive(Debug)]
pub struct ManualClock(Mutex<DateTime<Utc>>);

impl ManualClock {
    /// A clock showing `at`.
    pub fn new(at: DateTime<Utc>) -> Self {
        Self(Mutex::new(at))
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: chrono::TimeDelta) {
        let mut t = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *t += by;
    }

    /// Sets the clock to `at`.
    pub fn set(&self, at: DateTime<Utc>) {
        *self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = at;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_told() {
        let t0 = DateTime::from_timestamp(1_000, 0).unwrap();
        let c = ManualClock::new(t0);
        assert_eq!(c.now(), t0);
        c.advance(chrono::TimeDelta::seconds(90));
        assert_eq!(c.now(), DateTime::from_timestamp(1_090, 0).unwrap());
        c.set(t0);
        assert_eq!(c.now(), t0);
        assert!(SystemClock.now() > t0);
    }
}
