#!/bin/bash
# Build everything the Soft-RoCE interop harness needs (idempotent):
#   host packages, Debian bookworm guest rootfs (mmdebstrap), ext4 base image,
#   guest kernel + tiny initrd, ssh key.
# Usage: build.sh [--force]     (--force rebuilds the rootfs from scratch)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/config.sh"
FORCE=0; [ "${1:-}" = --force ] && FORCE=1
t0=$(date +%s)
say() { echo "[build +$(( $(date +%s) - t0 ))s] $*"; }

# --- 1. host tools -------------------------------------------------------------------
need=()
for p in qemu-system-x86:qemu-system-x86_64 qemu-utils:qemu-img mmdebstrap:mmdebstrap iproute2:ip \
         tcpdump:tcpdump python3:python3 e2fsprogs:mkfs.ext4 socat:socat openssh-client:ssh cpio:cpio \
         nftables:nft; do
  command -v "${p#*:}" >/dev/null || need+=("${p%%:*}")
done
if [ ${#need[@]} -gt 0 ]; then
  say "installing host packages: ${need[*]}"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}"
fi
mkdir -p "$ART" "$RUNDIR" "$PCAPDIR" "$DEBCACHE" "$(dirname "$SSHKEY")"

# --- 2. guest rootfs -----------------------------------------------------------------
PKGS=linux-image-amd64,rdma-core,ibverbs-utils,ibverbs-providers,perftest,rdmacm-utils,infiniband-diags
PKGS=$PKGS,iproute2,kmod,busybox-static,dropbear-bin,iputils-ping,procps,tcpdump,ethtool
if [ $FORCE = 1 ] || [ ! -e "$ROOTFS/.interop-debootstrapped" ]; then
  say "mmdebstrap $SUITE -> $ROOTFS"
  rm -rf "$ROOTFS"
  cache_hooks=()
  debs=$DEBCACHE
  # no .debs of our own yet: reuse those of the team's shared harness, if any
  ls "$debs"/*.deb >/dev/null 2>&1 || debs=/var/tmp/interop/debs
  if ls "$debs"/*.deb >/dev/null 2>&1; then   # reuse previously downloaded .debs
    say "reusing the .debs in $debs"
    cache_hooks=(--skip=download/empty
                 --setup-hook='mkdir -p "$1"/var/cache/apt/archives/'
                 --setup-hook="sync-in $debs /var/cache/apt/archives/")
  fi
  # --skip=essential/unlink keeps the Essential:yes .debs in the cache too, so that DEBCACHE is complete
  mmdebstrap --variant=minbase --mode=root --skip=essential/unlink \
    --aptopt='APT::Install-Recommends "false"' \
    --include="$PKGS" "${cache_hooks[@]}" \
    --customize-hook="sync-out /var/cache/apt/archives $DEBCACHE" \
    "$SUITE" "$ROOTFS" "$APT_SOURCES"
  touch "$ROOTFS/.interop-debootstrapped"
fi
# The image is up to date when it was built from this script and these guest files.
stamp=$(cat "$HERE/build.sh" "$HERE/config.sh" "$HERE"/guest/* | sha256sum | cut -c1-16)
if [ $FORCE = 0 ] && [ -e "$BASEIMG" ] && [ -e "$KERNEL" ] && [ -e "$INITRD" ] && \
   [ "$(cat "$ART/image.stamp" 2>/dev/null)" = "$stamp" ]; then
  say "image up to date ($BASEIMG, stamp $stamp)"
  exit 0
fi
rm -f "$ART/image.stamp"
KVER=$(ls "$ROOTFS/lib/modules" | sort -V | tail -1)
say "guest kernel $KVER"

# --- 3. customize rootfs ----------------------------------------------------------------
if [ ! -e "$ROOTFS/.interop-pruned" ]; then
  say "pruning docs, locales, unused kernel modules"
  rm -rf "$ROOTFS"/usr/share/doc/* "$ROOTFS"/usr/share/man/* "$ROOTFS"/usr/share/locale/* \
         "$ROOTFS"/boot/initrd.img-*
  M="$ROOTFS/lib/modules/$KVER/kernel"
  rm -rf "$M"/drivers/gpu "$M"/drivers/media "$M"/drivers/net/wireless "$M"/sound \
         "$M"/drivers/staging "$M"/drivers/infiniband/hw "$M"/drivers/bluetooth "$M"/net/bluetooth \
         "$M"/net/mac80211 "$M"/net/wireless "$M"/drivers/iio "$M"/drivers/usb "$M"/drivers/hid \
         "$M"/drivers/input/touchscreen "$M"/drivers/isdn "$M"/drivers/net/can "$M"/drivers/mtd
  chroot "$ROOTFS" depmod -a "$KVER"
  touch "$ROOTFS/.interop-pruned"
fi
install -D -m 644 "$HERE/guest/inittab"   "$ROOTFS/etc/inittab"
install -D -m 755 "$HERE/guest/rc.sh"     "$ROOTFS/etc/interop/rc.sh"
install -D -m 755 "$HERE/guest/gid-index" "$ROOTFS/usr/local/bin/gid-index"
install -D -m 755 "$HERE/guest/show-gids" "$ROOTFS/usr/local/bin/show-gids"
ln -sfn /bin/busybox "$ROOTFS/sbin/init"
cat > "$ROOTFS/etc/hosts" <<HOSTS
127.0.0.1 localhost
$HOST_IP host
$(guest_ip A) rxe-A
$(guest_ip B) rxe-B
HOSTS
[ -f "$SSHKEY" ] || ssh-keygen -q -t ed25519 -N '' -C interop-harness -f "$SSHKEY"
install -d -m 700 "$ROOTFS/root/.ssh"
install -m 600 "$SSHKEY.pub" "$ROOTFS/root/.ssh/authorized_keys"
mkdir -p "$ROOTFS/etc/dropbear"
[ -f "$ROOTFS/etc/dropbear/dropbear_ed25519_host_key" ] || \
  chroot "$ROOTFS" dropbearkey -t ed25519 -f /etc/dropbear/dropbear_ed25519_host_key >/dev/null
chroot "$ROOTFS" dpkg-query -W -f '${Package} ${Version}\n' > "$ART/guest-packages.txt"

# --- 4. kernel + initrd -------------------------------------------------------------------
cp "$ROOTFS/boot/vmlinuz-$KVER" "$KERNEL"
say "building initrd"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp"/{bin,mods,proc,sys,dev,newroot}
cp "$ROOTFS/bin/busybox" "$tmp/bin/busybox"      # busybox-static
install -m 755 "$HERE/guest/initrd-init" "$tmp/init"
: > "$tmp/modules.list"
for m in virtio_pci virtio_blk ext4; do
  chroot "$ROOTFS" modprobe --show-depends -S "$KVER" "$m" | awk '$1=="insmod"{print $2}'
done | awk '!seen[$0]++' | while read -r ko; do
  cp "$ROOTFS$ko" "$tmp/mods/"; basename "$ko" >> "$tmp/modules.list"
done
(cd "$tmp" && find . | cpio -o -H newc --quiet | gzip -9) > "$INITRD"
say "initrd $(du -h "$INITRD" | cut -f1) ($(tr '\n' ' ' < "$tmp/modules.list"))"

# --- 5. ext4 image -----------------------------------------------------------------------
used=$(du -sm "$ROOTFS" | cut -f1)
size=$(( used + 512 ))
say "ext4 image ${size}M from rootfs (${used}M used)"
rm -f "$BASEIMG"
mkfs.ext4 -q -F -L interop-root -d "$ROOTFS" "$BASEIMG" "${size}M"
chmod 444 "$BASEIMG"
echo "$stamp" > "$ART/image.stamp"
say "done: $KERNEL $INITRD $BASEIMG"
