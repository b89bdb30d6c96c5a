#!/usr/bin/env bash
# Sets up whatever is missing, builds, checks the code's formatting and shape, and runs the whole test suite
# through ctest. A formatting or shape problem fails the command after the tests have run.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/setup.sh"
printf '\n==> checking the code: formatting (.clang-format) and shape (file and function sizes)\n'
checks=0
"$ROOT/scripts/check-format.sh" || checks=1
python3 "$ROOT/scripts/check-shape.py" || checks=1
cd "$ROOT/${FLOWLINE_BUILD_DIR:-build}"
printf '\n==> running the tests\n'
ctest --output-on-failure -j"$(nproc)" --timeout 600
if ((checks)); then
  echo "the tests ran, but the code checks above failed" >&2
  exit 1
fi
