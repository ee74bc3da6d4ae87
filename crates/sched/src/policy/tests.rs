use super::*;
use crate::model::{Cluster, Gpu, GpuRequest, Node, Request};

/// Two nodes of four GPUs, the first with one GPU held whole.
fn half_used() -> (State, Shape) {
    let node = |i: usize| Node {
        name: format!("n{i}"),
        cpu_milli: 32_000,
        memory: 256 << 30,
        labels: Default::default(),
        gpus: (0..4)
            .map(|k| Gpu {
                uuid: format!("n{i}-{k}"),
                index: k,
                model: "A100".into(),
                memory: 80 << 30,
                single_user: false,
            })
            .collect(),
    };
    let mut st = State::new(&Cluster { nodes: vec![node(0), node(1)] });
    let one = st.shape(&whole(1));
    st.apply(&Choice { node: 0, gpus: vec![0] }, &one);
    (st, one)
}

fn whole(count: u32) -> Request {
    Request { cpu_milli: 4000, memory: 32 << 30, gpu: GpuRequest::Whole { count }, ..Default::default() }
}

fn share(milli: u32) -> Request {
    Request {
        cpu_milli: 2000,
        memory: 8 << 30,
        gpu: GpuRequest::Fraction { milli, memory: None },
        ..Default::default()
    }
}

/// The default adapts: on whole-GPU work it spreads (a 1-GPU job goes to the empty node, where packing
/// policies put it beside the GPU already held), and once GPU shares carry enough of the demand it
/// places exactly as `fgd+`.
#[test]
fn the_default_spreads_whole_gpus_and_descends_fragmentation_with_shares() {
    assert_eq!(Policy::default(), Policy::Auto);
    let (st, one) = half_used();
    let mut auto = Placer::new(Policy::default(), 0);
    let mut plus = Placer::new(Policy::FgdPlus, 0);
    let two = st.shape(&whole(2));
    for p in [&mut auto, &mut plus] {
        p.observe_n(&one, 30);
        p.observe_n(&two, 10);
    }
    assert_eq!(auto.acting(), Policy::Spread);
    assert_eq!(auto.choose(&st, &one).map(|c| c.node), Some(1), "whole GPUs spread");
    assert_eq!(plus.choose(&st, &one).map(|c| c.node), Some(0), "fgd+ packs");

    // a quarter of the demand in shares: fragmentation can strand capacity now
    let half = st.shape(&share(500));
    for p in [&mut auto, &mut plus] {
        p.observe_n(&half, 40);
        p.dist.rebuild();
    }
    assert!(auto.dist.share_fraction() > 0.2, "{}", auto.dist.share_fraction());
    assert_eq!(auto.acting(), Policy::FgdPlus);
    for s in [&one, &two, &half] {
        assert_eq!(auto.choose(&st, s), plus.choose(&st, s), "{s:?}");
    }
}

/// Told to keep whole nodes (a queue below its guarantee waits for more GPUs than any node has free),
/// the default packs whole GPUs as best fit; with shares it stays `fgd+`, and other policies ignore it.
#[test]
fn keeping_whole_nodes_packs_whole_gpus_under_the_default_only() {
    let (st, one) = half_used();
    let mut auto = Placer::new(Policy::Auto, 0);
    auto.observe_n(&one, 30);
    auto.set_keep_whole(true);
    assert_eq!(auto.acting(), Policy::BestFit);
    assert_eq!(auto.choose(&st, &one).map(|c| c.node), Some(0), "beside the GPU already held");
    auto.set_keep_whole(false);
    assert_eq!(auto.choose(&st, &one).map(|c| c.node), Some(1), "spread again");
    let mut spread = Placer::new(Policy::Spread, 0);
    spread.set_keep_whole(true);
    assert_eq!(spread.acting(), Policy::Spread);
    auto.set_keep_whole(true);
    auto.observe_n(&st.shape(&share(500)), 40);
    auto.dist.rebuild();
    assert_eq!(auto.acting(), Policy::FgdPlus);
}

/// A few shares on a whole-GPU cluster (under [`crate::frag::SHARE_FLOOR`] of the demand) do not make
/// it pack; a task restricted to GPU models does (model contention is `fgd+`'s).
#[test]
fn few_shares_keep_spreading_and_model_restrictions_do_not() {
    let (st, one) = half_used();
    let mut auto = Placer::new(Policy::Auto, 0);
    auto.observe_n(&one, 100);
    auto.observe_n(&st.shape(&share(500)), 2);
    auto.dist.rebuild();
    assert!(auto.dist.share_fraction() < crate::frag::SHARE_FLOOR);
    assert_eq!(auto.acting(), Policy::Spread);
    let mut pinned = whole(1);
    pinned.gpu_models = vec!["A100".into()];
    auto.observe(&st.shape(&pinned));
    auto.dist.rebuild();
    assert_eq!(auto.acting(), Policy::FgdPlus);
}

#[test]
fn names_round_trip() {
    for p in Policy::ALL {
        assert_eq!(p.as_str().parse::<Policy>(), Ok(p));
    }
    assert_eq!(serde_json::to_string(&Policy::Auto).unwrap(), "\"auto\"");
    assert!("packing".parse::<Policy>().unwrap_err().to_string().contains("auto"));
}
