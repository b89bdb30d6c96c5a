#!/usr/bin/env bash
# A soak of `flowline serve`: a fixed request rate for a long time, with the server's RSS sampled, zero
# errors required, and a clean drain on SIGTERM at the end.
#
#   bench/serve_soak.sh FLOW.yml BODY.json ROUTE RATE SECONDS [BUILD_DIR] [OUT_DIR]
#   e.g. bench/serve_soak.sh noop.yml body.json /post 17500 600          # half of the 2-core peak
#
# Runs BUILD_DIR/src/flowline serve FLOW on a free loopback port, then BUILD_DIR/bench/http_load at RATE
# requests/s over 64 connections for SECONDS after a 30 s warm-up, reporting every 30 s (rate, errors, the
# server's RSS). Writes OUT_DIR/soak.json and soak.txt. Exit 0 only when http_load saw no error, the RSS
# grew at most 5% after warm-up, and the server exited 0 after SIGTERM. The server is killed on any exit.
set -uo pipefail
if [ $# -lt 5 ]; then
  sed -n '2,11p' "$0" >&2
  exit 2
fi
FLOW="$1" BODY="$2" ROUTE="$3" RATE="$4" SECONDS_="$5"
BUILD="${6:-build}" OUT_DIR="${7:-$(mktemp -d -t serve_soak.XXXXXX)}"
mkdir -p "$OUT_DIR"
READY="$OUT_DIR/port.txt"
rm -f "$READY"
"$BUILD/src/flowline" serve "$FLOW" --port 0 --ready-file "$READY" >"$OUT_DIR/serve.log" 2>&1 &
SERVER=$!
trap 'kill -KILL $SERVER 2>/dev/null' EXIT
for _ in $(seq 1 600); do
  [ -s "$READY" ] && break
  kill -0 $SERVER 2>/dev/null || { echo "serve_soak: flowline serve exited:" >&2; tail -20 "$OUT_DIR/serve.log" >&2; exit 1; }
  sleep 0.2
done
[ -s "$READY" ] || { echo "serve_soak: flowline serve not ready after 120 s" >&2; exit 1; }
PORT="$(cat "$READY")"
echo "serve_soak: flowline serve $FLOW on port $PORT (pid $SERVER); $RATE req/s to $ROUTE for $SECONDS_ s"
"$BUILD/bench/http_load" --url "http://127.0.0.1:$PORT$ROUTE" --body-file "$BODY" --connections 64 \
  --rate "$RATE" --duration "$SECONDS_" --warmup 30 --report-every 30 --rss-pid $SERVER \
  --json "$OUT_DIR/soak.json" 2>&1 | tee "$OUT_DIR/soak.txt"
load=${PIPESTATUS[0]}
kill -TERM $SERVER
wait $SERVER
served=$?
growth="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["rss_bytes"]["growth_pct"])' "$OUT_DIR/soak.json")"
echo "serve_soak: http_load exit $load; RSS growth after warm-up ${growth}%; flowline serve exit $served after SIGTERM"
tail -3 "$OUT_DIR/serve.log"
python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) <= 5.0 else 1)' "$growth" || { echo "serve_soak: RSS grew over 5%" >&2; exit 1; }
[ "$load" = 0 ] && [ "$served" = 0 ]
