#!/usr/bin/env bash
# The compose deployment for real, with podman (issue 15): builds the CPU image (scripts/build-image.sh,
# cached), exports a flow with `flowline export compose` (a gateway and two containers of the SentenceEncoder
# on the CPU, the models folder mounted), brings it up with podman-compose, posts 10,000 documents through the
# gateway, `podman kill`s one executor container a third of the way through, and checks that every document was answered exactly once
# (tests/deploy/compose_check.py), each with an embedding. Then starts the killed container again and checks
# that it rejoins, and tears everything down — also when a step fails. Every wait is bounded.
#
#   bash scripts/compose-test.sh              (after scripts/setup.sh; about 1 minute with a built image)
#
# Environment: FLOWLINE_IMAGE (default localhost/flowline:cpu; built when missing), FLOWLINE_COMPOSE_PORT
# (default: a free port), FLOWLINE_COMPOSE_KEEP=1 leaves the deployment's folder (not the containers).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
IMAGE="${FLOWLINE_IMAGE:-localhost/flowline:cpu}"
PROJECT="flowline-compose-test-$$"
WORK="$(mktemp -d -t flowline-compose.XXXXXX)"
LAUNCHER="${FLOWLINE_BUILD_DIR:-build}/src/flowline"
step() { printf '\n==> %s\n' "$*"; }

# podman, podman-compose and the settings ../shared/CONTAINERS.md gives for these machines.
if ! command -v podman >/dev/null || ! command -v podman-compose >/dev/null; then
  step "installing podman, runc and podman-compose"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc podman-compose debootstrap >/dev/null
fi
if [ ! -f /etc/containers/containers.conf ]; then
  mkdir -p /etc/containers
  printf '[containers]\ndefault_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]\n[engine]\nruntime = "runc"\n' \
    >/etc/containers/containers.conf
fi
[ -x "$LAUNCHER" ] || { echo "compose-test: $LAUNCHER is missing: run scripts/setup.sh first" >&2; exit 2; }
if ! podman image exists "$IMAGE"; then
  step "building $IMAGE (scripts/build-image.sh)"
  bash scripts/build-image.sh --tag "$IMAGE"
fi

PORT="${FLOWLINE_COMPOSE_PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}"
compose() { (cd "$WORK/deploy" && timeout 300 podman-compose -p "$PROJECT" "$@"); }
cleanup() {
  local status=$?
  step "tearing down $PROJECT"
  if [ -f "$WORK/deploy/compose.yaml" ]; then
    if [ "$status" -ne 0 ]; then
      for c in $(podman ps -a --filter "label=io.podman.compose.project=$PROJECT" --format '{{.Names}}'); do
        echo "--- podman logs $c (last 30 lines)"; podman logs --tail 30 "$c" 2>&1 || true
      done
    fi
    compose down -t 5 >/dev/null 2>&1 || true
  fi
  # Whatever podman-compose left behind (a container it did not stop, the project network).
  podman ps -aq --filter "label=io.podman.compose.project=$PROJECT" | xargs -r podman rm -f >/dev/null 2>&1 || true
  podman network ls -q | grep "^${PROJECT}" | xargs -r podman network rm -f >/dev/null 2>&1 || true
  if [ "${FLOWLINE_COMPOSE_KEEP:-0}" = 1 ]; then echo "kept $WORK"; else rm -rf "$WORK"; fi
  exit "$status"
}
trap cleanup EXIT

step "exporting the flow (gateway + executor 'encoder' in two containers)"
MODELS="$ROOT/models"
[ -f "$MODELS/all-MiniLM-L6-v2/model.safetensors" ] ||
  { echo "compose-test: $MODELS/all-MiniLM-L6-v2 is missing: run scripts/setup.sh first" >&2; exit 2; }
cat >"$WORK/compose-test.yml" <<'EOF'
# The compose test's flow: all-MiniLM-L6-v2 on the CPU in two containers (the models folder mounted).
with:
  request_size: 50
executors:
  - name: encoder
    uses: SentenceEncoder
    device: cpu
    with:
      model: ../models/all-MiniLM-L6-v2
      batch_size: 64
    batching: {max_batch_size: 200, max_delay_ms: 2}
EOF
"$LAUNCHER" export compose "$WORK/compose-test.yml" -o "$WORK/deploy" --scale encoder=2 --image "$IMAGE" \
  --port "$PORT" --models "$MODELS"
sed -n '1,200p' "$WORK/deploy/compose.yaml" | grep -E '^  [a-z]|command|ports|restart' || true

step "podman-compose up (project $PROJECT, gateway on 127.0.0.1:$PORT)"
started=$(date +%s)
compose up -d
# How many executor containers the gateway is connected to, from its /metrics.
hosts_up() { curl -fsS --max-time 5 "http://127.0.0.1:$PORT/metrics" 2>/dev/null | grep -c '^flowline_remote_host_up{.*} 1' || true; }
ready=no
for _ in $(seq 1 120); do
  if curl -fsS --max-time 5 "http://127.0.0.1:$PORT/ready" >/dev/null 2>&1 && [ "$(hosts_up)" -eq 2 ]; then
    ready=yes; break
  fi
  sleep 1
done
[ "$ready" = yes ] || { echo "compose-test: the gateway and both executor containers were not up within 120 s" >&2; exit 1; }
echo "up and connected to both executor containers in $(( $(date +%s) - started )) s"

# The health checks compose defines, run once in each container (podman schedules them through systemd,
# which these machines do not run, so they are not run periodically here).
for c in $(podman ps --filter "label=io.podman.compose.project=$PROJECT" --format '{{.Names}}'); do
  podman healthcheck run "$c" >/dev/null || { echo "compose-test: the health check of $c failed" >&2; exit 1; }
  echo "health check of $c: healthy"
done
victim="$(podman ps --filter "label=io.podman.compose.project=$PROJECT" --filter "label=com.docker.compose.service=encoder-1" --format '{{.Names}}' | head -1)"
[ -n "$victim" ] || { echo "compose-test: no running container of service encoder-1" >&2; exit 1; }

step "posting 10,000 documents; podman kill $victim a third of the way"
timeout 600 python3 tests/deploy/compose_check.py --url "http://127.0.0.1:$PORT" --documents 10000 \
  --request-size 50 --threads 4 --expect embedding=384 --kill "podman kill $victim"

step "after the kill: what the gateway saw, and whether the killed container came back"
metrics="$(curl -fsS --max-time 5 "http://127.0.0.1:$PORT/metrics")"
grep -E '^flowline_remote_host_(up|lost|reconnects|requeued_batches)' <<<"$metrics" || true
lost="$(awk '/^flowline_remote_host_lost/ {s += $2} END {print s + 0}' <<<"$metrics")"
# podman's restart policy leaves a container that `podman kill` stopped alone: start it again, as an
# operator (or Kubernetes) would, and the gateway must reconnect to it by itself.
podman start "$victim" >/dev/null
restarted=$(date +%s)
back=no
for _ in $(seq 1 60); do
  if [ "$(hosts_up)" -eq 2 ]; then back=yes; break; fi
  sleep 1
done
[ "$back" = yes ] || { echo "compose-test: $victim was started again but did not rejoin within 60 s" >&2; exit 1; }
echo "$victim started again: rejoined the gateway in $(( $(date +%s) - restarted )) s"
[ "$lost" -ge 1 ] || { echo "compose-test: the gateway never saw a host lost: the kill did not land mid-run" >&2; exit 1; }
echo "compose-test: PASS in $(( $(date +%s) - started )) s (10,000 documents embedded, 0 lost, 0 duplicated, one container killed, rejoined when started again)"
