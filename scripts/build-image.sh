#!/usr/bin/env bash
# Builds flowline's container image with podman, the repository root as build context, and prints its size.
#
#   scripts/build-image.sh                      docker/Dockerfile (CPU) as localhost/flowline:cpu
#   scripts/build-image.sh --cuda               docker/Dockerfile.cuda as localhost/flowline:cuda
#   scripts/build-image.sh --model models/all-MiniLM-L6-v2
#                                               the same with that model folder baked in as
#                                               /opt/flowline/models/all-MiniLM-L6-v2
# Options:
#   --cuda                 build docker/Dockerfile.cuda (default tag localhost/flowline:cuda)
#   --tag T                the image's name (default localhost/flowline:cpu, or :cuda with --cuda)
#   --model DIR            bake the model folder DIR in, as /opt/flowline/models/<name of DIR>; it reaches
#                          the build as a second build context (--build-context model=DIR), so the
#                          .dockerignore, which keeps models/ out of the main context, does not apply to it
#   --base IMAGE           the runtime base (build argument BASE)
#   --builder-base IMAGE   the builder's base (build argument BUILDER_BASE; Dockerfile.cuda only)
#   -- ARGS...             passed on to `podman build` as they are (e.g. -- --build-arg BUILD_TYPE=RelWithDebInfo)
#
# The base: no image registry is reachable on these machines. For the CPU image, without --base, the base is
# localhost/debian:bookworm, which this script makes with debootstrap from the Debian mirror apt uses (about
# 30 s) when it is missing. Elsewhere, `podman build -f docker/Dockerfile .` (or docker build) uses the
# Dockerfile's default base, debian:bookworm-slim. Dockerfile.cuda's default bases (nvidia/cuda) cannot be
# pulled here: pass --base and --builder-base to build it on this machine.
#
# Environment: FLOWLINE_DEBIAN_MIRROR (default: the mirror of /etc/apt/sources.list.d, else deb.debian.org);
# PIP_CERT (else SSL_CERT_FILE): a CA bundle handed to pip in the build as the secret pip-cert.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

CUDA=no
TAG=""
MODEL=""
BASE=""
BUILDER_BASE=""
EXTRA=()
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }
while (($#)); do
  case "$1" in
    --cuda) CUDA=yes ;;
    --tag) TAG="${2:?--tag needs a value}"; shift ;;
    --tag=*) TAG="${1#*=}" ;;
    --model) MODEL="${2:?--model needs a folder}"; shift ;;
    --model=*) MODEL="${1#*=}" ;;
    --base) BASE="${2:?--base needs an image}"; shift ;;
    --base=*) BASE="${1#*=}" ;;
    --builder-base) BUILDER_BASE="${2:?--builder-base needs an image}"; shift ;;
    --builder-base=*) BUILDER_BASE="${1#*=}" ;;
    -h|--help) usage; exit 0 ;;
    --) shift; EXTRA=("$@"); break ;;
    *) echo "build-image.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

command -v podman >/dev/null || { echo "build-image.sh: podman is not installed (see ../shared/CONTAINERS.md or docker/README.md)" >&2; exit 1; }

if [ "$CUDA" = yes ]; then
  DOCKERFILE=docker/Dockerfile.cuda
  TAG="${TAG:-localhost/flowline:cuda}"
else
  DOCKERFILE=docker/Dockerfile
  TAG="${TAG:-localhost/flowline:cpu}"
fi

# The local Debian base, made from Debian's packages when missing.
LOCAL_BASE=localhost/debian:bookworm
debian_mirror() {
  if [ -n "${FLOWLINE_DEBIAN_MIRROR:-}" ]; then echo "$FLOWLINE_DEBIAN_MIRROR"; return; fi
  local uri
  uri="$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' | grep -v security | head -n 1 || true)"
  [ -n "$uri" ] || uri="$(grep -hs '^deb ' /etc/apt/sources.list | awk '{print $2}' | grep -v security | head -n 1 || true)"
  echo "${uri:-http://deb.debian.org/debian}"
}
make_local_base() {
  podman image exists "$LOCAL_BASE" && return
  command -v debootstrap >/dev/null || { echo "build-image.sh: $LOCAL_BASE is missing and debootstrap is not installed" >&2; exit 1; }
  local mirror rootfs
  mirror="$(debian_mirror)"
  rootfs="$(mktemp -d)"
  trap 'rm -rf "$rootfs"' EXIT
  echo "==> making $LOCAL_BASE with debootstrap from $mirror"
  debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$rootfs.log" 2>&1 || { tail -20 "$rootfs.log"; exit 1; }
  rm -f "$rootfs.log"
  # What debian:bookworm-slim does too: no apt caches, no package lists in the image.
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb
  tar -C "$rootfs" -c . | podman import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["bash"]' - "$LOCAL_BASE" >/dev/null
  rm -rf "$rootfs"
  trap - EXIT
}

ARGS=(--network=host -f "$DOCKERFILE" -t "$TAG")
if [ -n "$BASE" ]; then
  ARGS+=(--build-arg "BASE=$BASE")
elif [ "$CUDA" = no ]; then
  make_local_base
  ARGS+=(--build-arg "BASE=$LOCAL_BASE")
fi
[ -n "$BUILDER_BASE" ] && ARGS+=(--build-arg "BUILDER_BASE=$BUILDER_BASE")
# pip inside the build trusts the CA bundle pip trusts here (PyPI behind a TLS-inspecting proxy); a build
# secret, so it is in no layer of the image.
PIP_CA="${PIP_CERT:-${SSL_CERT_FILE:-}}"
[ -n "$PIP_CA" ] && [ -f "$PIP_CA" ] && ARGS+=(--secret "id=pip-cert,src=$PIP_CA")
if [ -n "$MODEL" ]; then
  [ -d "$MODEL" ] || { echo "build-image.sh: --model '$MODEL' is not a folder" >&2; exit 2; }
  MODEL="$(cd "$MODEL" && pwd)"
  ARGS+=(--build-context "model=$MODEL" --build-arg "MODEL_NAME=$(basename "$MODEL")")
fi

echo "==> podman build ${ARGS[*]} ${EXTRA[*]} ."
start=$(date +%s)
podman build "${ARGS[@]}" "${EXTRA[@]}" .
echo "==> built $TAG in $(( $(date +%s) - start )) s"
size=$(podman image inspect --format '{{.Size}}' "$TAG")
echo "==> $TAG: $size bytes ($(numfmt --to=iec --suffix=B "$size"))"
podman images --filter "reference=$TAG"
