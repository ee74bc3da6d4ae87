//! The CUDA load: `gpuhub gpu-check-worker`, the child process gpu-check starts (as a chosen UID) to
//! put real work on a GPU. It loads the CUDA driver library at run time (cudarc's dynamic loading, so
//! the binary builds and starts without CUDA), makes a context on device 0 of what it is shown,
//! allocates the asked memory in one piece and keeps the GPU busy for the asked time: a kernel of its
//! own (the PTX below, compiled by the driver's JIT, so no CUDA toolkit is needed) on a small buffer,
//! plus device-to-device copies and memsets over the allocation. It tells what it did on stdout, one
//! JSON [`WorkerEvent`] a line.

use cudarc::driver::sys::CUdevice_attribute;
use cudarc::driver::{CudaContext, CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::sync::Arc;
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
        /// Launches of the worker's own kernel (0 where it could not be loaded).
        #[serde(default)]
        kernels: u64,
        /// Why the kernel could not be loaded or launched, where it could not (the copies went on).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        kernel_error: Option<String>,
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
    let mut kernel = Kernel::load(&ctx, &stream);
    let start = Instant::now();
    let busy = Duration::from_secs_f64(job.seconds.max(0.0));
    let mut rounds = 0u64;
    while start.elapsed() < busy {
        kernel.launch(&stream);
        let (mut first, mut second) = buffer.split_at_mut(bytes / 2);
        stream.memcpy_dtod(&first, &mut second).map_err(failed("busy"))?;
        stream.memset_zeros(&mut first).map_err(failed("busy"))?;
        rounds += 1;
        if rounds % 8 == 0 {
            stream.synchronize().map_err(failed("busy"))?;
        }
    }
    stream.synchronize().map_err(failed("busy"))?;
    let (kernels, kernel_error) = kernel.outcome();
    emit(&WorkerEvent::Done { seconds: start.elapsed().as_secs_f64(), rounds, kernels, kernel_error });
    Ok(())
}

/// The worker's own kernel: each thread of `n` runs `iters` dependent integer multiply-adds on its word
/// of the buffer (an LCG step) and stores the result, so the SMs compute, which NVML's utilisation
/// counts (copies and memsets may not be counted).
const BUSY_PTX: &str = r#"
.version 7.0
.target sm_50
.address_size 64

.visible .entry gpuhub_busy(
    .param .u64 gpuhub_busy_buf,
    .param .u32 gpuhub_busy_n,
    .param .u32 gpuhub_busy_iters
)
{
    .reg .pred %p<3>;
    .reg .b32 %r<10>;
    .reg .b64 %rd<6>;

    ld.param.u64 %rd1, [gpuhub_busy_buf];
    ld.param.u32 %r1, [gpuhub_busy_n];
    ld.param.u32 %r2, [gpuhub_busy_iters];
    mov.u32 %r3, %ctaid.x;
    mov.u32 %r4, %ntid.x;
    mov.u32 %r5, %tid.x;
    mad.lo.s32 %r6, %r3, %r4, %r5;
    setp.ge.u32 %p1, %r6, %r1;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.u32 %rd3, %r6, 4;
    add.s64 %rd4, %rd2, %rd3;
    ld.global.u32 %r7, [%rd4];
    mov.u32 %r8, 0;
LOOP:
    mad.lo.s32 %r7, %r7, 1664525, 1013904223;
    add.s32 %r8, %r8, 1;
    setp.lt.u32 %p2, %r8, %r2;
    @%p2 bra LOOP;
    st.global.u32 [%rd4], %r7;
DONE:
    ret;
}
"#;

/// Words the kernel works on (4 MiB), threads a block, and steps each thread takes a launch.
const KERNEL_WORDS: u32 = 1 << 20;
const KERNEL_BLOCK: u32 = 256;
const KERNEL_ITERS: u32 = 1 << 16;

/// The kernel and its buffer, or why they could not be had. Failing to load or launch it leaves the
/// copies and memsets as the load: the `utilisation` row then says whether NVML counted those.
#[derive(Debug)]
struct Kernel {
    loaded: Result<(CudaFunction, CudaSlice<u32>), String>,
    launches: u64,
}

impl Kernel {
    fn load(ctx: &Arc<CudaContext>, stream: &Arc<CudaStream>) -> Kernel {
        let loaded = (|| {
            let module = ctx.load_module(Ptx::from_src(BUSY_PTX))?;
            let function = module.load_function("gpuhub_busy")?;
            let words = stream.alloc_zeros::<u32>(KERNEL_WORDS as usize)?;
            Ok::<_, cudarc::driver::DriverError>((function, words))
        })()
        .map_err(|e| format!("{e:?}"));
        Kernel { loaded, launches: 0 }
    }

    fn launch(&mut self, stream: &Arc<CudaStream>) {
        let Ok((function, words)) = &mut self.loaded else { return };
        let cfg = LaunchConfig {
            grid_dim: (KERNEL_WORDS.div_ceil(KERNEL_BLOCK), 1, 1),
            block_dim: (KERNEL_BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut args = stream.launch_builder(function);
        args.arg(words).arg(&KERNEL_WORDS).arg(&KERNEL_ITERS);
        // SAFETY: the PTX's parameters are exactly (a u32 buffer, its length in words, a step count),
        // pushed in that order and those types; each thread touches only its own word below the length,
        // and the buffer is KERNEL_WORDS words long and lives (in self) until after the last synchronize.
        #[allow(unsafe_code)]
        let launched = unsafe { args.launch(cfg) };
        match launched {
            Ok(_) => self.launches += 1,
            Err(e) => self.loaded = Err(format!("{e:?}")),
        }
    }

    fn outcome(&self) -> (u64, Option<String>) {
        (self.launches, self.loaded.as_ref().err().cloned())
    }
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
    fn done_says_the_kernel_launches_or_why_there_were_none() {
        let old: WorkerEvent = serde_json::from_str(r#"{"event":"done","seconds":5.0,"rounds":9}"#).unwrap();
        assert_eq!(old, WorkerEvent::Done { seconds: 5.0, rounds: 9, kernels: 0, kernel_error: None });
        let failed = WorkerEvent::Done {
            seconds: 5.0,
            rounds: 9,
            kernels: 0,
            kernel_error: Some("CUDA_ERROR_INVALID_PTX".into()),
        };
        let line = serde_json::to_string(&failed).unwrap();
        assert!(line.contains(r#""kernel_error":"CUDA_ERROR_INVALID_PTX""#), "{line}");
        assert_eq!(serde_json::from_str::<WorkerEvent>(&line).unwrap(), failed);
    }

    #[test]
    fn the_ptx_declares_the_kernel_loaded_with_its_three_parameters() {
        assert!(BUSY_PTX.contains(".visible .entry gpuhub_busy("));
        let params = BUSY_PTX.matches(".param ").count();
        assert_eq!(params, 3, "a u32 buffer, its length, the steps: as Kernel::launch pushes them");
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
