#!/usr/bin/env bash
# The newcomer's path from a fresh clone, timed (issue 21): clone this repository, run the README's
# setup, build the README's binary, then `crates/gpuhub/tests/newcomer_path.rs` measures `gpuhub serve`
# with embedded defaults → the admin's first sign-in → a student → a notebook's first cell, in headless
# Chromium, and prints the timeline. Needs port 8080 free and the JupyterLab image (built here if absent).
#
#   bash scripts/newcomer-run.sh            # clones into a temporary directory, removed at the end
#
# CARGO_TARGET_DIR, when set, is used for the clone's release build (to reuse what another checkout built; the
# times then are not a cold build's).
set -euo pipefail
src="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
clone="$(mktemp -d /tmp/gpuhub-newcomer-XXXXXX)"
trap 'rm -rf "$clone"' EXIT
stamp() { date -u +%H:%M:%S; }
secs() { local t0=$1; echo $(( $(date +%s) - t0 )); }

echo "newcomer-run: $(stamp) cloning $src into $clone"
git clone -q "$src" "$clone/gpuhub"
cd "$clone/gpuhub"
echo "newcomer-run: commit $(git rev-parse --short HEAD)"

t=$(date +%s)
bash scripts/setup-debian.sh >"$clone/setup.log" 2>&1 || { tail -n 30 "$clone/setup.log"; exit 1; }
echo "newcomer-run: $(stamp) scripts/setup-debian.sh: $(secs "$t") s"

t=$(date +%s)
cargo build --release --bin gpuhub 2>"$clone/build.log" || { tail -n 30 "$clone/build.log"; exit 1; }
echo "newcomer-run: $(stamp) cargo build --release --bin gpuhub: $(secs "$t") s"
bin="${CARGO_TARGET_DIR:-$clone/gpuhub/target}/release/gpuhub"

t=$(date +%s)
bash scripts/build-jupyter-image.sh >"$clone/image.log" 2>&1 || { tail -n 30 "$clone/image.log"; exit 1; }
echo "newcomer-run: $(stamp) the JupyterLab image: $(secs "$t") s"

# the measuring test (headless Chromium) is built in the checkout this script was run from, so that the
# clone needs only the README's release build; it measures the clone's binary
cd "$src"
t=$(date +%s)
env -u CARGO_TARGET_DIR cargo test -q -p gpuhub --test newcomer_path --no-run 2>"$clone/test-build.log" ||
    { tail -n 30 "$clone/test-build.log"; exit 1; }
echo "newcomer-run: $(stamp) the measuring test built (in $src): $(secs "$t") s"

status=0
GPUHUB_NEWCOMER_BIN="$bin" env -u CARGO_TARGET_DIR cargo test -q -p gpuhub --test newcomer_path -- --ignored --nocapture \
    >"$clone/run.log" 2>&1 </dev/null || status=$?
grep -E '^newcomer' "$clone/run.log" || true
[ "$status" = 0 ] || { tail -n 40 "$clone/run.log"; echo "newcomer-run: the path failed" >&2; }
exit "$status"
