//! Trace loaders: the Alibaba GPU-sharing node and pod lists and the Philly job trace.

use crate::SimError;
use crate::csv::Csv;
use gpuhub_sched::{Cluster, Gpu, GpuRequest, Node, Request, WHOLE};
use std::path::Path;

const MIB: u64 = 1 << 20;

/// One task of an Alibaba pod list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    /// Pod name.
    pub name: String,
    /// What it asks for (`gpu_models` from `gpu_spec`).
    pub request: Request,
}

impl Task {
    /// Milli-GPU it asks for.
    pub fn milli(&self) -> u64 {
        self.request.gpu.milli()
    }
}

/// Reads an Alibaba node list (`sn,cpu_milli,memory_mib,gpu,model`).
pub fn read_nodes(path: &Path) -> Result<Cluster, SimError> {
    let csv = Csv::read(path)?;
    csv.require(&["sn", "cpu_milli", "memory_mib", "gpu", "model"])?;
    let mut nodes = Vec::new();
    for r in csv.rows() {
        let name = r.str("sn").to_owned();
        if name.is_empty() {
            return Err(r.error("sn", "missing value"));
        }
        let cpu: u64 = r.get("cpu_milli")?;
        let mem: u64 = r.get("memory_mib")?;
        let gpus: u32 = r.get("gpu")?;
        if gpus > 1024 {
            return Err(r.error("gpu", format!("{gpus} GPUs on one node is not plausible")));
        }
        let model = r.str("model").to_owned();
        if gpus > 0 && model.is_empty() {
            return Err(r.error("model", "a node with GPUs needs a model"));
        }
        nodes.push(Node {
            gpus: (0..gpus)
                .map(|i| Gpu {
                    uuid: format!("{name}/{i}"),
                    index: i,
                    model: model.clone(),
                    memory: 0,
                    single_user: false,
                })
                .collect(),
            name,
            cpu_milli: cpu,
            memory: mem * MIB,
            labels: Default::default(),
        });
    }
    if nodes.is_empty() {
        return Err(SimError::Format { path: path.to_owned(), reason: "no nodes".into() });
    }
    Ok(Cluster { nodes })
}

/// Reads an Alibaba pod list (`name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,…]`).
pub fn read_pods(path: &Path) -> Result<Vec<Task>, SimError> {
    let csv = Csv::read(path)?;
    csv.require(&["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"])?;
    let mut tasks = Vec::new();
    for r in csv.rows() {
        let cpu: u64 = r.get("cpu_milli")?;
        let mem: u64 = r.get("memory_mib")?;
        let num: u32 = r.get("num_gpu")?;
        let milli: u32 = r.get("gpu_milli")?;
        if milli > WHOLE {
            return Err(r.error("gpu_milli", format!("{milli} is above 1000 (one whole GPU)")));
        }
        let gpu = match (num, milli) {
            (0, _) => GpuRequest::None,
            (_, 0) => return Err(r.error("gpu_milli", format!("0 with num_gpu {num} (expected 1..=1000)"))),
            (1, m) if m < WHOLE => GpuRequest::Fraction { milli: m, memory: None },
            (n, WHOLE) if n <= 1024 => GpuRequest::Whole { count: n },
            (n, m) if n > 1024 => {
                return Err(r.error("num_gpu", format!("{n} GPUs (with {m} milli each) is not plausible")));
            }
            (n, m) => {
                return Err(
                    r.error("gpu_milli", format!("{m} with num_gpu {n}: multi-GPU tasks take whole GPUs (1000)"))
                );
            }
        };
        let gpu_models: Vec<String> = if matches!(gpu, GpuRequest::None) {
            Vec::new()
        } else {
            let mut m: Vec<String> =
                r.str("gpu_spec").split('|').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect();
            m.sort();
            m.dedup();
            m
        };
        tasks.push(Task {
            name: r.str("name").to_owned(),
            request: Request { cpu_milli: cpu, memory: mem * MIB, gpu, gpu_models, constraint: None },
        });
    }
    if tasks.is_empty() {
        return Err(SimError::Format { path: path.to_owned(), reason: "no pods".into() });
    }
    Ok(tasks)
}

/// One job of the Philly trace.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    /// 1-based line in the file (a stable id).
    pub line: usize,
    /// Submit time, seconds since the Unix epoch.
    pub submit_s: i64,
    /// Run time, seconds.
    pub duration_s: f64,
    /// Whole GPUs.
    pub gpus: u32,
    /// The virtual cluster (team).
    pub team: String,
}

/// Reads a Philly-format trace (`timestamp,duration,num_gpus,gpu_time,cluster`), sorted by submit time.
pub fn read_philly(path: &Path) -> Result<Vec<Job>, SimError> {
    let csv = Csv::read(path)?;
    csv.require(&["timestamp", "duration", "num_gpus", "cluster"])?;
    let mut jobs = Vec::new();
    for r in csv.rows() {
        let ts = r.str("timestamp");
        let submit_s = parse_time(ts)
            .ok_or_else(|| r.error("timestamp", format!("{ts:?} is not a time like 2017-10-09 07:01:55")))?;
        let duration_s: f64 = r.get("duration")?;
        if !duration_s.is_finite() || duration_s < 0.0 {
            return Err(r.error("duration", format!("{duration_s} is not a non-negative number of seconds")));
        }
        let gpus: u32 = r.get("num_gpus")?;
        if gpus == 0 {
            return Err(r.error("num_gpus", "0 (expected at least 1)"));
        }
        let team = r.str("cluster").to_owned();
        if team.is_empty() {
            return Err(r.error("cluster", "missing value"));
        }
        jobs.push(Job { line: r.line(), submit_s, duration_s, gpus, team });
    }
    if jobs.is_empty() {
        return Err(SimError::Format { path: path.to_owned(), reason: "no jobs".into() });
    }
    jobs.sort_by_key(|j| (j.submit_s, j.line));
    Ok(jobs)
}

/// Parses `YYYY-MM-DD HH:MM:SS` (or with `T`) as UTC seconds since the Unix epoch.
pub fn parse_time(s: &str) -> Option<i64> {
    let s = s.trim();
    let (date, time) = s.split_once([' ', 'T'])?;
    let mut d = date.split('-').map(|x| x.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let mut t = time.trim_end_matches('Z').split(':').map(|x| x.parse::<f64>().ok());
    let (hh, mm, ss) = (t.next()??, t.next()??, t.next().flatten().unwrap_or(0.0));
    if d.next().is_some() || !(1..=12).contains(&m) || !(1..=31).contains(&day) || !(0.0..24.0).contains(&hh) {
        return None;
    }
    if !(0.0..60.0).contains(&mm) || !(0.0..61.0).contains(&ss) {
        return None;
    }
    // days from civil (Howard Hinnant)
    let y2 = if m <= 2 { y - 1 } else { y };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + (hh as i64) * 3600 + (mm as i64) * 60 + ss as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times() {
        assert_eq!(parse_time("1970-01-01 00:00:00"), Some(0));
        assert_eq!(parse_time("2017-10-09 07:01:55"), Some(1_507_532_515));
        assert_eq!(parse_time("2017-13-09 07:01:55"), None);
        assert_eq!(parse_time("yesterday"), None);
    }
}
