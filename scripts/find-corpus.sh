#!/usr/bin/env bash
# Prints the folder of the five corpus books, or fails saying where it looked. In order:
#   1. $FLOWLINE_CORPUS_DIR, when set;
#   2. ../shared/data/corpus beside the repository (the README's layout);
#   3. for a clone of a local checkout (git clone /path/to/flowline), ../shared/data/corpus beside that
#      checkout, so a fresh clone in /tmp finds the data its origin has.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
has_books() { [ -f "$1/alice-in-wonderland.txt" ]; }
if [ -n "${FLOWLINE_CORPUS_DIR:-}" ]; then
  has_books "$FLOWLINE_CORPUS_DIR" || { echo "error: FLOWLINE_CORPUS_DIR=$FLOWLINE_CORPUS_DIR has no alice-in-wonderland.txt" >&2; exit 1; }
  (cd "$FLOWLINE_CORPUS_DIR" && pwd)
  exit 0
fi
tried=("$ROOT/../shared/data/corpus")
origin="$(git -C "$ROOT" remote get-url origin 2>/dev/null || true)"
origin="${origin#file://}"
if [ -n "$origin" ] && [ -d "$origin" ]; then tried+=("$origin/../shared/data/corpus"); fi
for dir in "${tried[@]}"; do
  if has_books "$dir"; then (cd "$dir" && pwd); exit 0; fi
done
echo "error: the corpus (alice-in-wonderland.txt and the other books) is not in ${tried[*]}; put ../shared/data/corpus beside the repository or set FLOWLINE_CORPUS_DIR" >&2
exit 1
