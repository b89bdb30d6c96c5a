#!/usr/bin/env bash
# Builds flowline's libFuzzer targets (tests/fuzz, Clang, ASan+UBSan, every library instrumented) in
# build-fuzz and runs each for a given time, starting from the committed seeds. Prints one line per
# target: executions, executions per second, coverage (edges) and features, the corpus it grew, and PASS
# or FAIL. A crash, a hang past --timeout, a leak, a sanitizer report or a broken property fails the
# target; its input is kept in build-fuzz/findings/ and the command exits 1.
#
#   scripts/fuzz.sh [--seconds 600] [--timeout 10] [--jobs 1] [--build build-fuzz] [--build-only] [TARGET...]
#   scripts/fuzz.sh --seconds 20 --jobs 2 # CI's smoke: every target 20 s, two at a time (run-tests.sh)
#   scripts/fuzz.sh --seconds 600 fuzz_flow_config
#   --jobs N runs N targets at once (each fuzzer is one process on one core); --build-only builds and stops.
#
# Targets: fuzz_flow_config fuzz_input_readers fuzz_document_json fuzz_safetensors fuzz_tokenizer_wordpiece
# fuzz_tokenizer_unigram fuzz_tokenizer_bpe fuzz_gateway_bodies fuzz_wire_frames fuzz_workspace fuzz_grpc_requests fuzz_image_decode. What a run adds to a target's corpus stays in build-fuzz/corpus/<target>; only the
# seeds in tests/fuzz/corpus are committed. Needs scripts/setup.sh first (LibTorch, clang-14).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SECONDS_EACH=600 TIMEOUT=10 JOBS=1 BUILD_ONLY=0 BUILD="$ROOT/build-fuzz" TARGETS=()
while (($#)); do
  case "$1" in
    --seconds) SECONDS_EACH="$2"; shift 2 ;;
    --timeout) TIMEOUT="$2"; shift 2 ;;
    --jobs) JOBS="$2"; shift 2 ;;
    --build-only) BUILD_ONLY=1; shift ;;
    --build) BUILD="$(realpath -m "$2")"; shift 2 ;;
    -h|--help) sed -n 2,16p "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) TARGETS+=("$1"); shift ;;
  esac
done
ALL=(fuzz_flow_config fuzz_input_readers fuzz_document_json fuzz_safetensors fuzz_tokenizer_wordpiece
  fuzz_tokenizer_unigram fuzz_tokenizer_bpe fuzz_gateway_bodies fuzz_wire_frames fuzz_workspace
  fuzz_grpc_requests fuzz_image_decode)
((${#TARGETS[@]})) || TARGETS=("${ALL[@]}")
for t in "${TARGETS[@]}"; do
  [[ " ${ALL[*]} " == *" $t "* ]] || { echo "fuzz.sh: no target '$t'; the targets: ${ALL[*]}" >&2; exit 2; }
done

CXX_CLANG="$(command -v clang++-14 || command -v clang++ || true)"
[ -n "$CXX_CLANG" ] || { echo "fuzz.sh: clang++ not found: run scripts/setup.sh (it installs clang-14)" >&2; exit 2; }
[ -x "$ROOT/.venv/bin/python" ] || { echo "fuzz.sh: no .venv with LibTorch: run scripts/setup.sh first" >&2; exit 2; }
TORCH_PREFIX="$("$ROOT/.venv/bin/python" -c 'import importlib.util, pathlib; print(pathlib.Path(importlib.util.find_spec("torch").origin).parent / "share/cmake")')"

echo "==> building the fuzz targets in $BUILD (clang, ASan+UBSan, libFuzzer; log: $BUILD/build.log)"
mkdir -p "$BUILD"
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  # -O1 with line tables only: what libFuzzer and ASan advise, reports still name file and line, and it
  # compiles faster than RelWithDebInfo's -O2 -g (this build is a large part of CI's).
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="$CXX_CLANG" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" \
    -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" -DFLOWLINE_CUDA=OFF -DFLOWLINE_FUZZ=ON -DFLOWLINE_BUILD_TESTS=OFF \
    -DFLOWLINE_BUILD_BENCH=OFF -DFLOWLINE_BUILD_EXAMPLES=OFF -Wno-dev >"$BUILD/configure.log" 2>&1 \
    || { cat "$BUILD/configure.log"; exit 1; }
fi
# The gRPC front is optional (built where gRPC C++ is found): without it, its target is left out, saying so.
if ! grep -q '^FLOWLINE_HAS_GRPC:INTERNAL=ON' "$BUILD/CMakeCache.txt"; then
  for i in "${!TARGETS[@]}"; do
    [ "${TARGETS[$i]}" = fuzz_grpc_requests ] && unset 'TARGETS[i]' && echo "fuzz.sh: no gRPC front in this build: fuzz_grpc_requests left out"
  done
  TARGETS=("${TARGETS[@]}")
fi
cmake --build "$BUILD" --target "${TARGETS[@]}" -- -j"$(nproc)" >"$BUILD/build.log" 2>&1 \
  || { grep -E -A5 'error|FAILED' "$BUILD/build.log" | head -60; exit 1; }

# Leaks are reported by LeakSanitizer at exit; LibTorch's and yaml-cpp's process-lifetime singletons are not
# leaks of ours, so a leak fails a run only when a flowline frame allocated it (tests/sanitizers/lsan.supp).
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:allocator_may_return_null=1}"
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$ROOT/tests/sanitizers/lsan.supp:print_suppressions=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
mkdir -p "$BUILD/findings" "$BUILD/logs"
((BUILD_ONLY)) && { echo "fuzz targets built: ${TARGETS[*]}"; exit 0; }
[[ "$JOBS" =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: --jobs must be a positive number, not '$JOBS'" >&2; exit 2; }
# One target's run; its exit status in logs/<target>.rc.
run_target() {
  local t=$1 seeds="$ROOT/tests/fuzz/corpus/${1#fuzz_}" corpus="$BUILD/corpus/$1" log="$BUILD/logs/$1.log" rc
  mkdir -p "$corpus"
  # A target's dictionary of tokens (tests/fuzz/<name>.dict), where it has one.
  local dict=()
  [ -f "$ROOT/tests/fuzz/${t#fuzz_}.dict" ] && dict=(-dict="$ROOT/tests/fuzz/${t#fuzz_}.dict")
  set +e
  (cd "$BUILD/tests/fuzz" && "./$t" -max_total_time="$SECONDS_EACH" -timeout="$TIMEOUT" -rss_limit_mb=4096 \
    -max_len=65536 -print_final_stats=1 -artifact_prefix="$BUILD/findings/$t-" "${dict[@]}" "$corpus" "$seeds") \
    >"$log" 2>&1
  rc=$?
  set -e
  echo "$rc" >"$BUILD/logs/$t.rc"
}
for t in "${TARGETS[@]}"; do
  rm -f "$BUILD/logs/$t.rc"
  while (($(jobs -rp | wc -l) >= JOBS)); do wait -n || true; done
  run_target "$t" &
done
wait
failed=0
printf '\n%-22s %8s %12s %10s %8s %8s %8s  %s\n' target seconds executions exec/s cov ft corpus result
for t in "${TARGETS[@]}"; do
  corpus="$BUILD/corpus/$t" log="$BUILD/logs/$t.log"
  rc="$(cat "$BUILD/logs/$t.rc" 2>/dev/null || echo 1)"
  execs="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | tail -n 1 | grep -o '[0-9]*$' || echo 0)"
  last="$(grep -E '^#[0-9]+' "$log" | tail -n 1)"
  cov="$(grep -o 'cov: [0-9]*' <<<"$last" | grep -o '[0-9]*' || echo '?')"
  ft="$(grep -o 'ft: [0-9]*' <<<"$last" | grep -o '[0-9]*' || echo '?')"
  files="$(find "$corpus" -type f | wc -l)"
  result=PASS
  if ((rc != 0)); then result="FAIL (exit $rc; $log)"; failed=1; fi
  printf '%-22s %8s %12s %10s %8s %8s %8s  %s\n' "$t" "$SECONDS_EACH" "${execs:-0}" \
    "$(( ${execs:-0} / (SECONDS_EACH > 0 ? SECONDS_EACH : 1) ))" "$cov" "$ft" "$files" "$result"
  ((rc == 0)) || grep -E 'ERROR|SUMMARY|property broken|Test unit written' "$log" | head -8 | sed 's/^/    /'
done
exit "$failed"
