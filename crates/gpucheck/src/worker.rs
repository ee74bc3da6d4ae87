//! The CUDA load: `gpuhub gpu-check-worker`, the child process gpu-check starts (as a chosen UID) to
//! put real work on a GPU. It loads the CUDA driver library at run time (cudarc's dynamic loading, so
//! the binary builds and starts without CUDA), makes a context on device 0 of what it is shown,
//! allocates the asked memory in one piece and keeps the GPU busy with device-to-device copies and
//! memsets for the asked time. It tells what it did on stdout, one JSON [`WorkerEvent`] a line.

use cudarc::driver::CudaContext;
use cudarc::driver::sys::CUdevice_attribute;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::time::{Duration, Instant};

/// What a worker reports, one JSON object a line (`{"event":"ready",…}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum WorkerEvent {
    /// CUDA initialised and a context was made on the device.
    Ready {
        /// The device's name as CUDA reports it.
        device: String,
        /// `CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT`: the SMs this client may use (under MPS with an
        /// active thread percentage, that share of the GPU's).
        sms: u32,
        /// The device's memory as CUDA reports it (the whole GPU's, even under an MPS memory limit).
        total_memory: u64,
    },
    /// The memory was allocated (one allocation of `bytes`).
    Allocated {
        /// Bytes allocated.
        bytes: u64,
    },
    /// A CUDA call failed; the worker exits after saying so.
    Failed {
        /// What it was doing: `driver` (loading the driver library), `init`, `alloc` or `busy`.
        stage: String,
        /// CUDA's words.
        error: String,
    },
    /// The load ran for its time and the worker exits.
    Done {
        /// Seconds the GPU was kept busy.
        seconds: f64,
        /// Rounds of copies and memsets done.
        rounds: u64,
    },
}

/// What the worker is asked to do.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WorkerJob {
    /// Memory to allocate, MiB.
    pub mib: u64,
    /// How long to keep the GPU busy after allocating, seconds.
    pub seconds: f64,
}

/// Runs the worker, writing its events to stdout; the process's exit code (0 when the load ran, 1 when
/// a CUDA call failed).
pub fn main(job: WorkerJob) -> i32 {
    let stdout = std::io::stdout();
    let mut emit = |event: &WorkerEvent| {
        let mut out = stdout.lock();
        // a parent that went away cannot be told anything; the load goes on to its end
        let _ = serde_json::to_writer(&mut out, event);
        let _ = out.write_all(b"\n");
        let _ = out.flush();
    };
    // cudarc panics where the driver library or one of its symbols is missing: say so as an event
    std::panic::set_hook(Box::new(|_| {}));
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(job, &mut emit)));
    let failure = match outcome {
        Ok(Ok(())) => return 0,
        Ok(Err(failure)) => failure,
        Err(panic) => WorkerEvent::Failed { stage: "driver".into(), error: panic_message(panic.as_ref()) },
    };
    emit(&failure);
    1
}

/// A panic's words, short: cudarc's "unable to load" lists every file name it tried.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    let said = if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        return "the cuda driver library could not be used".to_owned();
    };
    if said.starts_with("Unable to dynamically load the \"cuda\" shared library") {
        return "the cuda driver library (libcuda.so.1) cannot be loaded: no nvidia driver here".to_owned();
    }
    match said.char_indices().nth(200) {
        Some((cut, _)) => format!("{}…", &said[..cut]),
        None => said,
    }
}

fn failed(stage: &str) -> impl Fn(cudarc::driver::DriverError) -> WorkerEvent + '_ {
    move |e| WorkerEvent::Failed { stage: stage.to_owned(), error: format!("{e:?}") }
}

fn run(job: WorkerJob, emit: &mut dyn FnMut(&WorkerEvent)) -> Result<(), WorkerEvent> {
    let ctx = CudaContext::new(0).map_err(failed("init"))?;
    let sms = ctx.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT).map_err(failed("init"))?;
    let total_memory = ctx.total_mem().map_err(failed("init"))?;
    let device = ctx.name().map_err(failed("init"))?;
    emit(&WorkerEvent::Ready {
        device,
        sms: u32::try_from(sms).unwrap_or(0),
        total_memory: u64::try_from(total_memory).unwrap_or(u64::MAX),
    });
    let bytes = usize::try_from(job.mib.saturating_mul(1 << 20)).unwrap_or(usize::MAX);
    let stream = ctx.default_stream();
    let mut buffer = stream.alloc_zeros::<u8>(bytes).map_err(failed("alloc"))?;
    stream.synchronize().map_err(failed("alloc"))?;
    emit(&WorkerEvent::Allocated { bytes: bytes as u64 });
    let start = Instant::now();
    let busy = Duration::from_secs_f64(job.seconds.max(0.0));
    let mut rounds = 0u64;
    while start.elapsed() < busy {
        let (mut first, mut second) = buffer.split_at_mut(bytes / 2);
        stream.memcpy_dtod(&first, &mut second).map_err(failed("busy"))?;
        stream.memset_zeros(&mut first).map_err(failed("busy"))?;
        rounds += 1;
        if rounds % 8 == 0 {
            stream.synchronize().map_err(failed("busy"))?;
        }
    }
    stream.synchronize().map_err(failed("busy"))?;
    emit(&WorkerEvent::Done { seconds: start.elapsed().as_secs_f64(), rounds });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_json_lines_tagged_by_event() {
        let e = WorkerEvent::Ready { device: "NVIDIA H200".into(), sms: 132, total_memory: 150_000_000_000 };
        let line = serde_json::to_string(&e).unwrap();
        assert_eq!(line, r#"{"event":"ready","device":"NVIDIA H200","sms":132,"total_memory":150000000000}"#);
        assert_eq!(serde_json::from_str::<WorkerEvent>(&line).unwrap(), e);
        let f: WorkerEvent =
            serde_json::from_str(r#"{"event":"failed","stage":"alloc","error":"CUDA_ERROR_OUT_OF_MEMORY"}"#).unwrap();
        assert_eq!(f, WorkerEvent::Failed { stage: "alloc".into(), error: "CUDA_ERROR_OUT_OF_MEMORY".into() });
    }

    #[test]
    fn panics_become_messages() {
        let p: Box<dyn std::any::Any + Send> = Box::new("missing symbol cuInit");
        assert_eq!(panic_message(p.as_ref()), "missing symbol cuInit");
        let p: Box<dyn std::any::Any + Send> = Box::new(String::from("unable to load cuda"));
        assert_eq!(panic_message(p.as_ref()), "unable to load cuda");
        let p: Box<dyn std::any::Any + Send> = Box::new(String::from(
            "Unable to dynamically load the \"cuda\" shared library - searched for library names: [\"libcuda.so\"].",
        ));
        assert_eq!(
            panic_message(p.as_ref()),
            "the cuda driver library (libcuda.so.1) cannot be loaded: no nvidia driver here"
        );
        let p: Box<dyn std::any::Any + Send> = Box::new("x".repeat(300));
        assert_eq!(panic_message(p.as_ref()).chars().count(), 201);
        let p: Box<dyn std::any::Any + Send> = Box::new(7u8);
        assert_eq!(panic_message(p.as_ref()), "the cuda driver library could not be used");
    }
}
