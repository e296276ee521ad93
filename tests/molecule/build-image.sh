#!/usr/bin/env bash
# Build the local Debian image that the molecule scenarios run on.
# No container registry is needed: the root filesystem comes from debootstrap and is
# imported into podman (the -rootfs image); the scenarios' image is that root filesystem with
# the files of tests/molecule/image/ added (a compiled-code cache for the modules' zip payloads:
# stacktune_test_codecache.py says why). Both are cached: the root filesystem is built only
# when missing, the image again only when those files changed (its label holds their hash).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
image="${STACKTUNE_TEST_IMAGE:-localhost/stacktune-debian:bookworm}"
rootfs_image="${image%:*}-rootfs:${image##*:}"
mirror="${STACKTUNE_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$here/containers.conf}"
site=/usr/lib/python3/dist-packages
overlay="$(cd "$here/image" && cat stacktune_test_codecache.py stacktune-test-codecache.pth | sha256sum | cut -c1-16)"

if podman image exists "$image" \
  && [ "$(podman image inspect --format '{{ index .Labels "stacktune.overlay" }}' "$image")" = "$overlay" ]; then
  echo "image $image present"
  exit 0
fi
if ! podman image exists "$rootfs_image"; then
  rootfs="$(mktemp -d /tmp/stacktune-rootfs.XXXXXX)"
  trap 'rm -rf "$rootfs"' EXIT
  debootstrap --variant=minbase --include=python3,procps,iproute2,kmod bookworm "$rootfs" "$mirror"
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  tar -C "$rootfs" -c . | podman import --change 'CMD ["/bin/sleep","infinity"]' - "$rootfs_image"
  rm -rf "$rootfs"
  trap - EXIT
fi
container="$(podman create "$rootfs_image" /bin/true)"
trap 'podman rm -f "$container" >/dev/null' EXIT
podman cp "$here/image/stacktune_test_codecache.py" "$container:$site/stacktune_test_codecache.py"
podman cp "$here/image/stacktune-test-codecache.pth" "$container:$site/stacktune-test-codecache.pth"
podman commit -q --change 'CMD ["/bin/sleep","infinity"]' --change "LABEL stacktune.overlay=$overlay" \
  "$container" "$image" >/dev/null
echo "image $image built"
