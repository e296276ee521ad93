#!/usr/bin/env bash
# Build the local Debian image that the molecule scenarios run on.
# No container registry is needed: the root filesystem comes from debootstrap and is
# imported into podman. The image is cached; it is rebuilt only when missing.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
image="${STACKTUNE_TEST_IMAGE:-localhost/stacktune-debian:bookworm}"
mirror="${STACKTUNE_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$here/containers.conf}"

if podman image exists "$image"; then
  echo "image $image present"
  exit 0
fi
rootfs="$(mktemp -d /tmp/stacktune-rootfs.XXXXXX)"
trap 'rm -rf "$rootfs"' EXIT
debootstrap --variant=minbase --include=python3,procps,iproute2,kmod bookworm "$rootfs" "$mirror"
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
tar -C "$rootfs" -c . | podman import --change 'CMD ["/bin/sleep","infinity"]' - "$image"
echo "image $image built"
