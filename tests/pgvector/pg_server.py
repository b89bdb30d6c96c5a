#!/usr/bin/env python3
"""A throwaway PostgreSQL server with pgvector for tests and benches, from PyPI's pgserver wheel.

    pg_server.py start [--password PW]   prints {"data": DIR, "socket_dir": DIR, "port": 5432} and exits with
                                         the server running on a Unix socket in a new temp folder (no TCP)
    pg_server.py stop DIR                stops the server of DIR (immediate mode) and removes the folder

Exit status 77 with one line on stderr when pgserver is not installed (callers skip). Under root the
server runs as pgserver's system user (PostgreSQL refuses root), which pgserver's helpers create.
The database superuser is `postgres`; with --password, every connection must give PW (scram-sha-256),
else every local connection is trusted.
"""
import json
import warnings
import os
import shutil
import subprocess
import sys
import tempfile

warnings.filterwarnings("ignore")  # platformdirs warns of an unset XDG_RUNTIME_DIR on import
try:
    import pgserver.utils as pgu
    from pgserver._commands import POSTGRES_BIN_PATH
except ImportError:
    print("pgserver is not installed (scripts/setup.sh installs it into .venv)", file=sys.stderr)
    sys.exit(77)

TIMEOUT_S = 30


def run_as(user, args):
    subprocess.run(args, check=True, capture_output=True, text=True, user=user, timeout=TIMEOUT_S)


def start(password):
    user = None
    folder = tempfile.mkdtemp(prefix="flpg-")  # short: a socket path must stay under 107 bytes
    data = os.path.join(folder, "data")
    if os.geteuid() == 0:
        user = "pgserver"
        pgu.ensure_user_exists(user)
        pgu.ensure_prefix_permissions(POSTGRES_BIN_PATH)
        pgu.ensure_folder_permissions(POSTGRES_BIN_PATH, 0o055)
        pgu.ensure_folder_permissions(POSTGRES_BIN_PATH.parent / "lib", 0o044)
        shutil.chown(folder, user)
    os.chmod(folder, 0o777)
    auth = ["--auth=trust"]
    if password is not None:
        pwfile = os.path.join(folder, "pw")
        with open(pwfile, "w") as f:
            f.write(password + "\n")
        if user:
            shutil.chown(pwfile, user)
        auth = ["--auth=scram-sha-256", f"--pwfile={pwfile}"]
    run_as(user, [str(POSTGRES_BIN_PATH / "initdb"), "-D", data, "-U", "postgres", "--encoding=utf8",
                  "--no-sync", *auth])
    run_as(user, [str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", data, "-w", "-t", str(TIMEOUT_S), "-l",
                  os.path.join(folder, "log"), "-o", f"-h '' -k {folder} -c fsync=off", "start"])
    print(json.dumps({"data": folder, "socket_dir": folder, "port": 5432, "bin": str(POSTGRES_BIN_PATH)}))


def stop(folder):
    user = "pgserver" if os.geteuid() == 0 else None
    data = os.path.join(folder, "data")
    if os.path.exists(os.path.join(data, "postmaster.pid")):
        run_as(user, [str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", data, "-w", "-t", str(TIMEOUT_S), "-m",
                      "immediate", "stop"])
    shutil.rmtree(folder, ignore_errors=True)


def main():
    args = sys.argv[1:]
    if args[:1] == ["start"]:
        start(args[2] if args[1:2] == ["--password"] and len(args) > 2 else None)
    elif args[:1] == ["stop"] and len(args) == 2:
        stop(args[1])
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
