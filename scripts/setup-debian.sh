#!/usr/bin/env bash
# Prepares a Debian 12 host (or container) to build, test and run gpuhub. Run as root. Idempotent: safe
# to run again; it installs only what is missing and starts only what is not running.
#
#  1. apt packages: Docker, static busybox, PostgreSQL, the C toolchain, git/ssh/tmux, and what later
#     features need (debootstrap + python3-venv for the JupyterLab image, chromium + its driver for
#     browser tests, prometheus for the /metrics test and slapd + ldap-utils for the LDAP sign-in
#     tests, which start their own: the packages' services are stopped and disabled when this script
#     installs them, and prometheus's recommended node exporter left out; rclone and fuse3, which mount
#     S3 datasets);
#  1b. the Python packages oidc-provider-mock (pip), the OpenID provider of the OIDC sign-in tests,
#     schemathesis, the API conformance run (scripts/schemathesis.sh), when python3 lacks them, and
#     moto[server], the S3 server of the S3 dataset tests, when moto_server is not on PATH;
#  2. dockerd with live restore (merged into /etc/docker/daemon.json; a running dockerd is reloaded,
#     SIGHUP, which keeps its containers), started in the background when `docker info` fails (no
#     systemd needed);
#  2b. lxd, started in the background when `lxc info` fails, with a `default` dir storage pool, no
#     network, and root allowed user IDs from 1000 in /etc/subuid and /etc/subgid (the LXD engine);
#  3. PostgreSQL, started, with the role gpuhub (LOGIN SUPERUSER PASSWORD 'gpuhub');
#  4. the gpuhub/busybox:latest image (scripts/build-busybox-image.sh), when that script exists;
#  5. a check for Rust >= 1.85 with rustfmt and clippy (installed with rustup, not by this script).
#
# Environment: GPUHUB_FORCE_APT=1 runs apt-get update/install even when every package is present.
set -euo pipefail

MIN_RUST=1.85
PACKAGES=(
    docker.io busybox-static postgresql build-essential pkg-config curl ca-certificates git openssh-client tmux
    debootstrap python3-venv python3-pip
    chromium chromium-driver
    e2fsprogs xfsprogs util-linux
    slapd ldap-utils
    docker-registry
    rclone fuse3
    lxd skopeo umoci iproute2
)
# installed without their recommended packages (prometheus recommends prometheus-node-exporter, another
# daemon the tests do not need)
LEAN_PACKAGES=(prometheus)

export DEBIAN_FRONTEND=noninteractive
# dockerd, runuser and service live in sbin, which a non-login root shell may not have on its PATH.
for d in /usr/local/sbin /usr/sbin /sbin; do
    case ":$PATH:" in *":$d:"*) ;; *) PATH="$PATH:$d" ;; esac
done
export PATH
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

log() { printf '==> %s\n' "$*"; }
die() { printf 'setup-debian: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "run as root (it installs packages and starts dockerd and PostgreSQL)"
command -v apt-get >/dev/null || die "apt-get not found: this script is for Debian 12"

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

# --- 1. packages -----------------------------------------------------------------------------------
wanted=()
missing=()
for p in "${PACKAGES[@]}" "${LEAN_PACKAGES[@]}"; do
    # Docker from docker.com (docker-ce) conflicts with docker.io; any working install will do.
    if [ "$p" = docker.io ] && command -v docker >/dev/null && command -v dockerd >/dev/null; then
        continue
    fi
    wanted+=("$p")
    installed "$p" || missing+=("$p")
done
retry() { "$@" || { sleep 5; "$@"; } || { sleep 15; "$@"; }; }
if [ "${GPUHUB_FORCE_APT:-0}" = 1 ]; then
    missing=("${wanted[@]}")
fi
lean() { local l; for l in "${LEAN_PACKAGES[@]}"; do [ "$l" = "$1" ] && return 0; done; return 1; }
if [ "${#missing[@]}" -gt 0 ]; then
    log "apt-get install ${missing[*]}"
    retry apt-get update
    full=() slim=()
    for p in "${missing[@]}"; do
        if lean "$p"; then slim+=("$p"); else full+=("$p"); fi
    done
    apt_install() { apt-get install -y -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "$@"; }
    [ "${#full[@]}" -eq 0 ] || retry apt_install "${full[@]}"
    [ "${#slim[@]}" -eq 0 ] || retry apt_install --no-install-recommends "${slim[@]}"
    # Debian starts the prometheus and slapd services on install (ports 9090 and 389, enabled at
    # boot); the tests run their own on free ports, so the packages' are stopped and disabled
    for svc in prometheus slapd docker-registry; do
        [[ " ${missing[*]} " == *" $svc "* ]] || continue
        if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
            systemctl disable --now "$svc.service" >/dev/null 2>&1 || true
        else
            { command -v service >/dev/null && service "$svc" stop >/dev/null 2>&1; } || true
            update-rc.d "$svc" disable >/dev/null 2>&1 || true
        fi
        log "$svc: installed; its service stopped and disabled (tests start their own)"
    done
else
    log "apt packages: all present"
fi

# --- 1b. python packages -----------------------------------------------------------------------------
# oidc-provider-mock: a real OpenID Connect provider for crates/identity/tests/oidc.rs
if python3 -c 'import oidc_provider_mock' >/dev/null 2>&1; then
    log "pip: oidc-provider-mock present"
else
    log "pip install oidc-provider-mock"
    pip_help="$(python3 -m pip install --help 2>/dev/null)" || die "python3 -m pip does not run (apt-get install python3-pip)"
    pip_flags=(--quiet --disable-pip-version-check)
    # Debian's own python3 refuses system-wide pip installs (PEP 668) unless told otherwise
    [[ "$pip_help" != *--break-system-packages* ]] || pip_flags+=(--break-system-packages)
    [[ "$pip_help" != *--root-user-action* ]] || pip_flags+=(--root-user-action=ignore)
    retry python3 -m pip install "${pip_flags[@]}" oidc-provider-mock
    python3 -W ignore -c 'import oidc_provider_mock' || die "oidc-provider-mock installed but python3 cannot import it"
fi
# schemathesis: the API against its own OpenAPI document (scripts/schemathesis.sh)
if python3 -m schemathesis.cli --version >/dev/null 2>&1; then
    log "pip: schemathesis present"
else
    log "pip install schemathesis"
    pip_help="$(python3 -m pip install --help 2>/dev/null)" || die "python3 -m pip does not run (apt-get install python3-pip)"
    pip_flags=(--quiet --disable-pip-version-check)
    [[ "$pip_help" != *--break-system-packages* ]] || pip_flags+=(--break-system-packages)
    [[ "$pip_help" != *--root-user-action* ]] || pip_flags+=(--root-user-action=ignore)
    retry python3 -m pip install "${pip_flags[@]}" 'schemathesis>=4,<5'
    python3 -m schemathesis.cli --version >/dev/null || die "schemathesis installed but python3 -m schemathesis.cli does not run"
fi

# moto[server]: a real S3 server (moto_server) for crates/gpuhub/tests/s3_datasets.rs
if command -v moto_server >/dev/null 2>&1; then
    log "pip: moto_server present"
else
    log "pip install moto[server]"
    pip_help="$(python3 -m pip install --help 2>/dev/null)" || die "python3 -m pip does not run (apt-get install python3-pip)"
    pip_flags=(--quiet --disable-pip-version-check)
    [[ "$pip_help" != *--break-system-packages* ]] || pip_flags+=(--break-system-packages)
    [[ "$pip_help" != *--root-user-action* ]] || pip_flags+=(--root-user-action=ignore)
    retry python3 -m pip install "${pip_flags[@]}" 'moto[server]>=5,<6'
    command -v moto_server >/dev/null || die "moto[server] installed but moto_server is not on PATH"
fi

# --- 2. docker ---------------------------------------------------------------------------------------
# live restore: containers keep running while dockerd is upgraded or restarted (gpuhub queues again
# what an engine restart without it kills). Merged into the daemon's config, keeping every other key.
merge_live_restore() {
    python3 - "$1" <<'PY'
import json, os, sys
path = sys.argv[1]
try:
    with open(path) as f:
        text = f.read()
except FileNotFoundError:
    text = ""
try:
    conf = json.loads(text) if text.strip() else {}
except ValueError as e:
    sys.exit(f"setup-debian: {path} is not JSON ({e}); add \"live-restore\": true to it by hand")
if not isinstance(conf, dict):
    sys.exit(f"setup-debian: {path} is not a JSON object; add \"live-restore\": true to it by hand")
if conf.get("live-restore") is True:
    sys.exit(0)
conf["live-restore"] = True
os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
with open(path + ".tmp", "w") as f:
    json.dump(conf, f, indent=2)
    f.write("\n")
os.replace(path + ".tmp", path)
print(f"==> docker: live-restore turned on in {path}")
PY
}
merge_live_restore /etc/docker/daemon.json
if docker info >/dev/null 2>&1; then
    log "docker: running"
    # a running dockerd takes live-restore on a reload (SIGHUP), which restarts no container
    if [ "$(docker info --format '{{.LiveRestoreEnabled}}' 2>/dev/null)" = false ] && pgrep -x dockerd >/dev/null; then
        log "docker: reloading dockerd for live-restore (SIGHUP; containers keep running)"
        kill -HUP "$(pgrep -x dockerd | head -n 1)"
    fi
else
    if ! { command -v pgrep >/dev/null && pgrep -x dockerd >/dev/null; }; then
        log "docker: starting dockerd (log: /var/log/dockerd.log)"
        nohup dockerd >/var/log/dockerd.log 2>&1 </dev/null &
    else
        log "docker: dockerd is starting"
    fi
    for _ in $(seq 60); do
        docker info >/dev/null 2>&1 && break
        sleep 1
    done
    if ! docker info >/dev/null 2>&1; then
        tail -n 30 /var/log/dockerd.log >&2 || true
        die "dockerd did not come up within 60 s (see /var/log/dockerd.log; a container needs --privileged to run dockerd)"
    fi
    log "docker: running"
fi

# --- 2b. lxd -----------------------------------------------------------------------------------------
# The LXD engine (crates/lxd) and its tests: Debian's lxd, started in the background (no systemd; its
# socket /var/lib/lxd/unix.socket), a `default` storage pool of the dir driver and the default profile's
# root disk in it. No LXD network: `lxd init --minimal` wants a bridge on a free subnet, and gpuhub's
# containers need none (the hub reaches their apps through LXD proxy devices), so Docker's networks and
# iptables rules are left alone. root is allowed the user IDs gpuhub's members run as (raw.idmap maps
# each member's UID and GID 1:1; gpuhub's uid_range, 70000-99999 by default, and directory accounts' own
# IDs): /etc/subuid and /etc/subgid ranges from 1000 up to Debian lxd's own range (231072), each under
# 65536 IDs so that LXD never takes one for its containers' base map.
lxd_delegate() {
    local f start size
    for f in /etc/subuid /etc/subgid; do
        touch "$f"
        for start in 1000 66535 132070 198605; do
            size=65535
            [ "$start" = 198605 ] && size=$((231072 - 198605))
            grep -q "^root:$start:" "$f" || echo "root:$start:$size" >>"$f"
        done
    done
}
lxd_delegate
if lxc info >/dev/null 2>&1; then
    log "lxd: running"
else
    log "lxd: starting lxd (log: /var/log/lxd-gpuhub.log)"
    setsid lxd --group root >>/var/log/lxd-gpuhub.log 2>&1 </dev/null &
    lxd waitready --timeout 60 || { tail -n 30 /var/log/lxd-gpuhub.log >&2 || true; die "lxd did not come up within 60 s (see /var/log/lxd-gpuhub.log)"; }
    log "lxd: running"
fi
lxc storage show default >/dev/null 2>&1 || { log "lxd: creating the storage pool default (dir)"; lxc storage create default dir >/dev/null; }
lxc profile device show default 2>/dev/null | grep -q '^root:' ||
    { log "lxd: the default profile's root disk"; lxc profile device add default root disk path=/ pool=default >/dev/null; }

# --- 3. postgresql -----------------------------------------------------------------------------------
pg_ready() { pg_isready -q -h 127.0.0.1 -p 5432; }
if pg_ready; then
    log "postgresql: running"
else
    if [ -z "$(pg_lsclusters -h 2>/dev/null)" ]; then
        version="$(find /usr/lib/postgresql -mindepth 1 -maxdepth 1 -printf '%f\n' 2>/dev/null | sort -V | tail -n1)"
        [ -n "$version" ] || die "postgresql is installed but /usr/lib/postgresql holds no version"
        log "postgresql: creating cluster $version/main"
        pg_createcluster "$version" main
    fi
    log "postgresql: starting"
    if ! { command -v service >/dev/null && service postgresql start; }; then
        pg_lsclusters -h | while read -r version cluster _; do
            pg_ctlcluster "$version" "$cluster" start || true
        done
    fi
    for _ in $(seq 30); do
        pg_ready && break
        sleep 1
    done
    pg_ready || die "postgresql is not accepting connections on 127.0.0.1:5432 (see /var/log/postgresql/)"
    log "postgresql: running"
fi

psql_admin() { (cd / && runuser -u postgres -- psql -v ON_ERROR_STOP=1 -qtAX "$@"); }
role_exists="$(psql_admin -c "SELECT 1 FROM pg_roles WHERE rolname = 'gpuhub'")"
if [ "$role_exists" = 1 ]; then
    log "postgresql: role gpuhub exists"
else
    log "postgresql: creating role gpuhub"
    psql_admin -c "CREATE ROLE gpuhub LOGIN SUPERUSER PASSWORD 'gpuhub'"
fi
if ! PGPASSWORD=gpuhub psql -qtAX -h 127.0.0.1 -p 5432 -U gpuhub -d postgres -c 'SELECT 1' >/dev/null; then
    die "cannot log in as gpuhub at postgres://gpuhub:gpuhub@127.0.0.1:5432/postgres (check its password and pg_hba.conf)"
fi

# --- 4. images ---------------------------------------------------------------------------------------
if [ -f "$repo/scripts/build-busybox-image.sh" ]; then
    log "image: gpuhub/busybox:latest"
    bash "$repo/scripts/build-busybox-image.sh"
fi

# --- 5. rust -----------------------------------------------------------------------------------------
[ -d "$HOME/.cargo/bin" ] && export PATH="$HOME/.cargo/bin:$PATH"
rust_help="Install Rust >= $MIN_RUST with rustup (https://rustup.rs):
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal --component rustfmt,clippy
    . \"\$HOME/.cargo/env\"
Debian's own cargo/rustc packages are too old for edition 2024."
if ! command -v cargo >/dev/null || ! command -v rustc >/dev/null; then
    die "cargo not found. $rust_help"
fi
have="$(rustc --version | awk '{print $2}')" || die "rustc does not run (with rustup: rustup default stable). $rust_help"
if [ "$(printf '%s\n%s\n' "$MIN_RUST" "${have%%-*}" | sort -V | head -n1)" != "$MIN_RUST" ]; then
    die "rustc $have is older than $MIN_RUST. $rust_help"
fi
cargo fmt --version >/dev/null 2>&1 || die "rustfmt missing: rustup component add rustfmt"
cargo clippy --version >/dev/null 2>&1 || die "clippy missing: rustup component add clippy"
log "rust: rustc $have"

log "setup complete"
