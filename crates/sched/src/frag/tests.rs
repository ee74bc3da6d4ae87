use super::*;
use crate::model::{Cluster, GpuRequest, Request};
use rand::{Rng, SeedableRng};

/// Everything a distribution is, in a comparable form: counts, classes, weights, ratios per model, epoch,
/// tasks seen and the next refresh.
type DistState = (Vec<(TypeKey, f64)>, Vec<Class>, [f64; 3], Vec<(f64, f64)>, u32, u64, u64);

/// Everything a distribution is, in a comparable form.
fn state(d: &Dist) -> DistState {
    let mut counts: Vec<(TypeKey, f64)> = d.counts.iter().map(|(k, v)| (k.clone(), *v)).collect();
    counts.sort_by(|a, b| a.0.cmp(&b.0));
    (
        counts,
        d.classes.clone(),
        [d.cpu_only_weight, d.ratio.0, d.ratio.1],
        d.ratio_by_model.clone(),
        d.epoch,
        d.seen,
        d.next_refresh,
    )
}

/// Observing a batch is observing its tasks one run after another, across the counts where the classes
/// are rebuilt (every power of two up to 4096, then every 4096).
#[test]
fn a_batch_is_its_runs_in_turn() {
    let st = crate::state::State::new(&Cluster::default());
    let shapes: Vec<Shape> = [
        GpuRequest::None,
        GpuRequest::Whole { count: 1 },
        GpuRequest::Whole { count: 8 },
        GpuRequest::Fraction { milli: 250, memory: None },
    ]
    .into_iter()
    .enumerate()
    .map(|(i, gpu)| st.shape(&Request { cpu_milli: 1000 * (i as u64 + 1), memory: 1 << 30, gpu, ..Default::default() }))
    .collect();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(2);
    for case in 0..200 {
        let measure = if case % 2 == 0 { Measure::Paper } else { Measure::Mixture };
        let (mut one, mut all) = (Dist::new(measure), Dist::new(measure));
        // some tasks seen before, then batches
        for _ in 0..rng.gen_range(0..3) {
            let batch: Vec<(Shape, u64)> = (0..rng.gen_range(0..12))
                .map(|_| (shapes[rng.gen_range(0..shapes.len())].clone(), rng.gen_range(0..3000)))
                .collect();
            for (s, n) in &batch {
                one.observe_n(s, *n);
            }
            all.observe_all(&batch);
            assert_eq!(state(&one), state(&all), "case {case}");
        }
    }
}
