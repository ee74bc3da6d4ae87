#!/usr/bin/env bash
# Builds gpuhub/jupyter:latest locally, without a registry: a minimal Debian 12 root filesystem
# (debootstrap --variant=minbase) with Python, a JupyterLab virtual environment in /opt/jupyter,
# OpenSSH's sftp-server (for scp/sftp through the gpuhub SSH gateway) and libnss-wrapper (so that
# sftp-server runs for a UID the image's /etc/passwd does not know), imported with `docker import`.
#
# The image carries the label gpuhub.inputs=<sha256 of this script>; when an image of that name
# with that label already exists the build is skipped, so tests may call this script every run.
#
# Usage: scripts/build-jupyter-image.sh [IMAGE]        (default gpuhub/jupyter:latest; needs root)
# Environment: GPUHUB_DEBIAN_MIRROR (default http://deb.debian.org/debian), GPUHUB_FORCE_BUILD=1.
set -euo pipefail

IMAGE="${1:-gpuhub/jupyter:latest}"
MIRROR="${GPUHUB_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SUITE=bookworm
JUPYTERLAB_VERSION=4.6.6
PACKAGES=python3,python3-venv,ca-certificates,openssh-sftp-server,libnss-wrapper,bash,procps,coreutils

SELF="$(readlink -f "${BASH_SOURCE[0]}")"
INPUTS="$( (sha256sum <"$SELF"; echo "$IMAGE $MIRROR") | sha256sum | cut -c1-64)"

log() { echo "build-jupyter-image: $*" >&2; }

current_label() {
    docker image inspect --format '{{ index .Config.Labels "gpuhub.inputs" }}' "$IMAGE" 2>/dev/null || true
}

# Concurrent callers (parallel tests) wait for one build instead of racing.
LOCK="${TMPDIR:-/tmp}/gpuhub-build-jupyter-image.lock"
exec 9>"$LOCK"
flock 9

if [[ "${GPUHUB_FORCE_BUILD:-0}" != 1 && "$(current_label)" == "$INPUTS" ]]; then
    log "$IMAGE is up to date (inputs $INPUTS)"
    exit 0
fi

if [[ "$(id -u)" != 0 ]]; then
    log "needs root (debootstrap and chroot)"
    exit 1
fi

if ! command -v debootstrap >/dev/null 2>&1; then
    log "installing debootstrap"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq --no-install-recommends debootstrap >&2
fi

WORK="$(mktemp -d /var/tmp/gpuhub-jupyter.XXXXXX)"
ROOTFS="$WORK/rootfs"
cleanup() {
    for m in proc sys dev/pts dev; do
        if mountpoint -q "$ROOTFS/$m" 2>/dev/null; then umount -l "$ROOTFS/$m" || true; fi
    done
    rm -rf --one-file-system "$WORK"
}
trap cleanup EXIT INT TERM

started=$(date +%s)
log "debootstrap $SUITE from $MIRROR into $ROOTFS"
debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$ROOTFS" "$MIRROR" >&2

mount -t proc proc "$ROOTFS/proc"
mount --bind /dev "$ROOTFS/dev"
cp -L /etc/resolv.conf "$ROOTFS/etc/resolv.conf"

# pip inside the chroot uses the host's trust store (for TLS-inspecting proxies) and proxy settings,
# only for the build: the bundle is removed again and nothing of it stays in the image.
HOST_CA="${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}"
PIP_ENV=(PATH=/usr/bin:/bin HOME=/root LANG=C.UTF-8)
if [[ -r "$HOST_CA" ]]; then
    cp -L "$HOST_CA" "$ROOTFS/tmp/host-ca.crt"
    PIP_ENV+=(PIP_CERT=/tmp/host-ca.crt)
fi
for v in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY PIP_INDEX_URL PIP_EXTRA_INDEX_URL \
    PIP_DEFAULT_TIMEOUT; do
    if [[ -n "${!v:-}" ]]; then PIP_ENV+=("$v=${!v}"); fi
done

log "installing jupyterlab==$JUPYTERLAB_VERSION into /opt/jupyter ($(($(date +%s) - started))s so far)"
chroot "$ROOTFS" /usr/bin/env -i "${PIP_ENV[@]}" /bin/sh -ec "
    python3 -m venv /opt/jupyter
    /opt/jupyter/bin/pip install --quiet --no-cache-dir --disable-pip-version-check \
        jupyterlab==$JUPYTERLAB_VERSION
    /opt/jupyter/bin/jupyter lab --version
" >&2
rm -f "$ROOTFS/tmp/host-ca.crt"

umount "$ROOTFS/dev"
umount "$ROOTFS/proc"

# Trim what a running workspace never needs; Docker provides resolv.conf, hosts and hostname.
rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/root/.cache
: >"$ROOTFS/etc/resolv.conf"
chmod 1777 "$ROOTFS/tmp"
mkdir -p "$ROOTFS/home"

log "importing into docker as $IMAGE"
tar --numeric-owner -C "$ROOTFS" -c . | docker import \
    -c 'ENV PATH=/opt/jupyter/bin:/usr/local/bin:/usr/bin:/bin' \
    -c 'ENV LANG=C.UTF-8' \
    -c "LABEL gpuhub.inputs=$INPUTS" \
    -c 'CMD ["/bin/bash"]' \
    - "$IMAGE" >&2
log "built $IMAGE in $(($(date +%s) - started))s (inputs $INPUTS)"
