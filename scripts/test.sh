#!/usr/bin/env bash
# The full check, as CI runs it (.ci/run): host setup (scripts/setup-debian.sh, skipped with
# GPUHUB_SKIP_SETUP=1), the Slurm dev cluster (scripts/slurm-dev-cluster.sh start), then formatting,
# clippy with warnings as errors, and the whole test suite with PostgreSQL at $GPUHUB_TEST_POSTGRES_URL.
# Stops at the first failing stage.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
[ -d "$HOME/.cargo/bin" ] && export PATH="$HOME/.cargo/bin:$PATH"

export GPUHUB_TEST_POSTGRES_URL="${GPUHUB_TEST_POSTGRES_URL:-postgres://gpuhub:gpuhub@127.0.0.1:5432/postgres}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
# A clean clone gains nothing from incremental caches, and they took a third of target/ (disk).
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

total_start=$SECONDS
stage() {
    local name="$1"
    shift
    printf '\n==> [%s] %s\n' "$name" "$*"
    local start=$SECONDS
    if "$@"; then
        printf '==> [%s] ok in %ds\n' "$name" "$((SECONDS - start))"
    else
        local rc=$?
        printf '==> [%s] FAILED (exit %d) after %ds\n' "$name" "$rc" "$((SECONDS - start))" >&2
        exit "$rc"
    fi
}

if [ "${GPUHUB_SKIP_SETUP:-0}" = 1 ]; then
    echo "==> [setup] skipped (GPUHUB_SKIP_SETUP=1)"
else
    stage setup bash scripts/setup-debian.sh
fi
# the two-node Slurm cluster the Slurm engine's tests run against (idempotent: a running one is left
# alone); GPUHUB_SLURM_TESTS=skip skips both the cluster and those tests
if [ "${GPUHUB_SLURM_TESTS:-}" = skip ]; then
    echo "==> [slurm] skipped (GPUHUB_SLURM_TESTS=skip)"
else
    stage slurm bash scripts/slurm-dev-cluster.sh start
fi
# no crate depends upward and no module circle beyond the listed ones (scripts/known-cycles.txt)
stage layers python3 scripts/check-layers.py
stage fmt cargo fmt --all -- --check
stage clippy cargo clippy --workspace --all-targets -- -D warnings
# the API against its own OpenAPI document (Schemathesis against a live server, a few minutes)
if [ "${GPUHUB_SKIP_SCHEMATHESIS:-0}" = 1 ]; then
    echo "==> [api-conformance] skipped (GPUHUB_SKIP_SCHEMATHESIS=1)"
else
    stage build cargo build -p gpuhub
    stage api-conformance bash scripts/schemathesis.sh
fi
stage test cargo test --workspace
echo "==> disk: target/ $(du -sh target 2>/dev/null | cut -f1), $(df -h --output=avail . | tail -1 | tr -d ' ') left"
printf '\n==> all stages passed in %ds\n' "$((SECONDS - total_start))"
