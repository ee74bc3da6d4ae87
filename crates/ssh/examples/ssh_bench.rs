//! Throughput of 1 GiB through the gateway (OpenSSH `ssh … cat`) against `docker exec`, and a small
//! command's round trip. Needs Docker and `gpuhub/busybox:latest` (scripts/build-busybox-image.sh).
//! Run: `cargo run --release -p gpuhub-ssh --example ssh_bench`.

use async_trait::async_trait;
use gpuhub_docker::DockerRuntime;
use gpuhub_ssh::{Denied, GatewayBackend, PublicKey, SshGateway, Target};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug)]
struct Backend {
    container: String,
}

#[async_trait]
impl GatewayBackend for Backend {
    async fn authorize(&self, _user: &str, _key: &PublicKey) -> Result<Target, Denied> {
        Ok(Target {
            login: "alice".into(),
            owner: "alice".into(),
            workspace: "bench".into(),
            user: "10000:10000".into(),
            home: "/tmp".into(),
            member: Some(gpuhub_driver::MemberRef::new(&self.container, 0)),
            problem: None,
            lease: Default::default(),
        })
    }
}

fn sh(script: &str) -> Duration {
    let t = Instant::now();
    let status = Command::new("sh").arg("-c").arg(script).stdout(Stdio::null()).status().unwrap();
    assert!(status.success(), "{script}");
    t.elapsed()
}

fn best(n: usize, script: &str) -> Duration {
    (0..n).map(|_| sh(script)).min().unwrap()
}

#[tokio::main]
async fn main() {
    let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into());
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key");
    let ok = Command::new("ssh-keygen").args(["-q", "-t", "ed25519", "-N", "", "-f"]).arg(&key).status().unwrap();
    assert!(ok.success());
    let out = Command::new("docker")
        .args(["run", "-d", "--rm", "--label", "gpuhub.workload=bench", "--user", "10000:10000"])
        .args(["gpuhub/busybox:latest", "sleep", "100000"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let container = String::from_utf8(out.stdout).unwrap().trim().to_string();
    sh(&format!("docker exec {container} sh -c 'head -c 1073741824 /dev/zero > /tmp/1g'"));

    let runtime = DockerRuntime::connect().await.unwrap();
    let node =
        gpuhub_core::node::NodeCapacity::cpu_only("bench", gpuhub_core::CpuMilli(1000), gpuhub_core::Bytes(1 << 30));
    let engine = Arc::new(gpuhub_docker::DockerEngine::new(runtime, node, gpuhub_docker::GpuMode::None));
    let backend = Arc::new(Backend { container: container.clone() });
    let gateway = SshGateway::bind("127.0.0.1:0", &dir.path().join("host"), backend, engine).await.unwrap();
    let port = gateway.local_addr().port();
    tokio::spawn(gateway.run(std::future::pending()));

    let ssh = format!(
        "ssh -F /dev/null -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes \
         -o IdentitiesOnly=yes -o LogLevel=ERROR -i {} -p {port} bench@127.0.0.1",
        key.display()
    );
    let gib = |d: Duration| 1024.0 / d.as_secs_f64();
    if let Ok(script) = std::env::var("SSH_BENCH_ONLY") {
        let script = script.replace("SSH", &ssh).replace("CONTAINER", &container);
        let t = tokio::task::spawn_blocking(move || sh(&script)).await;
        sh(&format!("docker rm -f {container}"));
        println!("{:?}", t.unwrap());
        return;
    }
    let results = tokio::task::spawn_blocking(move || {
        let down_ssh = best(3, &format!("{ssh} cat /tmp/1g | wc -c"));
        let down_exec = best(3, &format!("docker exec {container} cat /tmp/1g | wc -c"));
        let up_ssh = best(3, &format!("head -c 1073741824 /dev/zero | {ssh} 'cat > /dev/null'"));
        let gcm = ssh.replace("ssh -F", "ssh -c aes256-gcm@openssh.com -F");
        let down_gcm = best(3, &format!("{gcm} cat /tmp/1g | wc -c"));
        let up_gcm = best(3, &format!("head -c 1073741824 /dev/zero | {gcm} 'cat > /dev/null'"));
        let up_exec =
            best(3, &format!("head -c 1073741824 /dev/zero | docker exec -i {container} sh -c 'cat > /dev/null'"));
        let rt_ssh = best(10, &format!("{ssh} true"));
        let rt_exec = best(10, &format!("docker exec {container} true"));
        sh(&format!("docker rm -f {container}"));
        (down_ssh, down_exec, up_ssh, up_exec, rt_ssh, rt_exec, down_gcm, up_gcm)
    })
    .await
    .unwrap();
    let (down_ssh, down_exec, up_ssh, up_exec, rt_ssh, rt_exec, down_gcm, up_gcm) = results;
    println!("{:<28} {:>12} {:>12}", "", "ssh gateway", "docker exec");
    println!("{:<28} {:>9.0} MiB/s {:>9.0} MiB/s", "1 GiB out (cat file)", gib(down_ssh), gib(down_exec));
    println!("{:<28} {:>9.0} MiB/s {:>9.0} MiB/s", "1 GiB in (stdin)", gib(up_ssh), gib(up_exec));
    println!("{:<28} {:>9.0} MiB/s", "1 GiB out, aes256-gcm", gib(down_gcm));
    println!("{:<28} {:>9.0} MiB/s", "1 GiB in, aes256-gcm", gib(up_gcm));
    println!("{:<28} {:>12.0?} {:>12.0?}", "`true` round trip (best)", rt_ssh, rt_exec);
}
