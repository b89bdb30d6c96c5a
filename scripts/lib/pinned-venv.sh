#!/usr/bin/env bash
# One virtualenv holding exactly a pinned set of PyPI packages, made or checked by one procedure: sourced by
# scripts/setup-clients.sh (.venv-clients) and scripts/setup-clip-client.sh (.venv-clip), which set what
# differs and call pinned_venv "$@".
#
# The caller sets:
#   NAME        the script's name, for messages ("setup-clients")
#   VENV        the venv's folder; PYTHON, the interpreter that creates it
#   PINS        the complete `pip freeze` of a working install, one "package==version" a line
#   SMOKE       Python that imports what a working install must have and asserts the versions
#   SUMMARY     the set in a few words, for messages ("jina 3.34.0, docarray 0.40.0")
#   PY_RANGE    a Python condition on sys.version_info the interpreter must meet ("(3, 9) <= sys.version_info")
#   PY_NEED     the message when it does not ("Jina 3.34.0 needs Python >= 3.9")
# pinned_venv takes the script's arguments (--force: delete the venv and install it again). Safe to re-run:
# when the venv holds exactly the pinned set (a marker file with the pins' hash, and SMOKE passes) it says so
# and returns. Exits non-zero, saying why, when something fails.

pinned_venv() {
  step() { printf '%s: %s\n' "$NAME" "$*"; }
  die() { printf '%s: FAILED: %s\n' "$NAME" "$*" >&2; exit 1; }
  local force=no arg
  for arg in "$@"; do
    case "$arg" in
      --force) force=yes ;;
      *) echo "$NAME.sh: unknown argument '$arg' (expected --force)" >&2; exit 2 ;;
    esac
  done
  local pin_hash marker py
  pin_hash="$(printf '%s' "$PINS" | sha256sum | cut -c1-16)"
  marker="$VENV/.flowline-pins"
  py="$VENV/bin/python"

  if [ "$force" = yes ] && [ -e "$VENV" ]; then
    [ -f "$VENV/pyvenv.cfg" ] || die "$VENV exists but is not a virtualenv (no pyvenv.cfg); not deleting it"
    step "--force: deleting $VENV"
    rm -rf "$VENV"
  fi

  # 1. Already complete? (the venv's python runs, the marker names this pin set, the imports work)
  if [ -x "$py" ] && [ "$(cat "$marker" 2>/dev/null)" = "$pin_hash" ] && "$py" -W ignore -c "$SMOKE" >/dev/null 2>&1; then
    step "$VENV is up to date ($SUMMARY); nothing to do"
    return 0
  fi

  # 2. The venv itself: created when missing, recreated when its python no longer runs.
  if [ -e "$VENV" ] && ! "$py" -c 'import sys' >/dev/null 2>&1; then
    [ -f "$VENV/pyvenv.cfg" ] || die "$VENV exists but is not a virtualenv (no pyvenv.cfg); move it away"
    step "$VENV is broken (its python does not run): recreating it"
    rm -rf "$VENV"
  fi
  if [ ! -e "$VENV" ]; then
    command -v "$PYTHON" >/dev/null || die "$PYTHON not found (install python3 and python3-venv)"
    "$PYTHON" -c "import sys; sys.exit(0 if $PY_RANGE else 1)" || die "$PYTHON is $("$PYTHON" -V 2>&1); $PY_NEED"
    step "creating $VENV with $("$PYTHON" -V 2>&1)"
    "$PYTHON" -m venv "$VENV" >/dev/null || die "'$PYTHON -m venv $VENV' failed (Debian: apt-get install python3-venv)"
  else
    step "using existing $VENV ($("$py" -V 2>&1))"
  fi

  # 3. The pinned set. pip prints only errors; on failure its log tail is shown.
  local log req
  log="$(mktemp -t "$NAME.XXXXXX.log")"
  req="$(mktemp -t "$NAME.XXXXXX.txt")"
  # shellcheck disable=SC2064  # the names are fixed now
  trap "rm -f '$log' '$req'" EXIT
  printf '%s\n' "$PINS" | sed '/^$/d' >"$req"
  step "installing $(wc -l <"$req") pinned packages ($SUMMARY) into $VENV"
  if ! "$py" -m pip install --disable-pip-version-check --no-input -q -r "$req" >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    die "pip install failed (log above); is PyPI reachable?"
  fi

  # 4. Check: nothing inconsistent, and the imports work.
  step "checking the install (pip check, imports)"
  if ! "$py" -m pip check >"$log" 2>&1; then
    cat "$log" >&2
    die "pip check found broken requirements in $VENV"
  fi
  "$py" -W ignore -c "$SMOKE" >"$log" 2>&1 || { cat "$log" >&2; die "the installed packages do not import"; }
  echo "$pin_hash" >"$marker"
  step "done: $VENV/bin/python has $SUMMARY"
}
