#!/usr/bin/env bash
# Builds and runs a consumer of flowline, as the tests do:
#   run_consumer.sh find_package    SOURCE BUILD TORCH_PREFIX WORK   install BUILD to WORK/prefix, build
#                                                                      tests/consumers/find_package and the
#                                                                      examples/custom_executor plugin against
#                                                                      it, run both (the plugin from the
#                                                                      installed launcher), and run a
#                                                                      SentenceEncoder flow on the tiny test
#                                                                      model from the installed launcher,
#                                                                      which loads the encoder from
#                                                                      WORK/prefix/lib/flowline/executors
#   run_consumer.sh add_subdirectory SOURCE BUILD TORCH_PREFIX WORK   build tests/consumers/add_subdirectory
set -euo pipefail
mode=$1 src=$2 build=$3 torch_prefix=$4 work=$5
# On failure, show the end of the log of the step that failed.
# On success, remove WORK: a consumer build holds a copy of flowline's objects (hundreds of MB) that nothing
# reads afterwards.
trap 'status=$?; if [ $status -ne 0 ]; then for log in "$work"/*.log; do echo "--- $log"; tail -n 30 "$log"; done; else rm -rf "$work"; fi' EXIT
rm -rf "$work"
mkdir -p "$work"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if [ "$mode" = find_package ]; then
  cmake --install "$build" --prefix "$work/prefix" >"$work/install.log"
  # No torch folder given: the package remembers the LibTorch it was built against.
  cmake -S "$src/tests/consumers/find_package" -B "$work/consumer" "${generator[@]}" \
    -DCMAKE_PREFIX_PATH="$work/prefix" >"$work/configure.log"
  cmake --build "$work/consumer" >"$work/build.log"
  "$work/consumer/consumer"
  cmake -S "$src/examples/custom_executor" -B "$work/shout" "${generator[@]}" \
    -DCMAKE_PREFIX_PATH="$work/prefix;$torch_prefix" >"$work/shout-configure.log"
  cmake --build "$work/shout" >"$work/shout-build.log"
  printf 'hello\nworld\n' >"$work/in.txt"
  FLOWLINE_PLUGIN_PATH="$work/shout" "$work/prefix/bin/flowline" run "$src/examples/custom_executor/flow.yml" \
    --input "$work/in.txt" --endpoint /shout --output "$work/out.jsonl"
  grep -q '"text":"HELLO!!"' "$work/out.jsonl"
  grep -q '"words":1' "$work/out.jsonl"
  echo "custom executor ok: $(wc -l <"$work/out.jsonl") documents through libshout.so"
  # First-party executors are plugins in the installed executor folder; the launcher links none of them.
  if readelf -d "$work/prefix/bin/flowline" | grep -E 'NEEDED.*libflowline_(sentence_encoder|torch_module)'; then
    echo "the installed launcher links an executor library" >&2
    exit 1
  fi
  printf 'The rabbit ran.\nThe queen shouted.\n' >"$work/sentences.txt"
  printf 'executors:\n  - name: encoder\n    uses: SentenceEncoder\n    device: cpu\n    with: {model: %s}\n' \
    "$src/tests/data/tiny-bert" >"$work/encode.yml"
  "$work/prefix/bin/flowline" --log-level debug run "$work/encode.yml" --input "$work/sentences.txt" \
    --output "$work/embeddings.jsonl" >"$work/encode.log" 2>&1
  grep -q "plugin $work/prefix/lib/flowline/executors/libflowline_sentence_encoder.so: added SentenceEncoder" \
    "$work/encode.log"
  test "$(grep -c '"embedding":{"dtype":"float32","shape":\[32\]' "$work/embeddings.jsonl")" = 2
  echo "installed SentenceEncoder ok: 2 embeddings from $work/prefix/lib/flowline/executors"
  # When that LibTorch is gone, the error says what to set (and no stray "searched '/lib'").
  sed -i 's|^set(FLOWLINE_BUILT_TORCH_DIR .*|set(FLOWLINE_BUILT_TORCH_DIR "/nonexistent/torch")|' \
    "$work/prefix/lib/cmake/flowline/flowlineConfig.cmake"
  if cmake -S "$src/tests/consumers/find_package" -B "$work/gone" "${generator[@]}" \
    -DCMAKE_PREFIX_PATH="$work/prefix" >"$work/gone.txt" 2>&1; then
    echo "find_package(flowline) succeeded with its LibTorch gone" >&2
    exit 1
  fi
  tr -s ' \n' ' ' <"$work/gone.txt" >"$work/gone-flat.txt"
  grep -q "built against LibTorch in '/nonexistent/torch', which is no longer there" "$work/gone-flat.txt"
  grep -q -- "-DTorch_DIR=<venv>/lib/python3.X/site-packages/torch/share/cmake/Torch" "$work/gone-flat.txt"
  if grep -q "searched '/lib'" "$work/gone-flat.txt"; then exit 1; fi
  echo "LibTorch gone: find_package(flowline) says what to set"
else
  # The same FLOWLINE_CUDA as the build under test: the light install has no CUDA parts to build.
  cuda="$(sed -n 's/^FLOWLINE_CUDA:STRING=//p' "$build/CMakeCache.txt")"
  cmake -S "$src/tests/consumers/add_subdirectory" -B "$work/consumer" "${generator[@]}" \
    -DFLOWLINE_SOURCE_DIR="$src" -DCMAKE_PREFIX_PATH="$torch_prefix" -DFLOWLINE_CUDA="${cuda:-AUTO}" -Wno-dev \
    >"$work/configure.log"
  cmake --build "$work/consumer" -j"$(nproc)" >"$work/build.log"
  "$work/consumer/consumer"
fi
