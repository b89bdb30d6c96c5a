#!/usr/bin/env python3
"""Remote executors (issue 14): a three-stage NoOp flow whose middle executor runs on executor servers
(`flowline serve FLOW --executor mid`), over loopback, against the same flow all in one process.

    python3 bench/remote_flow.py [--docs 1000000] [--servers 1] [--in-flight 8] [--runs 3] [--kill]
                                 [--flowline build/src/flowline]

    client: first (NoOp) ──► mid ══ TCP ══► server(s): mid (NoOp) ──► back ──► last (NoOp) ──► counted

Prints docs/s for each run (`flowline run ... --stats-json`: documents / post seconds) and the best.
--encoder MODEL_DIR --corpus DIR: instead, the SentenceEncoder (cuda, --dtype, --replicas, batch --batch) served
by one server process, a client flow posting the corpus's paragraphs --copies times (request size --batch),
against the same encoder in the client's process (target on one H100: remote >= 80% of in-process).
--kill: three servers; after the undisturbed runs, one more run in which one server is killed with SIGKILL a
third of the way through (by the undisturbed run's time); prints that run's time against the undisturbed
best (target: at most 1.5x) and checks every document came back.
"""
import argparse
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent


def start_server(flowline, flow, tmp, name, gpu=None):
    ready = tmp / f"{name}.port"
    log = open(tmp / f"{name}.log", "w")
    env = dict(os.environ)
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(gpu)
    p = subprocess.Popen([flowline, "serve", str(flow), "--executor", "mid", "--port", "0", "--ready-file",
                          str(ready)], stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    deadline = time.time() + 60
    while time.time() < deadline:
        if p.poll() is not None:
            sys.exit(f"server {name} ended: {(tmp / f'{name}.log').read_text()}")
        if ready.exists() and ready.read_text().endswith("\n"):
            return p, int(ready.read_text())
        time.sleep(0.05)
    sys.exit(f"server {name} was not ready within 60 s")


def run(flowline, flow, data, stats, kill=None):
    """One `flowline run`; kill = (process, seconds): SIGKILL that server after that many seconds."""
    started = time.time()
    p = subprocess.Popen([flowline, "run", str(flow), "-i", str(data), "--progress", "never", "--stats-json",
                          str(stats)], stderr=subprocess.PIPE, text=True)
    if kill:
        time.sleep(kill[1])
        kill[0].send_signal(signal.SIGKILL)
    _, err = p.communicate(timeout=600)
    wall = time.time() - started
    if p.returncode != 0:
        sys.exit(f"flowline run failed ({p.returncode}): {err}")
    s = json.loads(stats.read_text())
    return s, wall


def main():
    a = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("--docs", type=int, default=1_000_000)
    a.add_argument("--servers", type=int, default=1)
    a.add_argument("--in-flight", type=int, default=8, help="remote.in_flight (requests in flight per host)")
    a.add_argument("--runs", type=int, default=3)
    a.add_argument("--kill", action="store_true", help="three servers; one killed a third of the way")
    a.add_argument("--flowline", default=str(ROOT / "build/src/flowline"))
    a.add_argument("--encoder", help="model folder: bench the SentenceEncoder on cuda instead of NoOp")
    a.add_argument("--corpus", default=str(ROOT.parent / "shared/data/corpus"))
    a.add_argument("--copies", type=int, default=50)
    a.add_argument("--dtype", default="fp16")
    a.add_argument("--replicas", type=int, default=4)
    a.add_argument("--batch", type=int, default=1024)
    a.add_argument("--gpu-per-server", action="store_true",
                   help="server i sees only GPU i (CUDA_VISIBLE_DEVICES); with --servers 2 on two GPUs")
    o = a.parse_args()
    servers = 3 if o.kill else o.servers
    with tempfile.TemporaryDirectory() as t:
        tmp = pathlib.Path(t)
        data = tmp / "input.txt"
        request = 100
        mid = "{name: mid, uses: NoOp}"
        if o.encoder:
            paragraphs = []
            for book in sorted(pathlib.Path(o.corpus).glob("*.txt")):
                paragraphs += [" ".join(p.split()) for p in book.read_text().split("\n\n") if p.strip()]
            with open(data, "w") as f:
                for _ in range(o.copies):
                    f.write("\n".join(paragraphs) + "\n")
            o.docs = len(paragraphs) * o.copies
            request = o.batch
            mid = (f"{{name: mid, uses: SentenceEncoder, device: cuda, replicas: {o.replicas}, with: {{model: {o.encoder}, "
                   f"dtype: {o.dtype}, batch_size: {o.batch}}}}}")
        else:
            with open(data, "w") as f:
                for i in range(o.docs):
                    f.write(f"document {i} of the remote benchmark\n")
        server_flow = tmp / "server.yml"
        server_flow.write_text(f"executors:\n  - {mid}\n")
        procs = [start_server(o.flowline, server_flow, tmp, f"s{i}", i if o.gpu_per_server else None)
                 for i in range(servers)]
        hosts = ", ".join(f"127.0.0.1:{port}" for _, port in procs)
        timeout = "timeout_ms: 2000, retry_max_ms: 500, " if o.kill else ""
        client = tmp / "client.yml"
        client.write_text(f"with: {{request_size: {request}, max_in_flight: 64}}\nexecutors:\n  - {{name: first, uses: NoOp}}\n"
                          f"  - name: mid\n    hosts: [{hosts}]\n    remote: {{{timeout}in_flight: {o.in_flight}}}\n"
                          "  - {name: last, uses: NoOp}\n")
        local = tmp / "local.yml"
        local.write_text(f"with: {{request_size: {request}, max_in_flight: 64}}\nexecutors:\n  - {{name: first, uses: NoOp}}\n"
                         f"  - {mid}\n  - {{name: last, uses: NoOp}}\n")
        stats = tmp / "stats.json"
        what = f"SentenceEncoder {o.dtype} x{o.replicas} on cuda" if o.encoder else "NoOp"
        print(f"{o.docs:,} documents, request size {request}, mid: {what}, {servers} server(s), in_flight {o.in_flight} per host")
        best = {"remote": 0.0, "in-process": 0.0}
        best_seconds = None
        for r in range(o.runs):
            for name, flow in (("remote", client), ("in-process", local)):
                s, wall = run(o.flowline, flow, data, stats)
                rate = s["documents"] / s["seconds"]
                best[name] = max(best[name], rate)
                if name == "remote":
                    best_seconds = s["seconds"] if best_seconds is None else min(best_seconds, s["seconds"])
                print(f"run {r + 1} {name:>10}: {s['documents']:,} docs in {s['seconds']:.3f} s = {rate:,.0f} docs/s")
        print(f"best: remote {best['remote']:,.0f} docs/s, in-process {best['in-process']:,.0f} docs/s "
              f"({100 * best['remote'] / best['in-process']:.0f}%)")
        if o.kill:
            s, wall = run(o.flowline, client, data, stats, kill=(procs[1][0], best_seconds / 3))
            hosts = s.get("remote_hosts", [])
            print(f"kill run: {s['documents']:,} docs ({s['failed_requests']} failed requests) in {s['seconds']:.3f} s "
                  f"= {s['seconds'] / best_seconds:.2f}x the undisturbed {best_seconds:.3f} s; host 2: "
                  + json.dumps(hosts[1] if len(hosts) > 1 else {}))
            if s["documents"] != o.docs or s["failed_requests"] != 0:
                sys.exit("documents were lost or failed")
        for p, _ in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.wait(timeout=30)


if __name__ == "__main__":
    main()
