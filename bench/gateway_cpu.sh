#!/usr/bin/env bash
# The gateway's CPU per request: `flowline serve` of a NoOp flow with --threads T, http_load's closed loop of
# C connections posting one short text for D seconds; prints requests/s and the server's CPU us a request.
#   bash bench/gateway_cpu.sh FLOWLINE HTTP_LOAD THREADS [CONNECTIONS] [SECONDS]
#   after `cmake --build build --target flowline http_load`, e.g. bash bench/gateway_cpu.sh build/src/flowline build/bench/http_load 16 64 5
set -uo pipefail
F=$1; L=$2; T=$3; C=${4:-64}; D=${5:-6}
for exe in "$F" "$L"; do
  [ -x "$exe" ] || { echo "gateway_cpu.sh: $exe not found: build it first (cmake --build build --target flowline http_load)" >&2; exit 2; }
done
W=$(mktemp -d)
printf 'executors:\n  - name: noop\n    uses: NoOp\n' > $W/noop.yml
echo '{"data":[{"text":"hello world, a short query"}]}' > $W/body.json
$F serve $W/noop.yml --port 0 --threads $T --ready-file $W/port > $W/serve.log 2>&1 &
S=$!
for _ in $(seq 200); do [ -s $W/port ] && break; sleep 0.05; done
P=$(cat $W/port)
$L --url http://127.0.0.1:$P/default --body-file $W/body.json --connections $C --duration 1 --warmup 0.5 > /dev/null
t0=$(awk '{print $14+$15}' /proc/$S/stat)
$L --url http://127.0.0.1:$P/default --body-file $W/body.json --connections $C --duration $D --warmup 0 --json $W/load.json > /dev/null
t1=$(awk '{print $14+$15}' /proc/$S/stat)
kill $S; wait $S 2>/dev/null
python3 -c "
import json; j = json.load(open('$W/load.json')); n = j['requests']; hz = 100
print(f\"{j['requests_per_s']:.0f} req/s, server CPU {($t1 - $t0) / hz / n * 1e6:.1f} us a request, p50 {j.get('latency_ms', {}).get('p50', 0):.3f} ms\")"
rm -rf $W
