use super::*;

fn spec(name: &str, members: u32) -> RunSpec {
    let mut spec = RunSpec {
        command: vec!["true".into()],
        labels: BTreeMap::from([(LABEL_WORKLOAD.to_owned(), "w1".to_owned())]),
        ..run_spec(name, members)
    };
    for m in &mut spec.members {
        m.node = Some("n".into());
        m.gpus = GpuGrant::Whole { count: 1, uuids: vec![format!("GPU-{}", m.index)] };
    }
    spec
}

#[tokio::test]
async fn records_and_emits_per_member() {
    let e = FakeEngine::new();
    let mut ev = e.events().await.unwrap();
    let run = e.submit(&spec("a", 2)).await.unwrap();
    assert_eq!(run.id, "a");
    assert_eq!(run.members[1].gpus, ["GPU-1"]);
    assert!(matches!(e.submit(&spec("a", 1)).await, Err(EngineError::Rejected(_))));
    for member in 0..2 {
        let want = EngineEvent::Started { run: "a".into(), workload: "w1".into(), member };
        assert_eq!(ev.next().await.unwrap().unwrap(), want);
    }
    e.exit_member("a", 1, 3);
    let want = EngineEvent::Exited { run: "a".into(), workload: "w1".into(), member: 1, exit_code: 3 };
    assert_eq!(ev.next().await.unwrap().unwrap(), want);
    let seen = e.observe("a").await.unwrap();
    assert_eq!(seen.members[1].state, MemberState::Exited(3));
    assert!(!seen.ended());
    e.cancel("a", Duration::ZERO).await.unwrap();
    assert!(e.observe("a").await.unwrap().ended());
    let mut bad = spec("b", 1);
    bad.image = "nope".into();
    assert!(matches!(e.submit(&bad).await, Err(EngineError::ImageNotFound(_))));
    assert_eq!(e.calls().len(), 4);
    e.set_down(true);
    assert!(matches!(e.list_runs().await, Err(EngineError::Unavailable(_))));
}

#[tokio::test]
async fn engine_placed_runs_wait_until_started() {
    let e = FakeEngine::engine_placed();
    let run = e.submit(&spec("a", 2)).await.unwrap();
    assert_ne!(run.id, "a", "the engine names its runs");
    assert_eq!(run.pending.as_ref().unwrap().message, FAKE_PENDING);
    assert!(run.members.iter().all(|m| m.state == MemberState::Pending && m.gpus.is_empty()));
    let target = MemberRef::new(&run.id, 0);
    assert!(e.endpoint(&target, 80).await.is_err(), "a waiting member has no endpoint");
    e.start_pending(&run.id, "node1", &[&["node1/gpu0"], &["node1/gpu1"]]);
    let seen = e.observe(&run.id).await.unwrap();
    assert!(seen.pending.is_none());
    assert_eq!(seen.members[1].node.as_deref(), Some("node1"));
    assert_eq!(seen.members[1].gpus, ["node1/gpu1"]);
    assert_eq!(e.endpoint(&target, 80).await.unwrap().port(), 80);
}

async fn read(e: &FakeEngine, run: &str, tail: Option<u64>) -> Vec<u8> {
    let mut out = Vec::new();
    let mut s = e.logs(&MemberRef::new(run, 0), false, tail).await.unwrap();
    while let Some(chunk) = s.next().await {
        out.extend_from_slice(&chunk.unwrap());
    }
    out
}

#[tokio::test]
async fn filler_is_made_as_read_and_tail_counts_lines() {
    let e = FakeEngine::new();
    let id = e.submit(&spec("a", 1)).await.unwrap().id;
    e.push_log(&id, "one\ntwo\n");
    e.push_filler(&id, 3000);
    e.push_log(&id, "last\n");
    let all = read(&e, &id, None).await;
    assert_eq!(all.len(), 8 + 3000 * 64 + 5);
    let mut s = e.logs(&MemberRef::new(&id, 0), false, None).await.unwrap();
    assert_eq!(s.next().await.unwrap().unwrap(), "one\ntwo\n");
    assert_eq!(s.next().await.unwrap().unwrap().len() as u64, FILLER_CHUNK_LINES * 64, "filler comes in 64 KiB chunks");
    for n in [0, 1, 2, 5, 3000, 3001, 3002, 3003, 9999] {
        let want: Vec<&[u8]> = all.split_inclusive(|b| *b == b'\n').collect();
        let want = want[want.len().saturating_sub(n as usize)..].concat();
        assert_eq!(read(&e, &id, Some(n)).await, want, "tail {n}");
    }
    e.push_log(&id, "no newline");
    assert_eq!(read(&e, &id, Some(2)).await, b"last\nno newline");
}

#[tokio::test]
async fn usage_is_what_the_test_scripted() {
    let e = FakeEngine::new();
    assert!(e.capabilities().usage);
    let id = e.submit(&spec("a", 2)).await.unwrap().id;
    assert_eq!(e.usage(&id).await.unwrap(), [], "nothing scripted: nothing measured");
    let scripted = vec![
        MemberUsage {
            index: 0,
            cpu_seconds: 1.5,
            memory_used: gpuhub_core::Bytes(200 << 20),
            memory_limit: Some(gpuhub_core::Bytes(1 << 30)),
            pids: vec![4242, 4243],
        },
        MemberUsage {
            index: 1,
            cpu_seconds: 0.0,
            memory_used: gpuhub_core::Bytes(0),
            memory_limit: None,
            pids: vec![],
        },
    ];
    e.set_usage(&id, scripted.clone());
    assert_eq!(e.usage(&id).await.unwrap(), scripted);
    e.set_usage("nope", scripted.clone());
    assert!(matches!(e.usage("nope").await, Err(EngineError::NotFound(r)) if r == "run nope"));
    let usage_calls: Vec<Call> = e.calls().into_iter().filter(|c| matches!(c, Call::Usage(_))).collect();
    assert_eq!(usage_calls, [Call::Usage(id.clone()), Call::Usage(id.clone()), Call::Usage("nope".into())]);
    e.set_down(true);
    assert!(matches!(e.usage(&id).await, Err(EngineError::Unavailable(_))));
    e.set_down(false);
    e.remove(&id).await.unwrap();
    assert!(matches!(e.usage(&id).await, Err(EngineError::NotFound(_))), "a removed run has no usage");
}

#[tokio::test]
async fn an_exec_echoes_its_command_and_waits_through_its_handle() {
    let e = FakeEngine::new();
    e.submit(&spec("a", 1)).await.unwrap();
    let m = MemberRef::new("a", 0);
    let tty = ExecSpec { command: vec!["echo".into(), "hi".into()], tty: Some((80, 24)), ..Default::default() };
    let mut h = e.exec(&m, &tty).await.unwrap();
    h.write(b"typed\n").await.unwrap();
    h.resize(120, 40).await.unwrap();
    let out: Vec<bytes::Bytes> = h.output.by_ref().map(Result::unwrap).collect().await;
    assert_eq!(out.concat(), b"echo hi\n");
    assert_eq!(h.wait().await.unwrap(), 0);
    let piped = e.exec(&m, &ExecSpec { tty: None, ..tty.clone() }).await.unwrap();
    assert!(matches!(piped.resize(80, 24).await, Err(EngineError::Rejected(_))), "no terminal to resize");
    assert!(matches!(e.calls().last(), Some(Call::Exec(member, spec)) if *member == m && spec.tty.is_none()));
    e.cancel("a", Duration::ZERO).await.unwrap();
    assert!(matches!(e.exec(&m, &tty).await, Err(EngineError::Rejected(_))), "not running");
}
