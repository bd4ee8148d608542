#!/usr/bin/env bash
# Proves the README's quick start on a fresh machine: makes a minimal Debian 12 root with debootstrap
# (--variant=minbase: no compiler, no make, no recommends), copies a clean clone of this repository's
# HEAD into it, and runs the two quick-start commands inside it with chroot, as root. Every package the
# build, the tests and the demo need must come from scripts/install-deps.sh. For humans and releases,
# not for CI (it downloads ~500 MB of packages and takes 10-20 minutes on 2 cores).
#
#   sudo scripts/fresh-machine-check.sh [ROOT_DIR]     # default /tmp/mantissa-fresh-root (removed first)
#   MIRROR=http://deb.debian.org/debian                # the Debian mirror to bootstrap from
#   KEEP_ROOT=1                                        # leave the root in place afterwards
#
# Writes its log to fresh-machine-check.log (in the current directory) and exits non-zero when a step fails.
set -euo pipefail

root=${1:-/tmp/mantissa-fresh-root}
mirror=${MIRROR:-http://deb.debian.org/debian}
repo=$(cd "$(dirname "$0")/.." && pwd)
log=$PWD/fresh-machine-check.log

[ "$(id -u)" -eq 0 ] || { echo "fresh-machine-check: run as root (debootstrap and chroot need it)" >&2; exit 1; }
command -v debootstrap >/dev/null || { apt-get update -q && apt-get install -y -q debootstrap; }

mounted=()
# Mount points under the root, deepest first: ours (proc, sys, dev) and what the tests left there (the
# data-parallel test's `ip netns add` makes the root's run/netns a mount of its own).
mounts_under_root() { awk -v r="$root/" 'index($2, r) == 1 { print $2 }' /proc/self/mounts | sort -r; }
# The script's status is the checks', whatever is left to tidy: a check that fails after passing is as
# bad as one that passes by luck. A root that still holds a mount is never removed (rm -rf would go
# through it into the machine's own /dev or /sys); it is named instead.
cleanup() {
  local status=$?
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[$i]}" 2>/dev/null || true; done
  mounts_under_root | while read -r mp; do umount -l "$mp" 2>/dev/null || true; done
  if [ -z "${KEEP_ROOT:-}" ]; then
    if [ -n "$(mounts_under_root)" ]; then
      echo "fresh-machine-check: $root still holds mounts ($(mounts_under_root | tr '\n' ' ')); left in place" >&2
    else
      rm -rf "$root" || echo "fresh-machine-check: could not remove all of $root" >&2
    fi
  fi
  exit "$status"
}
trap cleanup EXIT

exec > >(tee "$log") 2>&1
start=$(date +%s)
stamp() { echo "== $(date -u +%H:%M:%S) (+$(($(date +%s) - start)) s) $*"; }

stamp "debootstrap --variant=minbase bookworm into $root from $mirror"
rm -rf "$root"
debootstrap --variant=minbase bookworm "$root" "$mirror" >/dev/null
cat > "$root/etc/apt/sources.list" <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb ${mirror%/debian}/debian-security bookworm-security main
EOF
cp /etc/resolv.conf "$root/etc/resolv.conf"
for m in proc sys dev; do
  mkdir -p "$root/$m"
  mount --rbind "/$m" "$root/$m"
  mounted+=("$root/$m")
done

stamp "a clean clone of $(git -C "$repo" rev-parse --short HEAD) into /root/mantissa"
git clone -q --no-hardlinks "$repo" "$root/root/mantissa"
stamp "what the fresh root lacks: $(for t in make g++ cmake python3; do chroot "$root" sh -c "command -v $t >/dev/null" || printf '%s ' "$t"; done)"

stamp "quick start 1: scripts/install-deps.sh && make demo"
chroot "$root" /bin/bash -c 'cd /root/mantissa && scripts/install-deps.sh && make demo'
stamp "quick start 2: scripts/install-deps.sh && make test"
chroot "$root" /bin/bash -c 'cd /root/mantissa && scripts/install-deps.sh && make test'
stamp "both quick-start commands passed on a fresh Debian 12 root ($(uname -m), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs))"
