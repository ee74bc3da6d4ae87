//! Team queues between the configuration file, the store and the scheduler. The file seeds the store
//! on first start; from then on the store's queues are in force (admins edit them through the API), and
//! every reader (the controller on each pass, submissions, `GET /api/v1/queues`) reads them there.

pub mod policy;

use crate::config::Config;
use crate::state::AppState;
use gpuhub_core::queue::{Amounts, Limit, QueueDef};
use gpuhub_sched::{QueueSpec, Quota};
use gpuhub_store::Store;

fn limit_of(q: Quota) -> Limit {
    let set = |v: u64| (v != u64::MAX).then_some(v);
    Limit { gpu_milli: set(q.gpu_milli), cpu_milli: set(q.cpu_milli), memory: set(q.memory) }
}

/// The queues of the configuration file (`[[scheduler.queues]]` with their `queue_members` and their
/// own `queue_priority_classes`).
pub fn from_config(config: &Config) -> Vec<QueueDef> {
    config
        .scheduler
        .queues
        .iter()
        .map(|q| QueueDef {
            name: q.name.clone(),
            guarantee: Amounts {
                gpu_milli: q.guarantee.gpu_milli,
                cpu_milli: q.guarantee.cpu_milli,
                memory: q.guarantee.memory,
            },
            borrow_limit: q.borrow_limit.map(limit_of),
            user_limit: q.user_limit.map(limit_of),
            weight: q.weight,
            members: config.queue_members.get(&q.name).cloned(),
            priority_classes: config.queue_priority_classes.get(&q.name).cloned().unwrap_or_default(),
            team_gid: None,
            max_runtime: None,
            max_disk: None,
        })
        .collect()
}

/// The scheduler's form of a queue.
pub fn spec(q: &QueueDef) -> QueueSpec {
    gpuhub_controller::scheduling::queue_spec(q)
}

/// `config` with the queues in force: `queues` replace the file's queues, members and per-queue
/// priority classes (the classes allowed for every queue, `"*"`, stay the file's).
pub fn with_queues(config: &Config, queues: &[QueueDef]) -> Config {
    let mut c = config.clone();
    c.scheduler.queues = queues.iter().map(spec).collect();
    c.queue_members = queues.iter().filter_map(|q| Some((q.name.clone(), q.members.clone()?))).collect();
    c.queue_priority_classes.retain(|q, _| q == "*");
    c.queue_priority_classes.extend(
        queues.iter().filter(|q| !q.priority_classes.is_empty()).map(|q| (q.name.clone(), q.priority_classes.clone())),
    );
    c
}

/// Seeds the store with the file's queues on first start; on later starts logs where the file and
/// the store differ (the store wins: it holds the admins' edits made through the API).
pub async fn seed(
    store: &Store,
    config: &Config,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<(), gpuhub_store::StoreError> {
    let file = from_config(config);
    if store.seed_queues(&file, now).await? {
        if !file.is_empty() {
            tracing::info!(queues = file.len(), "team queues seeded from the configuration file");
        }
        return Ok(());
    }
    let stored = store.list_queues().await?;
    for q in &file {
        match stored.iter().find(|s| s.name == q.name) {
            None => tracing::warn!(
                queue = %q.name,
                "the configuration file names a queue the database does not have; the database's queues are in \
                 force (create it with `gpuhub queue add` or POST /api/v1/queues)"
            ),
            Some(s) if s != q => tracing::warn!(
                queue = %q.name,
                "the configuration file's settings of this queue differ from the database's; the database's are \
                 in force (edit them with `gpuhub queue set` or PATCH /api/v1/queues/{{name}})"
            ),
            Some(_) => {}
        }
    }
    Ok(())
}

impl AppState {
    /// The configuration with the queues in force now (read from the store), and the policy over them.
    pub async fn live_config(&self) -> Result<policy::QueuesInForce, gpuhub_store::StoreError> {
        Ok(policy::QueuesInForce(with_queues(&self.config, &self.store.list_queues().await?)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_queues_survive_the_round_trip_to_the_scheduler() {
        let mut c = Config::default();
        c.scheduler.queues = vec![QueueSpec {
            user_limit: Some(Quota { gpu_milli: 2000, ..Quota::UNLIMITED }),
            guarantee: Quota { gpu_milli: 1000, cpu_milli: 0, memory: 5 },
            weight: 2.0,
            ..QueueSpec::open("vision")
        }];
        c.queue_members.insert("vision".into(), vec!["alice".into()]);
        c.queue_priority_classes.insert("vision".into(), vec!["high".into()]);
        c.queue_priority_classes.insert("*".into(), vec!["low".into()]);
        let defs = from_config(&c);
        assert_eq!(defs[0].user_limit, Some(Limit { gpu_milli: Some(2000), ..Limit::default() }));
        assert_eq!(defs[0].priority_classes, ["high"]);
        let back = with_queues(&c, &defs);
        assert_eq!(back.scheduler.queues, c.scheduler.queues);
        assert_eq!(back.queue_members, c.queue_members);
        assert_eq!(back.queue_priority_classes, c.queue_priority_classes);
        // a queue dropped from the store is gone everywhere but the classes for every queue stay
        let none = with_queues(&c, &[]);
        assert!(none.scheduler.queues.is_empty() && none.queue_members.is_empty());
        assert_eq!(none.queue_priority_classes.keys().collect::<Vec<_>>(), ["*"]);
    }
}
