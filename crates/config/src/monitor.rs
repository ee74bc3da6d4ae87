//! `[monitor]` (sampling, history, `/metrics`) and `[idle]` (finding and reclaiming idle GPUs).

use super::ConfigError;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;

/// Sampling, the history kept of it, and who may scrape `/metrics`.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MonitorConfig {
    /// Seconds between samples of every running member and every GPU (`GPUHUB_MONITOR_INTERVAL_SECS`).
    pub interval_secs: u64,
    /// Hours raw samples are kept (`GPUHUB_MONITOR_RAW_HOURS`); older ones survive as 1-minute means.
    pub raw_hours: u64,
    /// Days 1-minute means are kept (`GPUHUB_MONITOR_MINUTE_DAYS`); older ones survive as 1-hour means.
    pub minute_days: u64,
    /// Days 1-hour means are kept (`GPUHUB_MONITOR_HOUR_DAYS`); older ones are deleted.
    pub hour_days: u64,
    /// A bearer token `/metrics` requires when set (`GPUHUB_MONITOR_METRICS_TOKEN`; a secret, never
    /// printed).
    pub metrics_token: Option<String>,
    /// Addresses (CIDR or single) `/metrics` answers (`GPUHUB_MONITOR_METRICS_ALLOW`, comma-separated);
    /// loopback by default. Both must pass: an allowed address and, when set, the token.
    pub metrics_allow: Vec<String>,
}

impl Default for MonitorConfig {
    fn default() -> Self {
        Self {
            interval_secs: 10,
            raw_hours: 24,
            minute_days: 30,
            hour_days: 365,
            metrics_token: None,
            metrics_allow: vec!["127.0.0.0/8".into(), "::1/128".into()],
        }
    }
}

impl fmt::Debug for MonitorConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MonitorConfig")
            .field("interval_secs", &self.interval_secs)
            .field("raw_hours", &self.raw_hours)
            .field("minute_days", &self.minute_days)
            .field("hour_days", &self.hour_days)
            .field("metrics_token", &self.metrics_token.as_ref().map(|_| "<redacted>"))
            .field("metrics_allow", &self.metrics_allow)
            .finish()
    }
}

/// When a workload holding GPUs counts as idle, and what happens then.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IdleConfig {
    /// Whether idle GPUs are looked for at all (`GPUHUB_IDLE_ENABLED`). It needs real GPU figures
    /// (NVML): GPUs declared in `[[gpus]]` without a driver are never judged idle.
    pub enabled: bool,
    /// Utilisation below this, percent, counts as idle (`GPUHUB_IDLE_THRESHOLD_PCT`).
    pub threshold_pct: f64,
    /// Seconds of idle GPUs and no activity through the hub (app traffic, a terminal, an SSH session)
    /// before the owner is warned (`GPUHUB_IDLE_AFTER_SECS`).
    pub after_secs: u64,
    /// Seconds after the warning, still idle, before the workload is stopped (`GPUHUB_IDLE_GRACE_SECS`).
    pub grace_secs: u64,
    /// The longest an owner may ask to keep a workspace despite idleness, hours (`GPUHUB_IDLE_KEEP_MAX_HOURS`).
    pub keep_max_hours: u64,
    /// Whether jobs are judged too; by default only workspaces are (`GPUHUB_IDLE_JOBS`).
    pub jobs: bool,
    /// Queues whose work is never judged idle (`GPUHUB_IDLE_EXEMPT_QUEUES`, comma-separated; `default`
    /// is the default queue).
    pub exempt_queues: Vec<String>,
    /// Per queue, its own `after_secs` (file only).
    pub queue_after_secs: BTreeMap<String, u64>,
    /// A URL that gets a JSON POST when a workload is warned or stopped for idleness
    /// (`GPUHUB_IDLE_WEBHOOK`).
    pub webhook: Option<String>,
}

impl Default for IdleConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            threshold_pct: 5.0,
            after_secs: 2 * 3600,
            grace_secs: 30 * 60,
            keep_max_hours: 24,
            jobs: false,
            exempt_queues: Vec::new(),
            queue_after_secs: BTreeMap::new(),
            webhook: None,
        }
    }
}

/// The longest any retention or interval may be, in days.
const CENTURY_DAYS: u64 = 36_525;

/// Values in range: an interval of at least 1 s, retention that keeps each tier at least as long as
/// the one before it, a threshold from 0 to 100, addresses that parse.
pub(super) fn check(monitor: &MonitorConfig, idle: &IdleConfig) -> Result<(), ConfigError> {
    let invalid = |key: &str, reason: String| Err(ConfigError::Invalid { key: key.into(), reason });
    if monitor.interval_secs == 0 {
        return invalid("monitor.interval_secs", "must be at least 1".into());
    }
    if monitor.raw_hours == 0 {
        return invalid("monitor.raw_hours", "must be at least 1".into());
    }
    // a century at most: these become durations and times, which must not overflow
    for (key, value, most) in [
        ("monitor.interval_secs", monitor.interval_secs, CENTURY_DAYS * 86_400),
        ("monitor.raw_hours", monitor.raw_hours, CENTURY_DAYS * 24),
        ("monitor.minute_days", monitor.minute_days, CENTURY_DAYS),
        ("monitor.hour_days", monitor.hour_days, CENTURY_DAYS),
        ("idle.after_secs", idle.after_secs, CENTURY_DAYS * 86_400),
        ("idle.grace_secs", idle.grace_secs, CENTURY_DAYS * 86_400),
        ("idle.queue_after_secs", idle.queue_after_secs.values().copied().max().unwrap_or(0), CENTURY_DAYS * 86_400),
    ] {
        if value > most {
            return invalid(key, format!("{value} is more than the most accepted, {most} (a century)"));
        }
    }
    if monitor.minute_days.saturating_mul(24) < monitor.raw_hours {
        return invalid("monitor.minute_days", "must keep 1-minute means at least as long as raw samples".into());
    }
    if monitor.hour_days < monitor.minute_days {
        return invalid("monitor.hour_days", "must keep 1-hour means at least as long as 1-minute means".into());
    }
    if monitor.metrics_token.as_deref() == Some("") {
        return invalid("monitor.metrics_token", "is empty; leave it out for no token".into());
    }
    for a in &monitor.metrics_allow {
        if let Err(e) = a.parse::<super::net::IpNet>() {
            return invalid("monitor.metrics_allow", e);
        }
    }
    if !(0.0..=100.0).contains(&idle.threshold_pct) {
        return invalid("idle.threshold_pct", "must be from 0 to 100".into());
    }
    if idle.after_secs == 0 || idle.queue_after_secs.values().any(|s| *s == 0) {
        return invalid("idle.after_secs", "must be at least 1".into());
    }
    if let Some(w) = &idle.webhook {
        if !(w.starts_with("http://") || w.starts_with("https://")) {
            return invalid("idle.webhook", format!("{w:?} is not an http(s) URL"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;

    #[test]
    fn huge_values_are_refused_not_overflowed() {
        for (key, set) in [
            (
                "monitor.minute_days",
                (|m: &mut MonitorConfig, _: &mut IdleConfig| m.minute_days = u64::MAX)
                    as fn(&mut MonitorConfig, &mut IdleConfig),
            ),
            ("monitor.raw_hours", |m, _| m.raw_hours = u64::MAX),
            ("monitor.interval_secs", |m, _| m.interval_secs = u64::MAX),
            ("idle.grace_secs", |_, i| i.grace_secs = u64::MAX),
            ("idle.after_secs", |_, i| i.after_secs = u64::MAX),
        ] {
            let (mut m, mut i) = (MonitorConfig::default(), IdleConfig::default());
            set(&mut m, &mut i);
            match check(&m, &i) {
                Err(ConfigError::Invalid { key: k, .. }) => assert_eq!(k, key),
                other => panic!("{key}: {other:?}"),
            }
        }
    }

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn variables_set_the_sections_and_bad_values_name_the_key() {
        let c = Config::load(
            None,
            env(&[
                ("GPUHUB_MONITOR_INTERVAL_SECS", "3"),
                ("GPUHUB_MONITOR_METRICS_TOKEN", "s3cret"),
                ("GPUHUB_MONITOR_METRICS_ALLOW", "10.0.0.0/8, 127.0.0.1"),
                ("GPUHUB_IDLE_AFTER_SECS", "60"),
                ("GPUHUB_IDLE_EXEMPT_QUEUES", "prod,default"),
                ("GPUHUB_IDLE_WEBHOOK", "http://127.0.0.1:9/hook"),
            ]),
        )
        .unwrap();
        assert_eq!((c.monitor.interval_secs, c.idle.after_secs), (3, 60));
        assert_eq!(c.monitor.metrics_allow, ["10.0.0.0/8", "127.0.0.1"]);
        assert_eq!(c.idle.exempt_queues, ["prod", "default"]);
        assert!(!format!("{c:?}").contains("s3cret"), "the token is redacted");
        for (var, value, says) in [
            ("GPUHUB_MONITOR_INTERVAL_SECS", "0", "monitor.interval_secs"),
            ("GPUHUB_MONITOR_METRICS_ALLOW", "not-an-address", "monitor.metrics_allow"),
            ("GPUHUB_IDLE_THRESHOLD_PCT", "150", "idle.threshold_pct"),
            ("GPUHUB_IDLE_WEBHOOK", "ftp://x", "idle.webhook"),
            ("GPUHUB_MONITOR_HOUR_DAYS", "1", "monitor.hour_days"),
        ] {
            let e = Config::load(None, env(&[(var, value)])).unwrap_err().to_string();
            assert!(e.contains(says), "{var}={value}: {e}");
        }
        let e = Config::from_toml("[idle]\nafter = 3").map(|_| ()).unwrap_err();
        assert!(e.contains("unknown field"), "{e}");
    }
}
