#!/usr/bin/env bash
# Sets up whatever is missing, builds, checks the code's formatting and shape, runs the whole test suite
# through ctest, then every fuzz target for a 20 s smoke (scripts/fuzz.sh). A formatting or shape problem
# fails the command after the tests have run.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Each phase's end says how long the run has taken so far (CI's time is bounded: .ci/run).
took() { printf '    (%s done after %d min %02d s)\n' "$1" $((SECONDS / 60)) $((SECONDS % 60)); }
"$ROOT/scripts/setup.sh"
took "set-up and build"
# The Python clients of the compatibility tests, each set in a venv of its own, up to date in a second:
# .venv-clients (tests/gateway/test_clients.cpp: Jina, openai, cohere) and .venv-clip (test_clip_client.cpp:
# CLIP-as-service's clip-client needs docarray < 0.30). Under CI=true a failure here stops the run; elsewhere
# (offline, say) those tests then skip with a warning.
client_venv() {  # SCRIPT, what it is for
  printf '\n==> %s (%s)\n' "$2" "$1"
  "$ROOT/scripts/$1" && return 0
  if [ "${CI:-}" = true ] || [ "${CI:-}" = 1 ]; then
    echo "scripts/$1 failed, and CI=true: the tests of $2 cannot skip" >&2
    exit 1
  fi
  echo "scripts/$1 failed: the tests of $2 will skip" >&2
}
client_venv setup-clients.sh "the Python clients of the compatibility tests"
client_venv setup-clip-client.sh "CLIP-as-service's clip-client"
took "the clients' venvs"
printf '\n==> checking the code: formatting (.clang-format) and shape (file and function sizes)\n'
checks=0
"$ROOT/scripts/check-format.sh" || checks=1
python3 "$ROOT/scripts/check-shape.py" || checks=1
# The fuzz targets' smoke (issue 16): each parser's target builds (Clang, ASan+UBSan) and runs 20 s from
# its committed seeds, which include every input a fuzzer ever broke. FLOWLINE_FUZZ_SMOKE=0 skips it. The
# fuzz build starts beside the tests at the lowest priority (nice 19): it takes only the CPU the tests leave
# (little on two cores: 8 of its 180 steps during 19 minutes of tests) and finishes after them.
fuzz_smoke="${FLOWLINE_FUZZ_SMOKE:-1}" fuzz_build=""
if [ "$fuzz_smoke" != 0 ]; then
  mkdir -p "$ROOT/build-fuzz"
  printf '\n==> building the fuzz targets beside the tests, niced (log: build-fuzz/smoke-build.log)\n'
  nice -n 19 "$ROOT/scripts/fuzz.sh" --build-only >"$ROOT/build-fuzz/smoke-build.log" 2>&1 &
  fuzz_build=$!
fi
cd "$ROOT/${FLOWLINE_BUILD_DIR:-build}"
printf '\n==> running the tests\n'
tests=0
ctest --output-on-failure -j"$(nproc)" --timeout 600 || tests=1
took "the tests"
if [ "$fuzz_smoke" != 0 ]; then
  printf '\n==> fuzz smoke: every fuzz target 20 s, %s at a time (scripts/fuzz.sh; longer runs: scripts/fuzz.sh --seconds 600)\n' "$(nproc)"
  if wait "$fuzz_build"; then
    took "the fuzz build"
    "$ROOT/scripts/fuzz.sh" --seconds 20 --jobs "$(nproc)" || tests=1
  else
    cat "$ROOT/build-fuzz/smoke-build.log"
    tests=1
  fi
  took "the fuzz smoke"
fi
if ((tests)); then
  echo "tests failed (see above)" >&2
  exit 1
fi
if ((checks)); then
  echo "the tests ran, but the code checks above failed" >&2
  exit 1
fi
