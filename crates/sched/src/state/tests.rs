use super::*;
use crate::model::{Gpu, Node};
use rand::{Rng, SeedableRng};

/// The same shape with an explicit list of every model, which takes the GPU-by-GPU path.
fn slow(st: &State, s: &Shape) -> Shape {
    Shape { models: Some(vec![true; st.models.len()]), ..s.clone() }
}

/// What `copies` answers, as first written: the least of the copies the CPUs, the memory and the GPUs
/// allow.
fn copies_plain(st: &State, n: usize, s: &Shape) -> u64 {
    let node = &st.nodes[n];
    let by_cpu = node.cpu_free.checked_div(s.cpu).unwrap_or(u64::MAX);
    let by_mem = node.mem_free.checked_div(s.mem).unwrap_or(u64::MAX);
    let by_gpu = if s.count == 0 {
        u64::MAX
    } else if s.need >= WHOLE || s.count > 1 {
        node.gpu_range().filter(|&g| s.gpu_fits(st, g)).count() as u64 / u64::from(s.count)
    } else {
        node.gpu_range().filter(|&g| s.gpu_allowed(st, g)).map(|g| u64::from(st.gpu_free[g] / s.need.max(1))).sum()
    };
    by_cpu.min(by_mem).min(by_gpu)
}

/// Whole and fractional work taken and given back in every way a state allows: each node's count of
/// wholly free GPUs stays right, and the answers that rest on it (`fits`, `copies`) are those of the
/// GPU-by-GPU path.
#[test]
fn wholly_free_counts_follow_every_change() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
    let cluster = Cluster {
        nodes: (0..6)
            .map(|i| Node {
                name: format!("n{i}"),
                cpu_milli: 32_000,
                memory: 128 << 30,
                labels: Default::default(),
                gpus: (0..1 + i % 4)
                    .map(|k| Gpu {
                        uuid: format!("n{i}-{k}"),
                        index: k,
                        model: "A".into(),
                        memory: 40 << 30,
                        single_user: false,
                    })
                    .collect(),
            })
            .collect(),
    };
    let mut st = State::new(&cluster);
    let shapes: Vec<Shape> = [
        GpuRequest::Whole { count: 1 },
        GpuRequest::Whole { count: 2 },
        GpuRequest::Fraction { milli: 300, memory: None },
        GpuRequest::Fraction { milli: 600, memory: None },
    ]
    .into_iter()
    .enumerate()
    .map(|(i, gpu)| {
        let (cpu_milli, memory) = if i % 2 == 0 { (1000, 1 << 30) } else { (7000, 20 << 30) };
        st.shape(&Request { cpu_milli, memory, gpu, ..Default::default() })
    })
    .chain([st.shape(&Request { cpu_milli: 3000, memory: 0, ..Default::default() })])
    .collect();
    let mut applied: Vec<(Choice, Shape)> = Vec::new();
    let mut held: Vec<Hold> = Vec::new();
    let mut taken: Vec<Taken> = Vec::new();
    for step in 0..4000 {
        match rng.gen_range(0..6) {
            0 | 1 => {
                let s = &shapes[rng.gen_range(0..shapes.len() - 1)];
                let n = rng.gen_range(0..st.nodes.len());
                if st.fits(n, s) {
                    let gpus = crate::policy::pick_gpus(&st, n, s, false);
                    let c = Choice { node: n as u32, gpus };
                    if rng.gen_bool(0.5) {
                        st.apply(&c, s);
                        applied.push((c, s.clone()));
                    } else {
                        let h = Hold::of(&c, s);
                        st.hold(&h);
                        held.push(h);
                    }
                }
            }
            2 if !applied.is_empty() => {
                let (c, s) = applied.swap_remove(rng.gen_range(0..applied.len()));
                st.release(&c, &s);
            }
            3 if !held.is_empty() => {
                let h = held.swap_remove(rng.gen_range(0..held.len()));
                st.unhold(&h);
            }
            4 => {
                let s = &shapes[rng.gen_range(0..2)];
                let n = rng.gen_range(0..st.nodes.len());
                let g = st.nodes[n].gpu_range().take(s.count as usize).map(|g| g as u32).collect();
                taken.push(st.take(&Hold::of(&Choice { node: n as u32, gpus: g }, s)));
            }
            _ => {
                if let Some(t) = taken.pop() {
                    st.restore(&t);
                }
            }
        }
        for (n, node) in st.nodes.iter().enumerate() {
            let k = node.gpu_range().filter(|&g| st.gpu_free[g] >= WHOLE).count() as u32;
            assert_eq!(node.whole_free, k, "step {step}, node {n}");
            for s in &shapes {
                assert_eq!(st.fits(n, s), st.fits(n, &slow(&st, s)), "step {step}, node {n}, {s:?}");
                assert_eq!(st.copies(n, s), st.copies(n, &slow(&st, s)), "step {step}, node {n}, {s:?}");
                assert_eq!(st.copies(n, s), copies_plain(&st, n, s), "step {step}, node {n}, {s:?}");
            }
        }
    }
}
