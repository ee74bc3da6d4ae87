//! Workspace-access benchmark (proxy, configurable-http-proxy, SSH gateway); see `scripts/bench-access.sh`.
//! Being written: for now it does nothing.

fn main() {}
