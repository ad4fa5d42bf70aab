# Shared settings for the Soft-RoCE (rdma_rxe) interop harness. Sourced by the other scripts.
# Large artifacts live outside the repo:
ART=${INTEROP_ART:-/var/tmp/goroce-interop}
ROOTFS=$ART/rootfs            # debootstrapped guest root (directory)
BASEIMG=$ART/base.ext4        # ext4 image built from $ROOTFS (read-only backing file)
KERNEL=$ART/vmlinuz           # guest kernel (Debian linux-image-amd64)
INITRD=$ART/initrd.img        # tiny busybox initrd (virtio + ext4 modules only)
RUNDIR=$ART/run               # per-guest overlays, pidfiles, serial logs
PCAPDIR=${PCAPDIR:-$ART/pcaps}
SSHKEY=$ART/ssh/id_ed25519    # key used to reach the guests
DEBCACHE=$ART/debs            # .debs that went into the rootfs (kept for offline rebuilds)

SUITE=bookworm
# The guest's packages come from the same Debian archive this machine's apt uses.
APT_SOURCES=${INTEROP_APT_SOURCES:-$(ls /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n 1)}

# Network: everything lives in a netns we own.
NETNS=roce-host
BRIDGE=br-roce
HOST_IP=198.18.0.1
PREFIX=24
# guest name -> ip / mac / tap
guest_ip()  { case "$1" in A|a) echo 198.18.0.2;; B|b) echo 198.18.0.3;; *) echo "unknown guest $1" >&2; return 1;; esac; }
guest_mac() { case "$1" in A|a) echo 52:54:00:12:00:02;; B|b) echo 52:54:00:12:00:03;; esac; }
guest_tap() { case "$1" in A|a) echo tap-a;; B|b) echo tap-b;; esac; }
guest_uc()  { echo "$1" | tr a-z A-Z; }

GUEST_MEM=${GUEST_MEM:-1024}   # MiB per guest
GUEST_SMP=${GUEST_SMP:-1}
GUEST_MTU=${MTU:-1500}         # netdev MTU of guests/taps/bridge; rxe IB MTU = 1024 (1500) or 4096 (9000)

nsexec() { ip netns exec "$NETNS" "$@"; }
