//! The queue and priority policy a request meets: which queue it is charged to and what priority it may
//! have, over the queues in force (the store's) and the configuration's classes. The configuration only
//! holds the settings; the rules are here, where submissions and edits use them.

use crate::config::{Config, names_or_none};
use std::ops::Deref;

/// The configuration with the queues in force ([`crate::state::AppState::live_config`]), and the
/// policy over them.
#[derive(Debug, Clone)]
pub struct QueuesInForce(pub Config);

impl Deref for QueuesInForce {
    type Target = Config;
    fn deref(&self) -> &Config {
        &self.0
    }
}

impl QueuesInForce {
    /// The queue a workload of `user` (an admin when `admin`) is charged to: the one it names, which must
    /// be configured and open to the user, else the user's only queue, else the default queue (`""`).
    pub fn queue_for(&self, user: &str, admin: bool, asked: Option<&str>) -> Result<String, String> {
        match asked {
            None | Some("") => {
                let mine: Vec<&String> =
                    self.queue_members.iter().filter(|(_, m)| m.iter().any(|u| u == user)).map(|(q, _)| q).collect();
                Ok(if mine.len() == 1 { mine[0].clone() } else { String::new() })
            }
            Some(q) => {
                self.check_queue_exists(q)?;
                match self.queue_members.get(q) {
                    Some(members) if !admin && !members.iter().any(|u| u == user) => {
                        Err(format!("queue {q} is for its members ({}); you are not one", members.join(", ")))
                    }
                    _ => Ok(q.to_owned()),
                }
            }
        }
    }

    /// The priority of a workload in `queue`: a class the queue allows (any for admins), a priority the
    /// user asked for (at most 0, or the highest class the queue allows; any for admins), else 0.
    /// The error is the request's fault and names the field.
    pub fn priority_for(
        &self,
        queue: &str,
        admin: bool,
        asked: Option<i32>,
        class: Option<&str>,
    ) -> Result<i32, String> {
        let allowed: Vec<&String> = self
            .queue_priority_classes
            .iter()
            .filter(|(q, _)| q.as_str() == "*" || q.as_str() == queue)
            .flat_map(|(_, c)| c)
            .collect();
        let shown = if queue.is_empty() { "the default queue".to_owned() } else { format!("queue {queue}") };
        match (asked, class) {
            (Some(_), Some(_)) => Err("invalid priority: give priority or priority_class, not both".into()),
            (None, Some(c)) => {
                let Some(value) = self.priority_classes.get(c) else {
                    let names: std::collections::BTreeSet<&str> =
                        self.priority_classes.keys().map(String::as_str).collect();
                    return Err(format!("invalid priority_class: no class {c:?} (classes: {})", names_or_none(&names)));
                };
                if admin || allowed.iter().any(|a| a.as_str() == c) {
                    Ok(*value)
                } else {
                    let names = allowed.iter().map(|s| s.as_str()).collect();
                    Err(format!(
                        "invalid priority_class: {shown} does not allow {c} (allowed: {})",
                        names_or_none(&names)
                    ))
                }
            }
            (Some(p), None) if admin => Ok(p),
            (Some(p), None) => {
                let top =
                    allowed.iter().filter_map(|c| self.priority_classes.get(*c)).copied().max().unwrap_or(0).max(0);
                if p < -100 {
                    Err("invalid priority: must be at least -100".into())
                } else if p > top {
                    Err(format!(
                        "invalid priority: {shown} lets you ask for at most {top}; higher priorities come from \
                         priority classes an admin allows for the queue"
                    ))
                } else {
                    Ok(p)
                }
            }
            (None, None) => Ok(0),
        }
    }

    /// Whether `[[scheduler.queues]]` has a queue `q`; the error names the configured ones.
    pub fn check_queue_exists(&self, q: &str) -> Result<(), String> {
        if self.scheduler.queues.iter().any(|c| c.name == q) {
            return Ok(());
        }
        let configured = self.scheduler.queues.iter().map(|c| c.name.as_str()).collect();
        Err(format!("no queue named {q:?} (queues: {})", names_or_none(&configured)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn the_readme_example_charges_alice_to_her_only_queue() {
        let readme = include_str!("../../../../README.md");
        let start = readme.find("```toml\n").expect("a toml block") + "```toml\n".len();
        let text = &readme[start..start + readme[start..].find("```").unwrap()];
        let c = QueuesInForce(Config::from_toml(text).unwrap());
        assert_eq!(c.queue_for("alice", false, None).unwrap(), "vision");
    }

    #[test]
    fn queues_and_members() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("gpuhub.toml");
        std::fs::write(
            &f,
            "[queue_members]\nvision = [\"alice\", \"bob\"]\n\
             [[scheduler.queues]]\nname = \"vision\"\nguarantee = { gpu_milli = 2000 }\n\
             [[scheduler.queues]]\nname = \"nlp\"\n",
        )
        .unwrap();
        let c = QueuesInForce(Config::load(Some(&f), env(&[])).unwrap());
        // named, defaulted to the only queue of a member, open queues for all, members-only queues refused
        assert_eq!(c.queue_for("alice", false, Some("vision")).unwrap(), "vision");
        assert_eq!(c.queue_for("alice", false, None).unwrap(), "vision");
        assert_eq!(c.queue_for("carol", false, None).unwrap(), "");
        assert_eq!(c.queue_for("carol", false, Some("nlp")).unwrap(), "nlp");
        let e = c.queue_for("carol", false, Some("vision")).unwrap_err();
        assert!(e.contains("alice, bob"), "{e}");
        assert_eq!(c.queue_for("root", true, Some("vision")).unwrap(), "vision");
        let e = c.queue_for("alice", false, Some("cv")).unwrap_err();
        assert!(e.contains("\"cv\"") && e.contains("nlp, vision"), "{e}");
        assert!(c.check_queue_exists("nlp").is_ok());
        assert!(c.check_queue_exists("cv").unwrap_err().contains("queues: nlp, vision"));
    }

    #[test]
    fn priority_comes_from_the_queue_policy() {
        let c = QueuesInForce(
            Config::from_toml(
                "[priority_classes]\nhigh = 100\nlow = -50\n[queue_priority_classes]\nvision = [\"high\"]\n\"*\" = [\"low\"]\n\
                 [[scheduler.queues]]\nname = \"vision\"\n[[scheduler.queues]]\nname = \"nlp\"\n",
            )
            .unwrap(),
        );
        c.check().unwrap();
        assert_eq!(c.priority_for("vision", false, None, Some("high")), Ok(100));
        assert_eq!(c.priority_for("nlp", false, None, Some("low")), Ok(-50));
        let e = c.priority_for("nlp", false, None, Some("high")).unwrap_err();
        assert!(e.contains("queue nlp does not allow high") && e.contains("allowed: low"), "{e}");
        assert!(c.priority_for("", false, None, Some("nope")).unwrap_err().contains("classes: high, low"));
        // a number: down freely, up only as far as an allowed class, anything for admins
        assert_eq!(c.priority_for("nlp", false, Some(-5), None), Ok(-5));
        assert!(c.priority_for("nlp", false, Some(100), None).unwrap_err().contains("at most 0"));
        assert_eq!(c.priority_for("vision", false, Some(100), None), Ok(100));
        assert!(c.priority_for("vision", false, Some(101), None).is_err());
        assert_eq!(c.priority_for("nlp", true, Some(500), None), Ok(500));
        assert_eq!(c.priority_for("nlp", true, None, Some("high")), Ok(100));
        assert!(c.priority_for("nlp", false, Some(1), Some("low")).is_err());
        assert_eq!(c.priority_for("nlp", false, None, None), Ok(0));
    }
}
