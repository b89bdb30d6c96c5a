#!/usr/bin/env bash
# The test suite under sanitizers (issue 16). Builds flowline with GCC or Clang and -fsanitize (cmake option
# FLOWLINE_SANITIZE) in a build folder of its own and runs ctest there.
#
#   scripts/sanitize.sh address [CTEST ARGS...]   # ASan + UBSan, the whole suite (build-asan)
#   scripts/sanitize.sh thread  [CATCH ARGS...]   # TSan, the core's and runtime's tests (build-tsan):
#                                                 # queues, replicas, joins, batching, several posting
#                                                 # threads, close while posting, the gateway in process
#
# Excluded, and why (docs/testing.md): CUDA (FLOWLINE_CUDA=OFF: ASan's shadow memory and the CUDA driver's
# address reservations do not mix; the GPU tests skip); LibTorch, yaml-cpp, Boost.JSON and libgomp are
# prebuilt, so only flowline's own code is instrumented (ASan still checks every heap access flowline
# makes into their memory; TSan cannot see their internal locks, so tests/sanitizers/tsan.supp names the
# LibTorch-internal frames it must not judge). Leaks: LeakSanitizer runs at exit of every test program;
# tests/sanitizers/lsan.supp lists LibTorch's process-lifetime registries.
#
# Needs scripts/setup.sh first (or, on the GPU machine, python3 with torch and FLOWLINE_*_ROOT as in
# scripts/gpu-run.sh). Environment: FLOWLINE_CORPUS_DIR, FLOWLINE_UTF8PROC_ROOT, FLOWLINE_PCRE2_ROOT,
# FLOWLINE_STB_ROOT, FLOWLINE_PROMETHEUS_ROOT are passed to CMake when set; CXX picks the compiler.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KIND="${1:-}"
shift || true
case "$KIND" in
  address) SAN="address,undefined" BUILD="$ROOT/build-asan" TARGETS=() ;;
  thread) SAN="thread" BUILD="$ROOT/build-tsan" TARGETS=(test_core test_flow test_runtime test_gateway) ;;
  *) echo "usage: scripts/sanitize.sh address|thread [CTEST ARGS...]" >&2; exit 2 ;;
esac
if [ -x "$ROOT/.venv/bin/python" ]; then PY="$ROOT/.venv/bin/python"; else PY=python3; fi
TORCH_PREFIX="$("$PY" -c 'import importlib.util, pathlib; print(pathlib.Path(importlib.util.find_spec("torch").origin).parent / "share/cmake")')"
args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" -DFLOWLINE_CUDA=OFF
  -DFLOWLINE_SANITIZE="$SAN" -DFLOWLINE_BUILD_BENCH=OFF -Wno-dev)
[ -n "${CXX:-}" ] && args+=(-DCMAKE_CXX_COMPILER="$CXX")
for v in FLOWLINE_CORPUS_DIR FLOWLINE_UTF8PROC_ROOT FLOWLINE_PCRE2_ROOT FLOWLINE_STB_ROOT FLOWLINE_PROMETHEUS_ROOT; do
  [ -n "${!v:-}" ] && args+=("-D$v=${!v}")
done
if [ -z "${FLOWLINE_CORPUS_DIR:-}" ] && [ -x "$ROOT/scripts/find-corpus.sh" ]; then
  corpus="$("$ROOT/scripts/find-corpus.sh" 2>/dev/null || true)"
  [ -n "$corpus" ] && args+=("-DFLOWLINE_CORPUS_DIR=$corpus")
fi
# Any report fails the test that caused it: ASan and UBSan abort, TSan exits 66. Set before the build:
# catch_discover_tests runs every test program to list its cases.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=0:strict_string_checks=1}"
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$ROOT/tests/sanitizers/lsan.supp:print_suppressions=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export TSAN_OPTIONS="${TSAN_OPTIONS:-suppressions=$ROOT/tests/sanitizers/tsan.supp:halt_on_error=1:exitcode=66:second_deadlock_stack=1}"
mkdir -p "$BUILD"
echo "==> configuring $BUILD (-fsanitize=$SAN)"
cmake -S "$ROOT" -B "$BUILD" -G Ninja "${args[@]}" >"$BUILD/configure.log" 2>&1 || { cat "$BUILD/configure.log"; exit 1; }
echo "==> building (log: $BUILD/build.log)"
build_targets=()
((${#TARGETS[@]})) && build_targets=(--target "${TARGETS[@]}")
cmake --build "$BUILD" "${build_targets[@]}" -- -j"$(nproc)" >"$BUILD/build.log" 2>&1 \
  || { grep -E -A5 'error|FAILED' "$BUILD/build.log" | head -60; exit 1; }

cd "$BUILD"
echo "==> the tests under -fsanitize=$SAN"
if [ "$KIND" = thread ]; then
  # Only these programs are built, so they run directly (each runs all its cases in one process, which is
  # where TSan sees the most interleavings), from the folder ctest would run them in.
  status=0
  for t in "${TARGETS[@]}"; do
    (cd tests && timeout 1800 "./$t" "$@") >"$BUILD/$t.log" 2>&1 && r=0 || r=$?
    printf '%-14s %s\n' "$t" "$( ((r == 0)) && echo passed || echo "FAILED (exit $r; $BUILD/$t.log)")"
    tail -n 2 "$BUILD/$t.log" | sed 's/^/    /'
    ((r == 0)) || status=1
  done
  exit "$status"
fi
ctest --output-on-failure -j"$(nproc)" --timeout 900 "$@" 2>&1 | tee "$BUILD/ctest.log" | tail -n 30
exit "${PIPESTATUS[0]}"
