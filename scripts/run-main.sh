#!/usr/bin/env bash
# Sets up whatever is missing, builds, and runs the main job: flows/paragraphs.yml over a book of the corpus.
# Output: out/paragraphs.jsonl (written by the flow's JsonlWriter).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/setup.sh"
cd "$ROOT"
CORPUS="${FLOWLINE_CORPUS_DIR:-$ROOT/../shared/data/corpus}"
export FLOWLINE_OUT_DIR="${FLOWLINE_OUT_DIR:-$ROOT/out}"
printf '\n==> running flows/paragraphs.yml over %s\n' "$CORPUS/alice-in-wonderland.txt"
"${FLOWLINE_BUILD_DIR:-build}/src/flowline" run flows/paragraphs.yml \
  --input "$CORPUS/alice-in-wonderland.txt" --input-format text
echo "wrote $(wc -l <"$FLOWLINE_OUT_DIR/paragraphs.jsonl") documents to $FLOWLINE_OUT_DIR/paragraphs.jsonl"
