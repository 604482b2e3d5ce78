#!/bin/sh
# Recipe of the default sandbox image, built offline from Debian's packages
# (no registry needed): bookworm minbase with a POSIX shell, coreutils,
# util-linux (setsid), procps, python3 and git, plus a non-root user
# `sandbox` (uid/gid 1000). `sandboxd image build` runs this with the rootfs
# directory as $1, then imports the directory as an image. The image tag
# carries a hash of this file, so changing it triggers a rebuild.
set -eu
rootfs="$1"
mirror="${SANDBOXD_DEBIAN_MIRROR:-http://deb.debian.org/debian}"

debootstrap --variant=minbase --include=python3,git,procps,ca-certificates \
    bookworm "$rootfs" "$mirror"

chroot "$rootfs" groupadd --gid 1000 sandbox
chroot "$rootfs" useradd --uid 1000 --gid 1000 --no-create-home \
    --home-dir /tmp --shell /bin/sh sandbox
mkdir -p "$rootfs/workspace"
chown 1000:1000 "$rootfs/workspace"

# Caches are dead weight in a read-only image.
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
    "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/locale/*
