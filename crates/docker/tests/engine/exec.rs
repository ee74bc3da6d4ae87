//! Processes in running containers: TTY, size, input, exit codes.

use crate::common::*;
use futures::StreamExt;
use gpuhub_driver::{EngineError, ExecHandle, ExecSpec};
use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// Reads an exec's output to its end.
async fn read_all(handle: &mut ExecHandle) -> String {
    let mut out = Vec::new();
    tokio::time::timeout(PATIENCE, async {
        while let Some(chunk) = handle.output.next().await {
            out.extend_from_slice(&chunk.unwrap());
        }
    })
    .await
    .expect("the output ends with the process");
    String::from_utf8_lossy(&out).into_owned()
}

/// The exit code, through the handle's wait (the output read to its end first).
async fn exit_code(handle: &ExecHandle) -> i64 {
    tokio::time::timeout(PATIENCE, handle.wait()).await.expect("the wait resolves").unwrap()
}

fn exec(command: &[&str], tty: Option<(u16, u16)>) -> ExecSpec {
    ExecSpec {
        command: command.iter().map(|s| s.to_string()).collect(),
        user: "10000:10000".into(),
        tty,
        ..Default::default()
    }
}

#[tokio::test]
async fn exec_with_tty_runs_as_the_user_and_reports_its_exit() {
    let rt = runtime().await;
    let mut cleanup = Cleanup::default();
    let id = run(&rt, &mut cleanup, &spec(&unique("exec"), "sleep 300")).await;

    let mut h = rt.exec(&id, &exec(&["id", "-u"], Some((80, 24)))).await.unwrap();
    assert_eq!(read_all(&mut h).await, "10000\r\n", "a TTY ends lines with CR LF");
    assert_eq!(exit_code(&h).await, 0);

    let mut h = rt.exec(&id, &exec(&["sh", "-c", "echo out; echo err >&2; exit 5"], None)).await.unwrap();
    let out = read_all(&mut h).await;
    assert!(out.contains("out\n") && out.contains("err\n"), "{out:?}");
    assert_eq!(exit_code(&h).await, 5);
    assert!(matches!(h.resize(80, 24).await, Err(EngineError::Rejected(_))), "no terminal to resize");

    let mut env = exec(&["sh", "-c", "echo $WHO in $(pwd)"], None);
    env.env.insert("WHO".into(), "alice".into());
    env.working_dir = Some("/tmp".into());
    let mut h = rt.exec(&id, &env).await.unwrap();
    assert_eq!(read_all(&mut h).await, "alice in /tmp\n");

    // The wait is one inspect once the output has ended: the daemon has the code by then, every time.
    for i in 0..20u8 {
        let tty = (i % 2 == 0).then_some((80, 24));
        let mut h = rt.exec(&id, &exec(&["sh", "-c", &format!("echo {i}; exit {i}")], tty)).await.unwrap();
        assert_eq!(read_all(&mut h).await.trim_end(), i.to_string());
        assert_eq!(exit_code(&h).await, i64::from(i), "exec {i}, tty {tty:?}");
    }
    rt.stop(&id, Duration::ZERO).await.unwrap();
    assert!(matches!(rt.exec(&id, &exec(&["true"], None)).await, Err(EngineError::Rejected(_))));
    assert!(matches!(
        rt.exec("gpuhub-test-no-such-container", &exec(&["true"], None)).await,
        Err(EngineError::NotFound(_))
    ));
}

#[tokio::test]
async fn exec_terminal_is_sized_resized_and_takes_input() {
    let rt = runtime().await;
    let mut cleanup = Cleanup::default();
    let id = run(&rt, &mut cleanup, &spec(&unique("tty"), "sleep 300")).await;

    // API 1.41 cannot size a terminal at creation: `exec` sizes it right after the start, which a
    // process that reads its input first (like any shell) can rely on.
    let mut h = rt.exec(&id, &exec(&["sh", "-c", "read x; stty size"], Some((100, 30)))).await.unwrap();
    h.input.write_all(b"\n").await.unwrap();
    let out = read_all(&mut h).await;
    assert!(out.ends_with("30 100\r\n"), "rows cols as asked at the start: {out:?}");

    // An interactive shell: wait until it has read a first line, resize, then ask it for the size.
    let mut h = rt.exec(&id, &exec(&["sh"], Some((80, 24)))).await.unwrap();
    h.input.write_all(b"echo RE\"\"ADY\n").await.unwrap();
    let mut seen = String::new();
    tokio::time::timeout(PATIENCE, async {
        while !seen.contains("READY\r\n") {
            seen.push_str(&String::from_utf8_lossy(&h.output.next().await.unwrap().unwrap()));
        }
    })
    .await
    .expect("the shell answers");
    h.resize(120, 40).await.unwrap();
    h.input.write_all(b"stty size; exit 9\n").await.unwrap();
    let rest = read_all(&mut h).await;
    assert!(rest.contains("40 120\r\n"), "{rest:?}");
    assert_eq!(exit_code(&h).await, 9);
}
