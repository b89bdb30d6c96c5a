#!/usr/bin/env bash
# Sets up whatever is missing, builds, and runs the main job: flows/encode.yml, sentence embeddings of all
# 6,001 corpus paragraphs with all-MiniLM-L6-v2. Output: out/embeddings.jsonl (written by the flow's JsonlWriter).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# The main job needs the launcher and the executors only: the tests are built by scripts/run-tests.sh.
FLOWLINE_BUILD_TARGET="${FLOWLINE_BUILD_TARGET:-flowline_programs}" "$ROOT/scripts/setup.sh"
cd "$ROOT"
CORPUS="$("$ROOT/scripts/find-corpus.sh")"
export FLOWLINE_OUT_DIR="${FLOWLINE_OUT_DIR:-$ROOT/out}"
export FLOWLINE_MODEL_DIR="${FLOWLINE_MODEL_DIR:-$ROOT/models}"
printf '\n==> running flows/encode.yml over the paragraphs of %s\n' "$CORPUS"
# --overwrite: the main job replaces its own earlier result (without it, flowline refuses to replace a file).
"${FLOWLINE_BUILD_DIR:-build}/src/flowline" run flows/encode.yml --input "$CORPUS" --input-format paragraphs --overwrite
echo "wrote $(wc -l <"$FLOWLINE_OUT_DIR/embeddings.jsonl") embeddings to $FLOWLINE_OUT_DIR/embeddings.jsonl"
