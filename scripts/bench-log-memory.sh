#!/usr/bin/env bash
# Log-memory benchmark: a job on the real Docker engine prints 1 GiB of output; the server's resident
# memory (VmRSS) is sampled while the job runs, while its log is followed, and while the whole log is read
# twice after it ended. Figures on standard output, measured, never asserted (the issue's target: under
# 100 MiB throughout). Needs root, a Docker engine and the busybox image (scripts/setup-debian.sh).
# Usage: scripts/bench-log-memory.sh [BYTES]   (default 1073741824)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
bytes="${1:-1073741824}"
cargo build --release -q -p gpuhub
bin="$repo/target/release/gpuhub"
dir="$(mktemp -d)"
port=$((20000 + RANDOM % 20000))
url="http://127.0.0.1:$port"
password="bench-$RANDOM-$RANDOM"
env -u GPUHUB_LOG GPUHUB_DATA_DIR="$dir/data" GPUHUB_LISTEN="127.0.0.1:$port" GPUHUB_SSH_LISTEN=127.0.0.1:0 \
    GPUHUB_ADMIN_PASSWORD="$password" "$bin" serve >"$dir/server.log" 2>&1 &
pid=$!
cleanup() {
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    docker ps -aq --filter "label=gpuhub.workload" --filter "name=logbench" | xargs -r docker rm -f >/dev/null 2>&1 || true
    rm -rf "$dir"
}
trap cleanup EXIT
for _ in $(seq 100); do curl -fs "$url/api/v1/health" >/dev/null && break; sleep 0.1; done
token="$(curl -fs "$url/api/v1/login" -H 'content-type: application/json' \
    -d "{\"username\":\"admin\",\"password\":\"$password\"}" | sed 's/.*"token":"\([^"]*\)".*/\1/')"
auth=(-H "authorization: Bearer $token")
rss() { awk '/VmRSS/ {print $2}' "/proc/$pid/status"; }
sample() { rss; }
echo "log-memory benchmark: $bytes bytes of output (server pid $pid)"
echo "  idle after start, logged in            $(sample) KiB"
line="$(printf 'x%.0s' $(seq 99))"
curl -fs "${auth[@]}" "$url/api/v1/workloads" -H 'content-type: application/json' -d "{\"name\":\"logbench\",
  \"kind\":\"job\",\"image\":\"gpuhub/busybox:latest\",\"command\":[\"sh\",\"-c\",\"yes $line | head -c $bytes\"]}" >/dev/null
start=$SECONDS
curl -fsN "${auth[@]}" "$url/api/v1/workloads/logbench/logs?follow=true" >/dev/null &
follower=$!
run_peak=0
while :; do
    # the workload's own state (its members carry states of their own)
    state="$(curl -fs "${auth[@]}" "$url/api/v1/workloads/logbench" | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])')"
    r="$(sample)"; [ "$r" -gt "$run_peak" ] && run_peak="$r"
    case "$state" in succeeded|failed|stopped|lost) break ;; esac
    sleep 0.5
done
wait "$follower" 2>/dev/null || true
echo "  job ended ($state) after $((SECONDS - start)) s; peak while running and followed: $run_peak KiB"
read_peak=0
for i in 1 2; do
    curl -fsN "${auth[@]}" "$url/api/v1/workloads/logbench/logs" -o "$dir/read.$i" &
    reader=$!
    while kill -0 "$reader" 2>/dev/null; do r="$(sample)"; [ "$r" -gt "$read_peak" ] && read_peak="$r"; sleep 0.2; done
    echo "  whole log read $i: $(stat -c %s "$dir/read.$i") bytes"
done
echo "  peak while the log was read twice      $read_peak KiB"
echo "  after                                  $(sample) KiB"
peak=$((run_peak > read_peak ? run_peak : read_peak))
echo "  peak overall                           $peak KiB ($((peak / 1024)) MiB)"
