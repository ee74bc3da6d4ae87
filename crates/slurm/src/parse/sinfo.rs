//! `sinfo --json`: one entry per node (22.05 lists no partitions).

use super::{ParseError, number, reported_errors, string, strings};
use serde_json::Value;

const CMD: &str = "sinfo --json";

/// A node as `sinfo --json` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Node {
    pub name: String,
    pub hostname: String,
    /// Where slurmd listens (`NodeAddr`): where the hub reaches a member's ports.
    pub address: String,
    /// `idle`, `mixed`, `allocated`, `down`, … (lower case).
    pub state: String,
    /// `DRAIN`, `NOT_RESPONDING`, …
    pub flags: Vec<String>,
    /// Why it is down or drained.
    pub reason: String,
    pub cpus: u32,
    /// MiB.
    pub memory_mib: u64,
    /// Configured GRES (`gpu:fake:2,shard:fake:8`).
    pub gres: String,
    pub partitions: Vec<String>,
    pub features: Vec<String>,
}

impl Node {
    /// Whether it takes work: not down, drained, failing or unresponsive.
    pub fn up(&self) -> bool {
        let bad_state = ["down", "drained", "draining", "drain", "fail", "failing", "future", "unknown", "inval"];
        let bad_flag = ["DRAIN", "DRAINED", "DRAINING", "NOT_RESPONDING", "FAIL", "MAINTENANCE", "POWERED_DOWN"];
        let state = self.state.to_ascii_lowercase();
        !bad_state.iter().any(|b| state.starts_with(b)) && !self.flags.iter().any(|f| bad_flag.contains(&f.as_str()))
    }

    /// The state in a few words: `idle`, `mixed`, `drained: maintenance`.
    pub fn describe(&self) -> String {
        let mut words = self.state.to_ascii_lowercase();
        for f in &self.flags {
            words.push('+');
            words.push_str(&f.to_ascii_lowercase());
        }
        if !self.reason.is_empty() {
            words.push_str(": ");
            words.push_str(&self.reason);
        }
        words
    }

    /// Its GPUs as `(model, count)` per GPU type of the configured GRES (`gpu:a100:4(S:0-1)` gives
    /// `("a100", 4)`; an untyped `gpu:2` gives `("gpu", 2)`).
    pub fn gpu_types(&self) -> Vec<(String, u32)> {
        gres_items(&self.gres)
            .into_iter()
            .filter_map(|item| {
                let item = item.split('(').next().unwrap_or("");
                let mut parts = item.split(':');
                if parts.next() != Some("gpu") {
                    return None;
                }
                let rest: Vec<&str> = parts.collect();
                match rest.as_slice() {
                    [count] => Some(("gpu".to_owned(), count.parse().ok()?)),
                    [model, count] => Some(((*model).to_owned(), count.parse().ok()?)),
                    _ => None,
                }
            })
            .collect()
    }
}

/// Splits a GRES string at the commas outside parentheses.
fn gres_items(gres: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in gres.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&gres[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&gres[start..]);
    out.into_iter().filter(|s| !s.is_empty()).collect()
}

/// Every node of a `sinfo --json` answer (an answer with `errors` is an error, whatever the exit status).
pub fn nodes(json: &[u8]) -> Result<Vec<Node>, ParseError> {
    let doc: Value =
        serde_json::from_slice(json).map_err(|e| ParseError::Json { command: CMD, detail: e.to_string() })?;
    if let Some(detail) = reported_errors(&doc) {
        return Err(ParseError::Reported { command: CMD, detail });
    }
    let list = doc
        .get("nodes")
        .and_then(Value::as_array)
        .ok_or_else(|| ParseError::Json { command: CMD, detail: "no \"nodes\" list".into() })?;
    Ok(list
        .iter()
        .filter_map(|v| {
            let name = string(v.get("name"));
            if name.is_empty() {
                return None;
            }
            let states = strings(v.get("state"));
            let (state, extra) = match states.split_first() {
                Some((s, rest)) => (s.clone(), rest.to_vec()),
                None => (String::new(), Vec::new()),
            };
            let mut flags = strings(v.get("state_flags"));
            flags.extend(extra);
            let mut features = strings(v.get("active_features"));
            if features.is_empty() {
                features = string(v.get("features")).split(',').filter(|f| !f.is_empty()).map(str::to_owned).collect();
            }
            Some(Node {
                hostname: string(v.get("hostname")),
                address: string(v.get("address")),
                state,
                flags,
                reason: string(v.get("reason")),
                cpus: number(v.get("cpus")).and_then(|n| u32::try_from(n).ok()).unwrap_or(0),
                memory_mib: number(v.get("real_memory")).and_then(|n| u64::try_from(n).ok()).unwrap_or(0),
                gres: string(v.get("gres")),
                partitions: strings(v.get("partitions")),
                features,
                name,
            })
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_sinfo_json() {
        let nodes = nodes(include_bytes!("../../tests/fixtures/sinfo.json")).unwrap();
        assert_eq!(nodes.len(), 2);
        let n = &nodes[0];
        assert_eq!((n.name.as_str(), n.address.as_str()), ("node1", "10.250.77.11"));
        assert_eq!((n.cpus, n.memory_mib), (4, 4000));
        assert_eq!(n.gpu_types(), [("fake".to_owned(), 2)]);
        assert_eq!(n.partitions, ["gpu"]);
        assert!(n.up());
        assert_eq!(n.describe(), "mixed");
    }

    #[test]
    fn drained_and_gres_forms() {
        let n = Node {
            state: "idle".into(),
            flags: vec!["DRAIN".into()],
            reason: "maintenance".into(),
            gres: "gpu:a100:4(S:0-1),gpu:2,shard:a100:16".into(),
            ..Default::default()
        };
        assert!(!n.up());
        assert_eq!(n.describe(), "idle+drain: maintenance");
        assert_eq!(n.gpu_types(), [("a100".to_owned(), 4), ("gpu".to_owned(), 2)]);
        assert!(!Node { state: "down".into(), ..Default::default() }.up());
    }

    #[test]
    fn unreachable_controller() {
        let err = nodes(include_bytes!("../../tests/fixtures/sinfo-down.json")).unwrap_err();
        assert!(matches!(err, ParseError::Reported { .. }), "{err:?}");
    }
}
