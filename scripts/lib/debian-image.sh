# shellcheck shell=bash
# The build shared by scripts/build-jupyter-image.sh and scripts/build-pytorch-image.sh: a minimal Debian 12
# root filesystem (debootstrap --variant=minbase) with a Python virtual environment, imported into the
# local Docker engine with `docker import` (no image registry needed). The image carries the label
# gpuhub.inputs=<sha256 of the calling script, this file, the image name and the mirror>; when an image of
# that name with that label exists the build is skipped, so tests may call the scripts every run.
#
# The caller sets IMAGE, NAME (for logs, the lock and the work directory), PACKAGES (debootstrap
# --include), VENV (where the environment goes), PIP_PACKAGES (what pip installs there), CHECK (a shell
# command run in the root filesystem afterwards) and SELF (its own path), then sources this file.
# Environment: GPUHUB_DEBIAN_MIRROR (default http://deb.debian.org/debian), GPUHUB_FORCE_BUILD=1.

MIRROR="${GPUHUB_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SUITE=bookworm

# the inputs: the calling script, this file, the image's name and the mirror
INPUTS="$( (sha256sum <"$SELF"; sha256sum <"${BASH_SOURCE[0]}"; echo "$IMAGE $MIRROR") | sha256sum | cut -c1-64)"

log() { echo "build-$NAME-image: $*" >&2; }

current_label() {
    docker image inspect --format '{{ index .Config.Labels "gpuhub.inputs" }}' "$IMAGE" 2>/dev/null || true
}

# Concurrent callers (parallel tests) wait for one build instead of racing.
LOCK="${TMPDIR:-/tmp}/gpuhub-build-$NAME-image.lock"
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

WORK="$(mktemp -d "/var/tmp/gpuhub-$NAME.XXXXXX")"
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

log "installing $PIP_PACKAGES into $VENV ($(($(date +%s) - started))s so far)"
chroot "$ROOTFS" /usr/bin/env -i "${PIP_ENV[@]}" /bin/sh -ec "
    python3 -m venv $VENV
    $VENV/bin/pip install --quiet --no-cache-dir --disable-pip-version-check $PIP_PACKAGES
    $CHECK
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
    -c "ENV PATH=$VENV/bin:/usr/local/bin:/usr/bin:/bin" \
    -c 'ENV LANG=C.UTF-8' \
    -c "LABEL gpuhub.inputs=$INPUTS" \
    -c 'CMD ["/bin/bash"]' \
    - "$IMAGE" >&2
log "built $IMAGE in $(($(date +%s) - started))s (inputs $INPUTS)"
