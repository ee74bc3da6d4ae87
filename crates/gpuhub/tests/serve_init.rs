//! `gpuhub serve --init`: a commented config for a local trial, written once (an existing file is never
//! overwritten), which the server then starts from.

use gpuhub_testkit::process::{clean_command, describe};

/// `gpuhub ARGS` in `dir`, without this process's `GPUHUB_*` variables (the kit's command).
fn gpuhub(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    clean_command(env!("CARGO_BIN_EXE_gpuhub")).current_dir(dir).args(args).output().expect("run gpuhub")
}

#[test]
fn init_writes_a_trial_config_once() {
    let dir = tempfile::tempdir().unwrap();
    let out = gpuhub(dir.path(), &["serve", "--init"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(stdout, "wrote gpuhub.toml: a commented config for a local trial; start with `gpuhub serve`\n");
    let text = std::fs::read_to_string(dir.path().join("gpuhub.toml")).unwrap();
    assert_eq!(text, gpuhub_server::config::TRIAL_CONFIG);
    let c = gpuhub_server::config::Config::load(Some(&dir.path().join("gpuhub.toml")), Vec::new()).unwrap();
    assert_eq!(c.listen.to_string(), "127.0.0.1:8080");

    // a second --init keeps the file and says so
    std::fs::write(dir.path().join("gpuhub.toml"), "listen = \"127.0.0.1:9\"\n").unwrap();
    let out = gpuhub(dir.path(), &["serve", "--init"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("error: cannot write gpuhub.toml (an existing file is kept): "), "{stderr}");
    assert_eq!(std::fs::read_to_string(dir.path().join("gpuhub.toml")).unwrap(), "listen = \"127.0.0.1:9\"\n");

    // elsewhere, with the command that starts it
    let out = gpuhub(dir.path(), &["serve", "--init", "--config", "trial/hub.toml"]);
    assert_eq!(out.status.code(), Some(1), "the folder does not exist");
    std::fs::create_dir(dir.path().join("trial")).unwrap();
    let out = gpuhub(dir.path(), &["serve", "--init", "--config", "trial/hub.toml"]);
    assert!(String::from_utf8_lossy(&out.stdout).ends_with("start with `gpuhub serve --config trial/hub.toml`\n"));
}
