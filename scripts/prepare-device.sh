#!/usr/bin/env bash
# Prepares .device/ for runs on the GPU machine (which has no network, no utf8proc, no PCRE2 headers and no
# model):
#   .device/model/all-MiniLM-L6-v2   the model with fp16 weights (45 MB instead of 90, to fit the 64 MiB tree)
#   .device/utf8proc                 Debian's utf8proc packages unpacked (dpkg -x)
#   .device/pcre2                    Debian's PCRE2 32-bit library and headers unpacked (dpkg -x)
#   .device/prometheus               Debian's prometheus-cpp core library and headers unpacked (dpkg -x)
#   .device/stb                      Debian's stb headers unpacked (for the profile plots)
#   .device/dragonbox                Debian's Dragonbox (header and static library) unpacked: JSON floats
#   .device/imagelibs                Debian's libjpeg-turbo, libspng and libwebp (libraries, headers, .pc files)
#   .device/corpus                   the five books (../shared does not travel)
#   .device/grpc.tar.xz              with --grpc only: Debian's gRPC C++ 1.51 and protobuf 3.21 (libraries,
#                                    headers, protoc and its gRPC plugin; 5.5 MB packed), so that the GPU
#                                    machine, which has no gRPC, builds the gateway's gRPC front too
#   .device/pginstall.tar.xz         with --pg only: PyPI pgserver's PostgreSQL 16 + pgvector build (server,
#                                    libpq, headers; 6.4 MB packed) from .venv, for the PgVectorWriter and
#                                    bench/seed3_pg.py on the GPU machine, which has no PostgreSQL
#   .device/nvjpeg.tar.xz            with --nvjpeg only: libnvjpeg.so.13 of PyPI nvidia-nvjpeg 13.0.4.44 (5.9 MB,
#                                    packed with xz), the ClipEncoder's GPU JPEG decoder, which the GPU
#                                    machine's torch does not bring; gpu-run.sh unpacks it and sets FLOWLINE_NVJPEG
# Carry .device with the device tool; scripts/gpu-run.sh uses it.
set -euo pipefail
grpc=0 pg=0 nvjpeg=0
for arg in "$@"; do
  case "$arg" in
    --grpc) grpc=1 ;;
    --pg) pg=1 ;;
    --nvjpeg) nvjpeg=1 ;;
    *) echo "prepare-device.sh: unknown option '$arg' (--grpc, --pg, --nvjpeg)" >&2; exit 2 ;;
  esac
done
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
mkdir -p .device
if [ ! -f .device/model/all-MiniLM-L6-v2/model.safetensors ]; then
  .venv/bin/python - <<'PY'
import pathlib, shutil
import numpy as np
from safetensors.numpy import load_file, save_file  # not safetensors.torch: the light install cannot import torch
src = pathlib.Path("models/all-MiniLM-L6-v2"); dst = pathlib.Path(".device/model/all-MiniLM-L6-v2")
shutil.copytree(src, dst, dirs_exist_ok=True, ignore=shutil.ignore_patterns("model.safetensors", "*.onnx", "*.bin"))
tensors = {k: np.ascontiguousarray(v.astype(np.float16) if np.issubdtype(v.dtype, np.floating) else v)
           for k, v in load_file(src / "model.safetensors").items()}
save_file(tensors, str(dst / "model.safetensors"), metadata={"format": "pt"})
PY
fi
if [ ! -d .device/utf8proc/usr ]; then
  tmp="$(mktemp -d)"
  (cd "$tmp" && apt-get download -qq libutf8proc2 libutf8proc-dev)
  for deb in "$tmp"/*.deb; do dpkg -x "$deb" .device/utf8proc; done
  rm -rf "$tmp"
fi
if [ ! -d .device/pcre2/usr ]; then
  tmp="$(mktemp -d)"
  (cd "$tmp" && apt-get download -qq libpcre2-32-0 libpcre2-dev)
  for deb in "$tmp"/*.deb; do dpkg -x "$deb" .device/pcre2; done
  rm -rf "$tmp"
  # Only the 32-bit shared library and the header travel (the tree and .device share 64 MiB).
  rm -rf .device/pcre2/usr/share .device/pcre2/usr/bin
  find .device/pcre2 -name '*.a' -delete
  find .device/pcre2 -name 'libpcre2-*.so*' ! -name 'libpcre2-32.so*' -delete
fi
if [ ! -d .device/prometheus/usr ]; then
  tmp="$(mktemp -d)"
  (cd "$tmp" && apt-get download -qq libprometheus-cpp-core1.0 prometheus-cpp-dev)
  for deb in "$tmp"/*.deb; do dpkg -x "$deb" .device/prometheus; done
  rm -rf "$tmp" .device/prometheus/usr/share  # its documentation: 1.1 MB of the 64 MiB
fi
if [ ! -d .device/dragonbox/usr ]; then
  tmp="$(mktemp -d)"
  (cd "$tmp" && apt-get download -qq libdragonbox-dev)
  dpkg -x "$tmp"/libdragonbox-dev_*.deb .device/dragonbox
  rm -rf "$tmp" .device/dragonbox/usr/share
fi
if [ ! -d .device/imagelibs/usr ]; then
  # flowline::images' decoders (libjpeg-turbo, libspng, libwebp), which the GPU machine lacks: shared
  # libraries, headers and pkg-config files (scripts/gpu-run.sh points their prefix at this folder).
  tmp="$(mktemp -d)"
  (cd "$tmp" && apt-get download -qq libjpeg62-turbo libjpeg62-turbo-dev libspng0 libspng-dev libwebp7 libwebp-dev \
    libwebpdemux2 libwebpmux3)
  for deb in "$tmp"/*.deb; do dpkg -x "$deb" .device/imagelibs; done
  rm -rf "$tmp" .device/imagelibs/usr/share
  find .device/imagelibs -name '*.a' -delete
  # zlib is spng's private need; pkg-config would look for zlib.pc, which that machine may not have.
  sed -i '/^Requires.private: zlib/d' .device/imagelibs/usr/lib/x86_64-linux-gnu/pkgconfig/spng.pc
  # libjpeg's jconfig.h sits in the multiarch include folder, which the compiler searches only under /usr.
  sed -i 's#^Cflags: -I${includedir}$#Cflags: -I${includedir} -I${includedir}/x86_64-linux-gnu#' \
    .device/imagelibs/usr/lib/x86_64-linux-gnu/pkgconfig/libjpeg.pc
fi
# The device copy of the tree drops symbolic links (libutf8proc.so -> libutf8proc.so.2 -> ...): replace each
# link by a copy of the file it points to, so CMake's find_library finds a real libutf8proc.so there.
# Links into packages not unpacked here (prometheus-cpp's pull and push libraries, PCRE2's 8- and 16-bit
# and POSIX libraries) are dropped.
find .device/utf8proc .device/pcre2 .device/prometheus .device/imagelibs -type l | while read -r link; do
  target="$(readlink -f "$link")"
  rm "$link"
  if [ -f "$target" ]; then cp "$target" "$link"; fi
done
rm -f .device/pcre2/usr/lib/x86_64-linux-gnu/libpcre2-32.so.0.*  # copied to the two names that are used
if [ ! -f .device/stb/usr/include/stb/stb_image_write.h ]; then
  tmp="$(mktemp -d)"
  (cd "$tmp" && apt-get download -qq libstb-dev)
  mkdir -p .device/stb.full && dpkg -x "$tmp"/libstb-dev_*.deb .device/stb.full
  mkdir -p .device/stb/usr/include/stb
  cp .device/stb.full/usr/include/stb/stb_image_write.h .device/stb.full/usr/include/stb/stb_easy_font.h .device/stb/usr/include/stb/
  rm -rf "$tmp" .device/stb.full
fi
if ((grpc)) && [ ! -f .device/grpc.tar.xz ]; then
  # The installed packages' files (setup.sh installs them), not .debs: the libraries gRPC++ needs at run
  # time beyond glibc, zlib and OpenSSL (which the GPU machine has), found with ldd.
  tmp="$(mktemp -d)"
  mkdir -p "$tmp/lib" "$tmp/bin" "$tmp/include/google"
  lib=/usr/lib/x86_64-linux-gnu
  for so in libgrpc++.so.1.51 libgrpc.so.29 libgpr.so.29 libupb.so.29 libaddress_sorting.so.29 libre2.so.9 \
    libcares.so.2 libprotobuf.so.32 libprotoc.so.32 libgrpc_plugin_support.so.1.51; do
    cp -L "$lib/$so" "$tmp/lib/"
  done
  ldd "$lib/libgrpc++.so.1.51" | awk '$3 ~ /libabsl_/ {print $3}' | xargs -I{} cp -L {} "$tmp/lib/"
  cp -L /usr/bin/protoc /usr/bin/grpc_cpp_plugin "$tmp/bin/"
  cp -rL /usr/include/grpc /usr/include/grpcpp /usr/include/absl "$tmp/include/"
  cp -rL /usr/include/google/protobuf "$tmp/include/google/"
  tar -cJf .device/grpc.tar.xz -C "$tmp" .
  rm -rf "$tmp"
fi
if ((pg)) && [ ! -f .device/pginstall.tar.xz ]; then
  # The binaries' rpath is $ORIGIN/../../../pgserver.libs: both folders travel, as they lie in site-packages.
  site="$(.venv/bin/python -c 'import pathlib, pgserver; print(pathlib.Path(pgserver.__file__).parent.parent)')"
  tar -cJf .device/pginstall.tar.xz -C "$site" pgserver/pginstall pgserver.libs
fi
if ((nvjpeg)) && [ ! -f .device/nvjpeg.tar.xz ]; then
  # From .venv when setup.sh installed it there, else the wheel downloaded (pip download, no install).
  lib="$(.venv/bin/python -c 'import nvidia, pathlib; print(next(q for p in nvidia.__path__ if (q := pathlib.Path(p) / "cu13/lib/libnvjpeg.so.13").exists()))' 2>/dev/null || true)"
  tmp="$(mktemp -d)"
  if [ -z "$lib" ] || [ ! -f "$lib" ]; then
    .venv/bin/pip download -q --disable-pip-version-check --no-deps -d "$tmp" "nvidia-nvjpeg==13.0.4.44"
    (cd "$tmp" && "$ROOT/.venv/bin/python" -m zipfile -e nvidia_nvjpeg-*.whl x)
    lib="$tmp/x/nvidia/cu13/lib/libnvjpeg.so.13"
  fi
  mkdir -p "$tmp/pack" && cp -L "$lib" "$tmp/pack/"
  tar -cJf .device/nvjpeg.tar.xz -C "$tmp/pack" libnvjpeg.so.13
  rm -rf "$tmp"
fi
mkdir -p .device/corpus
cp -u "$("$ROOT/scripts/find-corpus.sh")"/*.txt .device/corpus/
du -sh .device/*
