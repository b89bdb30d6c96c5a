#!/usr/bin/env bash
# Sets up whatever is missing, builds, and runs the whole test suite through ctest.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/setup.sh"
cd "$ROOT/${FLOWLINE_BUILD_DIR:-build}"
printf '\n==> running the tests\n'
ctest --output-on-failure -j"$(nproc)" --timeout 600
