#!/usr/bin/env bash
# Checks that every C++ file git tracks is formatted as .clang-format says, with Debian 12's clang-format 14
# (the major version is pinned: another version formats some constructs differently). Exit 1 on a difference,
# listing the files; `scripts/check-format.sh --fix` rewrites them instead.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
CLANG_FORMAT="${FLOWLINE_CLANG_FORMAT:-clang-format-14}"
if ! command -v "$CLANG_FORMAT" >/dev/null; then
  echo "check-format: $CLANG_FORMAT not found (Debian package clang-format-14; scripts/setup.sh installs it)" >&2
  exit 1
fi
mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.h' '*.cc' '*.cu')
if [ "${1:-}" = "--fix" ]; then
  "$CLANG_FORMAT" -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  if ! "$CLANG_FORMAT" --dry-run --Werror "$f" >/dev/null 2>&1; then bad+=("$f"); fi
done
if ((${#bad[@]})); then
  printf 'check-format: %d file(s) differ from .clang-format (fix: scripts/check-format.sh --fix):\n' "${#bad[@]}"
  printf '  %s\n' "${bad[@]}"
  exit 1
fi
echo "check-format: ${#files[@]} files formatted as .clang-format says"
