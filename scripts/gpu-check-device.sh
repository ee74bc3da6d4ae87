#!/bin/bash
# Runs `gpuhub gpu-check` on a lent GPU machine (the `device` tool), from a release binary carried
# there as target/release/gpuhub. Writes what it printed under $OUT (or /tmp/gpu-check-out).
# The binary is copied to a world-readable place first: gpu-check re-executes it as other UIDs.
OUT=${OUT:-/tmp/gpu-check-out}
mkdir -p "$OUT"
S=""; [ "$(id -u)" = 0 ] || S=sudo
D=/tmp/gpuhub-check; $S mkdir -p $D; $S cp target/release/gpuhub $D/gpuhub; $S chmod 755 $D $D/gpuhub
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  nvidia-smi --query-gpu=name,driver_version,memory.total,mig.mode.current --format=csv
  echo "binary: $(stat -c %s target/release/gpuhub) bytes; mps control: $(command -v nvidia-cuda-mps-control || echo none)"
  uname -r; . /etc/os-release; echo "$PRETTY_NAME"
} 2>&1 | tee "$OUT/host.txt"
echo "== gpuhub gpu-check"
timeout "${T1:-240}" $S $D/gpuhub gpu-check "$@" 2>&1 | tee "$OUT/gpu-check.txt"
echo "rc=${PIPESTATUS[0]}" | tee -a "$OUT/gpu-check.txt"
echo "== gpuhub gpu-check --mps-host-shm --skip-guard --json"
timeout "${T2:-180}" $S $D/gpuhub gpu-check --mps-host-shm --skip-guard --json "$@" >"$OUT/gpu-check.json" 2>"$OUT/gpu-check-json.err"
echo "rc=$?"; head -c 4000 "$OUT/gpu-check.json"; tail -5 "$OUT/gpu-check-json.err"
