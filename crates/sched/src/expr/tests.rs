use super::*;
use proptest::prelude::*;
use std::collections::BTreeMap;

fn node() -> Node {
    Node {
        name: "gpu-07".into(),
        cpu_milli: 64_000,
        memory: 512 << 30,
        labels: BTreeMap::from([("rack".to_string(), "a".to_string()), ("zone-x".to_string(), "eu".to_string())]),
        gpus: vec![
            Gpu { uuid: "GPU-aa".into(), index: 0, model: "H100".into(), memory: 80 << 30, single_user: false },
            Gpu { uuid: "GPU-bb".into(), index: 1, model: "A100".into(), memory: 40 << 30, single_user: false },
        ],
    }
}

fn holds(src: &str, gpu: Option<usize>) -> bool {
    let n = node();
    let c = Compiled::new(src).unwrap_or_else(|e| panic!("{src}: {e}"));
    c.matches(Context { node: &n, gpu: gpu.map(|i| &n.gpus[i]) })
}

#[test]
fn the_issue_example() {
    let e = r#"gpu.model in ["H100","H200"] && gpu.memory >= 80GiB && node.labels.rack != "b""#;
    assert!(holds(e, Some(0)));
    assert!(!holds(e, Some(1)));
}

#[test]
fn operators() {
    assert!(holds("node.cpu >= 32 && node.memory > 256GiB", None));
    assert!(holds("node.cpu * 1000 == 64000 && node.gpus - 1 == 1 && 7 % 4 == 3 && 10 / 4 == 2.5", None));
    assert!(holds("-node.gpus < 0 && !(node.gpus == 0)", None));
    assert!(holds("node.name startswith \"gpu-\" && node.name endswith '07' && node.name contains \"u-0\"", None));
    assert!(holds("node.name matches \"^gpu-[0-9]+$\" && !(node.name matches \"^cpu\")", None));
    assert!(holds("node.labels[\"zone-x\"] == \"eu\"", None));
    assert!(holds("node.labels.missing != \"x\" && !(node.labels.missing == \"x\")", None));
    assert!(!holds("node.labels.missing < 3 || node.labels.missing >= 3", None));
    assert!(holds("gpu.index in [1, 2] || gpu.uuid == \"GPU-aa\"", Some(0)));
    assert!(holds("1 + 2 * 3 == 7 && (1 + 2) * 3 == 9", None));
    assert!(holds("true && !false || false", None));
    assert!(holds("\"H1\" + \"00\" == \"H100\"", None));
    assert!(holds("1KiB == 1024 && 1KB == 1000 && 2Gi == 2 * 1024 * 1024 * 1024 && 0.5GiB == 512MiB", None));
    // a GPU attribute without a GPU is null
    assert!(!holds("gpu.model == \"H100\"", None));
}

#[test]
fn parse_errors_name_position_and_expectation() {
    let cases = [
        ("gpu.model ==", 12, "a number, string, attribute"),
        ("gpu.model in [\"a\" \"b\"]", 18, "`,` or `]`"),
        ("gpu.colour == 1", 0, "an attribute"),
        ("(node.cpu > 1", 13, "`)`"),
        ("node.cpu > 1 1", 13, "an operator or end of input"),
        ("node.memory > 8Gx", 15, "a unit"),
        ("\"open", 5, "a closing quote"),
        ("node.cpu # 1", 9, "an operand or operator"),
    ];
    for (src, pos, expected) in cases {
        match Compiled::new(src) {
            Err(ExprError::Parse { pos: p, expected: e, .. }) => {
                assert_eq!(p, pos, "{src}: {e}");
                assert!(e.contains(expected), "{src}: {e}");
            }
            other => panic!("{src}: {other:?}"),
        }
    }
    let e = Compiled::new("gpu.model ==").unwrap_err().to_string();
    assert!(e.starts_with("resource expression: at position 12: expected"), "{e}");
    assert!(matches!(Compiled::new("node.name matches \"(\""), Err(ExprError::Pattern { .. })));
    let deep = "(".repeat(500) + "1" + &")".repeat(500);
    assert!(Compiled::new(&deep).is_err());
}

#[test]
fn constrain_sets_masks() {
    let cluster = Cluster { nodes: vec![node()] };
    let st = State::new(&cluster);
    let mut s =
        st.shape(&crate::model::Request { gpu: crate::model::GpuRequest::Whole { count: 1 }, ..Default::default() });
    constrain("gpu.model == \"A100\"", &cluster, &st, &mut s).unwrap();
    assert_eq!(s.gpu_ok, Some(vec![false, true]));
    let mut s = st.shape(&crate::model::Request::default());
    constrain("node.labels.rack == \"b\"", &cluster, &st, &mut s).unwrap();
    assert_eq!(s.node_ok, Some(vec![false]));
}

fn arb_attr() -> impl Strategy<Value = Attr> {
    prop_oneof![
        Just(Attr::NodeName),
        Just(Attr::NodeCpu),
        Just(Attr::NodeMemory),
        Just(Attr::NodeGpus),
        "[a-z][a-z0-9_.-]{0,8}".prop_map(Attr::NodeLabel),
        Just(Attr::GpuModel),
        Just(Attr::GpuMemory),
        Just(Attr::GpuIndex),
        Just(Attr::GpuUuid),
    ]
}

fn arb_op() -> impl Strategy<Value = BinOp> {
    prop::sample::select(vec![
        BinOp::Or,
        BinOp::And,
        BinOp::Eq,
        BinOp::Ne,
        BinOp::Lt,
        BinOp::Le,
        BinOp::Gt,
        BinOp::Ge,
        BinOp::StartsWith,
        BinOp::EndsWith,
        BinOp::Contains,
        BinOp::Add,
        BinOp::Sub,
        BinOp::Mul,
        BinOp::Div,
        BinOp::Rem,
    ])
}

fn arb_expr() -> impl Strategy<Value = Expr> {
    let leaf = prop_oneof![
        (0u32..1_000_000).prop_map(|n| Expr::Num(f64::from(n) / 8.0)),
        "[ -~]{0,6}".prop_map(Expr::Str),
        any::<bool>().prop_map(Expr::Bool),
        arb_attr().prop_map(Expr::Attr),
    ];
    leaf.prop_recursive(5, 48, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Expr::List),
            inner.clone().prop_map(|e| Expr::Not(Box::new(e))),
            inner.clone().prop_map(|e| Expr::Neg(Box::new(e))),
            (arb_op(), inner.clone(), inner.clone()).prop_map(|(o, a, b)| Expr::Bin(o, Box::new(a), Box::new(b))),
            (inner.clone(), prop::collection::vec(inner, 0..3))
                .prop_map(|(a, l)| Expr::In(Box::new(a), Box::new(Expr::List(l)))),
        ]
    })
}

proptest! {
    #[test]
    fn printing_then_parsing_gives_the_same_tree(e in arb_expr()) {
        let text = e.to_string();
        let back = parse(&text).map_err(|err| TestCaseError::fail(format!("{text}: {err}")))?;
        prop_assert_eq!(back, e);
    }

    #[test]
    fn arbitrary_text_never_panics(src in "\\PC{0,64}") {
        if let Ok(c) = Compiled::new(&src) {
            let n = node();
            let _ = c.matches(Context { node: &n, gpu: Some(&n.gpus[0]) });
            let _ = c.matches(Context { node: &n, gpu: None });
        }
    }

    #[test]
    fn expression_like_text_never_panics(
        parts in prop::collection::vec(prop::sample::select(vec![
            "gpu.model", "node.labels.rack", "node.cpu", "==", "!=", "<=", "in", "[", "]", "(", ")", ",", "&&",
            "||", "!", "-", "+", "*", "/", "%", "\"H100\"", "80GiB", "1", "matches", "\"^a(b|c)*$\"", "contains",
            "true", "node.labels[", "\"k\"",
        ]), 0..24)
    ) {
        let src = parts.join(" ");
        if let Ok(c) = Compiled::new(&src) {
            let n = node();
            let _ = c.matches(Context { node: &n, gpu: Some(&n.gpus[1]) });
        }
    }

    #[test]
    fn patterns_never_panic(p in "\\PC{0,16}", t in "\\PC{0,16}") {
        if let Ok(r) = Regex::new(&p) {
            let _ = r.is_match(&t);
        }
    }
}
