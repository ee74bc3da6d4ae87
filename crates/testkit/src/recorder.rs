//! What a fake was asked, in order, as a log a test can wait on: every [`Recorder::push`] wakes the
//! waiters of [`Recorder::wait_for`], so a test waits for "the fake has seen X" on that signal, never
//! by polling the log with sleeps. A minute is only the ceiling that turns a hang into a failure.

use anyhow::{Context as _, Result};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::watch;

/// The longest [`Recorder::wait_for`] waits before the test fails.
pub const CEILING: Duration = Duration::from_secs(60);

/// A shared, append-only log of `T` (clones share it).
#[derive(Debug)]
pub struct Recorder<T> {
    log: Arc<Mutex<Vec<T>>>,
    /// How many entries were pushed: the signal the waiters wait on.
    pushed: Arc<watch::Sender<usize>>,
}

impl<T> Clone for Recorder<T> {
    fn clone(&self) -> Self {
        Recorder { log: self.log.clone(), pushed: self.pushed.clone() }
    }
}

impl<T> Default for Recorder<T> {
    fn default() -> Self {
        Recorder { log: Arc::default(), pushed: Arc::new(watch::Sender::new(0)) }
    }
}

impl<T: Clone> Recorder<T> {
    /// Appends `entry` and wakes every waiter.
    pub fn push(&self, entry: T) {
        let len = {
            let mut log = self.log.lock().unwrap_or_else(PoisonError::into_inner);
            log.push(entry);
            log.len()
        };
        self.pushed.send_replace(len);
    }

    /// Everything recorded so far, oldest first.
    pub fn all(&self) -> Vec<T> {
        self.log.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The newest entry; panics when nothing was recorded (the test expected something).
    pub fn last(&self) -> T {
        self.all().pop().expect("something recorded")
    }

    /// Waits until `find` picks something out of the log (checked now and after every push); fails,
    /// naming `what` and showing the log, after [`CEILING`].
    pub async fn wait_for<R>(&self, what: &str, find: impl Fn(&[T]) -> Option<R>) -> Result<R>
    where
        T: std::fmt::Debug,
    {
        self.wait_within(CEILING, what, find).await
    }

    /// [`Self::wait_for`] with a ceiling of `within`.
    pub async fn wait_within<R>(&self, within: Duration, what: &str, find: impl Fn(&[T]) -> Option<R>) -> Result<R>
    where
        T: std::fmt::Debug,
    {
        let mut pushed = self.pushed.subscribe();
        let wait = async {
            loop {
                // marked seen before the look: a push after it wakes the wait below
                pushed.borrow_and_update();
                if let Some(found) = find(&self.log.lock().unwrap_or_else(PoisonError::into_inner)) {
                    return found;
                }
                // the sender lives in `self`: `changed` cannot fail while this runs
                let _ = pushed.changed().await;
            }
        };
        tokio::time::timeout(within, wait).await.with_context(|| format!("waiting for {what}: {:?}", self.all()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_wait_ends_at_the_push_it_waits_for() {
        let rec = Recorder::default();
        rec.push("a");
        let later = rec.clone();
        let pusher = tokio::spawn(async move {
            tokio::task::yield_now().await;
            later.push("b");
            later.push("c");
        });
        let at = rec.wait_for("c", |log| log.iter().position(|e| *e == "c")).await.unwrap();
        assert_eq!(at, 2);
        pusher.await.unwrap();
        assert_eq!(rec.all(), ["a", "b", "c"]);
        assert_eq!(rec.last(), "c");
    }

    #[tokio::test]
    async fn a_wait_for_what_never_comes_fails_naming_it() {
        let rec = Recorder::default();
        rec.push(1);
        let e = rec.wait_within(Duration::from_millis(20), "a two", |log| log.contains(&2).then_some(())).await;
        let e = e.unwrap_err();
        assert_eq!(e.to_string(), "waiting for a two: [1]");
    }
}
