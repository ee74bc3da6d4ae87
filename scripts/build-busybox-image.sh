#!/usr/bin/env bash
# Builds the local image gpuhub/busybox:latest (override with $GPUHUB_BUSYBOX_IMAGE) with `docker import`
# from a tiny root file system: Debian's static busybox with its applet symlinks, /etc/passwd and
# /etc/group with root and nobody, /tmp (1777) and /home. Needs no registry. Idempotent: does nothing
# when the image exists. Installs busybox-static with apt-get when it is missing.
set -euo pipefail

image="${GPUHUB_BUSYBOX_IMAGE:-gpuhub/busybox:latest}"

if docker image inspect "$image" >/dev/null 2>&1; then
    echo "$image already exists"
    exit 0
fi

if ! dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q 'install ok installed'; then
    echo "installing busybox-static" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y busybox-static || { apt-get update && apt-get install -y busybox-static; }
fi
busybox="$(dpkg -L busybox-static | grep -E '/bin/busybox$' | head -n1)"
[ -x "$busybox" ] || { echo "busybox-static installed no busybox binary" >&2; exit 1; }
if ldd "$busybox" >/dev/null 2>&1; then
    echo "$busybox is not statically linked" >&2
    exit 1
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
root="$work/rootfs"
mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,etc,home,root,tmp,var/tmp,proc,sys,dev,run}
chmod 1777 "$root/tmp" "$root/var/tmp"
chmod 0700 "$root/root"
cp "$busybox" "$root/bin/busybox"
chmod 0755 "$root/bin/busybox"

# Applet symlinks at their usual places (/bin/sh, /usr/bin/wget, …), all pointing at /bin/busybox.
if [ "$(id -u)" = 0 ]; then
    chroot "$root" /bin/busybox --install -s
else
    # Without root there is no chroot: make the same links from busybox's own list.
    "$root/bin/busybox" --list-full | while read -r applet; do
        [ -e "$root/$applet" ] || ln -s /bin/busybox "$root/$applet"
    done
fi
[ -L "$root/bin/sh" ] || { echo "no /bin/sh applet link was made" >&2; exit 1; }

cat >"$root/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
PASSWD
cat >"$root/etc/group" <<'GROUP'
root:x:0:
nobody:x:65534:
GROUP
chmod 0644 "$root/etc/passwd" "$root/etc/group"

tar --numeric-owner --owner=0 --group=0 -C "$root" -c . |
    docker import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD ["sh"]' \
        --message "gpuhub busybox from $(dpkg-query -W -f='busybox-static ${Version}' busybox-static)" \
        - "$image" >/dev/null
echo "built $image"
