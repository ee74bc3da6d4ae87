//! A recording fake of [`Homes`] for tests of the layers above: homes are plain directories, quotas
//! and usage are what the test sets, and every call is recorded.

use crate::{DirHomes, HomeError, HomeUsage, Homes};
use async_trait::async_trait;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;

/// One call made to the fake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HomeCall {
    /// `ensure(user, uid, quota, busy)`.
    Ensure(String, u32, Option<u64>, bool),
    /// `release(user)`.
    Release(String),
}

/// Plain directories under a root, with quotas kept in memory and usage set by the test.
#[derive(Debug)]
pub struct FakeHomes {
    dirs: DirHomes,
    root: PathBuf,
    quotas: Mutex<BTreeMap<String, Option<u64>>>,
    used: Mutex<BTreeMap<String, u64>>,
    calls: Mutex<Vec<HomeCall>>,
}

impl FakeHomes {
    /// Homes under `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        Self {
            dirs: DirHomes::new(&root),
            root,
            quotas: Mutex::default(),
            used: Mutex::default(),
            calls: Mutex::default(),
        }
    }

    /// Makes `user`'s home report `bytes` in use (a quota below it is then refused).
    pub fn set_used(&self, user: &str, bytes: u64) {
        self.used.lock().unwrap().insert(user.to_owned(), bytes);
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<HomeCall> {
        self.calls.lock().unwrap().clone()
    }
}

#[async_trait]
impl Homes for FakeHomes {
    fn kind(&self) -> &'static str {
        "fake"
    }

    fn path(&self, user: &str) -> PathBuf {
        self.root.join(user)
    }

    async fn ensure(&self, user: &str, uid: u32, quota: Option<u64>, busy: bool) -> Result<PathBuf, HomeError> {
        self.calls.lock().unwrap().push(HomeCall::Ensure(user.to_owned(), uid, quota, busy));
        let used = self.used.lock().unwrap().get(user).copied().unwrap_or(0);
        if let Some(q) = quota.filter(|q| *q < used) {
            return Err(HomeError::BelowUsage { user: user.to_owned(), used, quota: q });
        }
        let p = self.dirs.ensure(user, uid, quota, busy).await?;
        self.quotas.lock().unwrap().insert(user.to_owned(), quota);
        Ok(p)
    }

    async fn usage(&self, user: &str) -> Result<Option<HomeUsage>, HomeError> {
        let Some(quota) = self.quotas.lock().unwrap().get(user).copied() else { return Ok(None) };
        let used = self.used.lock().unwrap().get(user).copied().unwrap_or(0);
        Ok(Some(HomeUsage { used, quota }))
    }

    async fn release(&self, user: &str) -> Result<Vec<PathBuf>, HomeError> {
        self.calls.lock().unwrap().push(HomeCall::Release(user.to_owned()));
        self.quotas.lock().unwrap().remove(user);
        self.dirs.release(user).await
    }
}
