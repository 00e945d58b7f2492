#!/usr/bin/env bash
# Imports an OCI image archive into the containerd of the node that start-node.sh runs in DIR, so pods can use it
# with `imagePullPolicy: Never` (the node reaches no registry).
#
#   load-image.sh DIR ARCHIVE REPOSITORY     e.g. load-image.sh /tmp/node dist/image/kora-0.1.0.oci.tar localhost/kora
#
# The archive's tag (its index's org.opencontainers.image.ref.name, as scripts/image/build.sh and umoci write it)
# is kept: the image is REPOSITORY:TAG, printed on stdout, one line per image. On any other cluster, push the
# archive to a registry the cluster pulls from (docs/operator.md, "Try it on a real cluster").
set -euo pipefail
[ $# -eq 3 ] || { echo "usage: $0 DIR ARCHIVE REPOSITORY" >&2; exit 2; }
dir=$(cd "$1" && pwd)
timeout 300 ctr --address "$dir/containerd.sock" -n k8s.io images import --base-name "$3" "$2" >&2
# `ctr import` prints digests, not names: list what now carries the repository.
timeout 30 ctr --address "$dir/containerd.sock" -n k8s.io images ls -q | grep -F "$3:"
