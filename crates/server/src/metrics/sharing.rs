//! How GPU shares are enforced, for `/metrics`: each GPU's sharing mode, each guarded share's GPU
//! memory grant (beside `gpuhub_workload_gpu_memory_bytes`, what it uses), the guard's warnings and
//! stops, and the health of gpuhub's MPS control daemons.

use super::text::{Exposition, Kind};
use crate::state::AppState;
use gpuhub_core::node::NodeCapacity;
use gpuhub_core::workload::Workload;

/// Writes the families; `running` are the running workloads when the store could be read.
pub fn write(x: &mut Exposition, st: &AppState, nodes: &[NodeCapacity], running: Option<&[Workload]>) {
    let mut f = x.family(
        "gpuhub_gpu_sharing_mode",
        "How shares of a GPU are enforced: 1 for its mode (mps, guard or none), 0 for the others.",
        Kind::Gauge,
    );
    for n in nodes {
        for g in &n.gpus {
            let mode = g.sharing.unwrap_or(gpuhub_core::node::GpuSharing::Unenforced);
            let index = g.index.to_string();
            for m in gpuhub_core::node::GpuSharing::ALL {
                let labels = [
                    ("gpu", index.as_str()),
                    ("UUID", g.uuid.as_str()),
                    ("Hostname", n.name.as_str()),
                    ("mode", m.as_str()),
                ];
                f.sample(&labels, if m == mode { 1.0 } else { 0.0 });
            }
        }
    }
    let mut f = x.family(
        "gpuhub_share_gpu_memory_granted_bytes",
        "GPU memory each member of a running share of a guarded (guard or mps) GPU was granted, bytes; \
         compare gpuhub_workload_gpu_memory_bytes.",
        Kind::Gauge,
    );
    for w in running.unwrap_or_default() {
        let Some(granted) = crate::guard::grant(w, nodes) else { continue };
        let queue = if w.queue.is_empty() { "default" } else { w.queue.as_str() };
        for m in &w.members {
            let member = m.index.to_string();
            let labels = [
                ("owner", w.owner.as_str()),
                ("workload", w.name.as_str()),
                ("queue", queue),
                ("member", member.as_str()),
                ("node", m.node.as_deref().unwrap_or("")),
            ];
            f.sample(&labels, granted as f64);
        }
    }
    let (warnings, stops) = st.guard.counts();
    let mut f = x.family(
        "gpuhub_guard_over_grant",
        "Members of shares above their GPU memory grant now (warned; stopped after the guard's grace).",
        Kind::Gauge,
    );
    f.sample(&[], st.guard.over() as f64);
    let mut f = x.family(
        "gpuhub_guard_warnings_total",
        "Times the GPU memory guard warned an owner that a share was above its grant, since the server started.",
        Kind::Counter,
    );
    f.sample(&[], warnings as f64);
    let mut f = x.family(
        "gpuhub_guard_stops_total",
        "Workloads the GPU memory guard stopped (gpu-memory-exceeded), since the server started.",
        Kind::Counter,
    );
    f.sample(&[], stops as f64);
    let health = st.mps.as_ref().map(gpuhub_mps::Supervisor::health).unwrap_or_default();
    let mut f = x.family(
        "gpuhub_mps_daemon_up",
        "Whether gpuhub's MPS control daemon of a GPU in the mps mode runs and answers (1) or not (0).",
        Kind::Gauge,
    );
    for h in &health {
        f.sample(&[("UUID", h.uuid.as_str())], if h.running { 1.0 } else { 0.0 });
    }
    let mut f = x.family(
        "gpuhub_mps_daemon_restarts_total",
        "Times gpuhub started the MPS control daemon of a GPU again after it exited or failed to start.",
        Kind::Counter,
    );
    for h in &health {
        f.sample(&[("UUID", h.uuid.as_str())], f64::from(h.restarts));
    }
}
