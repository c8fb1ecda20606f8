#!/usr/bin/env bash
# The base image of the Containerfiles when no image registry can be reached: Debian bookworm (minbase, with the
# documentation and translations left out as in the public bookworm-slim image) bootstrapped by mmdebstrap from the
# Debian mirror this machine's apt already uses, then `podman import`ed as localhost/debian:bookworm-slim.
# Nothing is done when the image exists (--force makes it again). About 45 s and 100 MB of downloads.
#
#   deploy/base-image.sh [--force]
#   env: BASE_IMAGE (default localhost/debian:bookworm-slim), DEBIAN_MIRROR, DEBIAN_SECURITY_MIRROR (default: read
#        from /etc/apt/sources.list*, else deb.debian.org), DEBIAN_SUITE (default bookworm)
# Run it as the user whose podman storage the images go to (root in CI). mmdebstrap needs root, or uidmap and
# /etc/subuid entries for its unshare mode.
set -euo pipefail

IMAGE=${BASE_IMAGE:-localhost/debian:bookworm-slim}
SUITE=${DEBIAN_SUITE:-bookworm}
FORCE=0
for arg in "$@"; do
  case "$arg" in
    --force) FORCE=1 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "base-image.sh: unknown argument $arg (--force, --help)" >&2; exit 2 ;;
  esac
done

if [ "$FORCE" = 0 ] && podman image exists "$IMAGE"; then
  echo "base image $IMAGE: present"
  exit 0
fi
for tool in mmdebstrap podman; do
  command -v "$tool" >/dev/null || { echo "base-image.sh: $tool is missing (apt-get install $tool)" >&2; exit 1; }
done

# The first uncommented URI of the host's apt sources (one-line and deb822 files) whose path ends in /$1.
host_mirror() {
  cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null |
    grep -v '^[[:space:]]*#' | grep -oE '(https?|file)://[^[:space:]]+' | sed 's:/*$::' | grep -E "/$1\$" | head -n 1 || true
}
MIRROR=${DEBIAN_MIRROR:-$(host_mirror debian)}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
SECURITY=${DEBIAN_SECURITY_MIRROR:-$(host_mirror debian-security)}
SECURITY=${SECURITY:-http://deb.debian.org/debian-security}

work=$(mktemp -d "${TMPDIR:-/var/tmp}/node-svc-base.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "base image $IMAGE: mmdebstrap $SUITE from $MIRROR (security: $SECURITY)"
t0=$SECONDS
# merged-usr: /usr merged by mmdebstrap's hook instead of the usrmerge package (which pulls in perl: 126 MB instead
# of 78). The dpkg path excludes are the ones the public slim image carries; they stay in the image
# (/etc/dpkg/dpkg.cfg.d/99mmdebstrap), so packages installed later leave out the same files.
# Its chatter goes to a log, shown when it fails.
if ! mmdebstrap --variant=minbase --components=main --quiet \
  --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
  --aptopt='Acquire::Languages "none"' \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/lintian/*' \
  --dpkgopt='path-exclude=/usr/share/groff/*' --dpkgopt='path-exclude=/usr/share/linda/*' \
  --customize-hook='rm -rf "$1"/usr/share/doc/*/changelog* "$1"/usr/share/man/* "$1"/usr/share/info/* "$1"/usr/share/locale/* "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/*' \
  "$SUITE" "$work/rootfs.tar" \
  "deb $MIRROR $SUITE main" "deb $MIRROR $SUITE-updates main" "deb $SECURITY $SUITE-security main" >"$work/mmdebstrap.log" 2>&1; then
  cat "$work/mmdebstrap.log" >&2
  echo "base-image.sh: mmdebstrap failed (log above)" >&2
  exit 1
fi
podman import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'CMD ["bash"]' \
  --message "mmdebstrap --variant=minbase $SUITE from $MIRROR" \
  "$work/rootfs.tar" "$IMAGE" >/dev/null
echo "base image $IMAGE: made in $((SECONDS - t0)) s ($(podman image inspect --format '{{.Size}}' "$IMAGE") bytes)"
