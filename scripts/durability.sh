#!/usr/bin/env bash
# The index's kill -9 test at full size: `flowline serve` indexing a million documents over HTTP is killed
# with SIGKILL, restarted on its workspace, and every acknowledged document is checked (CI runs the same
# test with 100,000). Needs a build (scripts/run-tests.sh makes one in build/).
#
#   bash scripts/durability.sh [DOCUMENTS]      # default 1000000; repeats 3 times
set -euo pipefail
cd "$(dirname "$0")/.."
documents="${1:-1000000}"
test -x build/tests/test_vector_index || { echo "durability.sh: build/tests/test_vector_index is missing: build first (scripts/run-tests.sh)" >&2; exit 2; }
for run in 1 2 3; do
  echo "== run $run: $documents documents, then SIGKILL"
  FLOWLINE_KILL_DOCUMENTS="$documents" build/tests/test_vector_index "an index killed with SIGKILL*" 2>&1 | grep -v '^\[20' | tail -3
done
