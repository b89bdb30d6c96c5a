"""PgVectorWriter's load rate (issue 55 §3): 384-dimension embeddings given, rows/s into a table without an
index, beside psycopg's COPY ... FROM STDIN (FORMAT BINARY) with pgvector's adapter, in the same run against
the same throwaway server (tests/pgvector/pg_server.py: PyPI pgserver's PostgreSQL with pgvector, Unix socket,
fsync off for both).

  .venv/bin/python bench/pgvector_writer.py [--rows 200000] [--dim 384] [--request 1024] [--runs 3] [--replicas 1]
      [--connections 1,2]

Needs pgserver, psycopg, pgvector and numpy in the Python that runs it (.venv has them after
`.venv/bin/pip install psycopg[binary] pgvector`; setup.sh installs pgserver and numpy).

Both sides write the same rows (id, text, tags {}, embedding) with the same batching: one transaction per
request of --request rows. Figures, best of --runs, each on a freshly dropped table:
  - flowline end to end: `flowline run` of a flow holding the writer alone (on_conflict: error, plain COPY)
    over a JSONL file of the rows, documents / (post window + closing), as --stats-json reports: includes
    reading and parsing the JSONL (384 numbers a line) on the launcher's posting thread;
  - flowline writer: rows / the writer's own time (its copy_seconds + commit_seconds metrics: encoding the
    COPY stream, sending it, the server's work, COMMIT), the part that compares with psycopg;
  - each of them once per --connections count (the writer's `connections`: each request's rows split between
    that many connections, written at once), labelled "(N conn)";
  - flowline upsert: the same end to end with on_conflict: update (staging table + INSERT ... ON CONFLICT);
  - flowline from .npy (per --connections count): the same `flowline run` over the rows as an .npy file
    (numpy.save of the float32 array) with its sidecar rows.docs.jsonl of ids, texts and tags — what a binary
    `--output` writes, and what flows/load-pg.yml loads: no number is parsed, the rows are read as they are;
  - psycopg: rows / wall time of the COPY loop from numpy rows already in memory;
  - reader alone: the same `flowline run` with a NoOp instead of the writer: the ceiling the JSONL input sets
    on the end-to-end figure; likewise "npy reader alone" for the .npy input;
  - flowline in process (per --connections count): the same rows as flowline.Document objects built beforehand
    in this Python process (build/python's package, numpy embeddings: no text to parse), posted to a Flow of the
    writer alone (`run_key` set, so it records its progress rows as under `flowline run`); rows / the post's
    wall time, and rows / the writer's own time. Like psycopg's loop it starts from embeddings in memory, and
    nothing else runs while it writes. Left out with --no-in-process, or where the package is not built.
Each side's CPU time per row is reported too (cpu_us_per_row): the server's (every PostgreSQL process, the
backends that exited included) and the client's (the launcher process, or the Python process running psycopg),
so that on a machine where both share the cores one can see whose work bounds the rate.
After each side the table's content digest (md5 of the vector_send bytes in id order) is compared: both
sides must have stored the same bits.
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np
import psycopg
from pgvector.psycopg import register_vector
from psycopg.types.json import Jsonb

ROOT = pathlib.Path(__file__).resolve().parent.parent
SERVER = ROOT / "tests/pgvector/pg_server.py"
DIGEST = "SELECT count(*), md5(string_agg(encode(vector_send(embedding), 'hex'), '' ORDER BY id)) FROM {}"


def make_input(path, ids, texts, vectors):
    with open(path, "w") as f:
        for i, t, v in zip(ids, texts, vectors):
            doc = {"id": i, "text": t, "embedding": {"dtype": "float32", "shape": [len(v)], "data": v.tolist()}}
            f.write(json.dumps(doc) + "\n")


def server_cpu_seconds(postmaster):
    """CPU time (user + system) the server has used so far: the postmaster, its live processes (the backends,
    the writer, the WAL writer...) and, through the postmaster's children times, the backends that exited."""
    tick = os.sysconf("SC_CLK_TCK")

    def stat(pid):
        text = pathlib.Path(f"/proc/{pid}/stat").read_text()
        fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) ": state, ppid, ...
        return int(fields[1]), [int(x) for x in fields[11:15]]  # ppid; utime, stime, cutime, cstime

    total = sum(stat(postmaster)[1]) / tick
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != postmaster:
            try:
                ppid, times = stat(int(entry))
            except (OSError, ValueError):
                continue  # gone meanwhile
            if ppid == postmaster:
                total += (times[0] + times[1]) / tick
    return total


def measured(cpu, postmaster, rows, run):
    """Runs `run()`; appends the server's and the client's CPU microseconds per row to cpu["server"] and
    cpu["client"] (the client: this process and the children it waited for)."""
    server, client = server_cpu_seconds(postmaster), os.times()
    result = run()
    after = os.times()
    cpu["server"].append(round((server_cpu_seconds(postmaster) - server) / rows * 1e6, 2))
    used = (after.user - client.user) + (after.system - client.system) + (after.children_user - client.children_user) + (
        after.children_system - client.children_system)
    cpu["client"].append(round(used / rows * 1e6, 2))
    return result


def flowline_run(args, uri, flow, jsonl, work):
    stats = work / "stats.json"
    cmd = [str(args.launcher), "run", str(flow), "--input", str(jsonl), "--progress", "never", "--stats-json",
           str(stats), "--request-size", str(args.request)]
    if "noop" not in flow.name:
        cmd += ["--set", f"db.uri={uri}"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"flowline run failed:\n{done.stdout}{done.stderr}")
    s = json.loads(stats.read_text())
    end_to_end = s["documents"] / (s["seconds"] + s["after_post_seconds"])
    if "noop" in flow.name:
        return end_to_end, None, s["documents"]
    replicas = [r["metrics"] for r in s["replicas"] if r["executor"] == "db"]
    rows = sum(m.get("rows", 0) for m in replicas)
    # Replicas write at once: the writer's time is the busiest replica's.
    writer = rows / max(m.get("copy_seconds", 0) + m.get("commit_seconds", 0) for m in replicas)
    return end_to_end, writer, int(rows)


def in_process_run(flowline, uri, docs, connections, request, dim):
    """rows / wall time of posting `docs` to a Flow of the writer alone, and rows / the writer's own time."""
    flow_yaml = json.dumps({"executors": [{"name": "db", "uses": "PgVectorWriter", "with": {
        "uri": uri, "table": "bench", "on_conflict": "error", "dimension": dim, "connections": connections,
        "run_key": "bench-in-process"}}]})
    with flowline.Flow.from_yaml(flow_yaml, "bench-in-process.yml") as flow:
        start = time.perf_counter()
        flow.post("/index", docs, request_size=request)
        wall = time.perf_counter() - start
        m = [r["metrics"] for r in flow.stats()["replicas"] if r["executor"] == "db"][0]
    return len(docs) / wall, m["rows"] / (m["copy_seconds"] + m["commit_seconds"])


def psycopg_run(conn, table, ids, texts, vectors, request):
    start = time.perf_counter()
    for at in range(0, len(ids), request):
        with conn.transaction():
            with conn.cursor().copy(f"COPY {table} (id, text, tags, embedding) FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(["text", "text", "jsonb", "vector"])
                for k in range(at, min(at + request, len(ids))):
                    copy.write_row((ids[k], texts[k], Jsonb({}), vectors[k]))
    return len(ids) / (time.perf_counter() - start)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--request", type=int, default=1024)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--replicas", type=int, default=1, help="the writer's replicas in the flow")
    p.add_argument("--connections", default="1,2", help="the writer's `connections` to measure, comma-separated")
    p.add_argument("--launcher", default=str(ROOT / "build/src/flowline"))
    p.add_argument("--no-in-process", action="store_true", help="leave out the in-process (Python package) figures")
    args = p.parse_args()
    flowline = None
    if not args.no_in_process:
        sys.path.insert(0, str(ROOT / "build/python"))
        try:
            import flowline
        except ImportError as e:
            print(f"no in-process figures: {e}", file=sys.stderr)

    started = subprocess.run([sys.executable, str(SERVER), "start"], capture_output=True, text=True, timeout=120)
    if started.returncode != 0:
        sys.exit(f"cannot start the test server: {started.stderr}")
    folder = json.loads(started.stdout)["socket_dir"]
    uri = f"postgresql://postgres@/postgres?host={folder}"
    try:
        with tempfile.TemporaryDirectory(prefix="pgbench-") as tmp:
            work = pathlib.Path(tmp)
            rng = np.random.default_rng(55)
            vectors = rng.standard_normal((args.rows, args.dim), dtype=np.float32)
            ids = [f"doc-{i:08d}" for i in range(args.rows)]
            texts = [f"passage {i}: some text of the length of a short sentence or two" for i in range(args.rows)]
            jsonl = work / "rows.jsonl"
            make_input(jsonl, ids, texts, vectors)
            npy = work / "rows.npy"
            np.save(npy, vectors)
            with open(work / "rows.docs.jsonl", "w") as f:
                for i, t in zip(ids, texts):
                    f.write(json.dumps({"id": i, "text": t, "tags": {}}) + "\n")
            flows = {}
            flows["noop"] = work / "flow-noop.yml"
            flows["noop"].write_text("jtype: Flow\nexecutors:\n  - name: db\n    uses: NoOp\n")
            counts = [int(c) for c in args.connections.split(",")]
            for mode in ("error", "update"):
                for c in counts:
                    flows[mode, c] = work / f"flow-{mode}-{c}.yml"
                    flows[mode, c].write_text(
                        "jtype: Flow\nexecutors:\n  - name: db\n    uses: PgVectorWriter\n"
                        f"    replicas: {args.replicas}\n"
                        f"    with: {{table: bench, on_conflict: {mode}, dimension: {args.dim}, connections: {c}}}\n")
            conn = psycopg.connect(uri, autocommit=True)
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            register_vector(conn)
            ddl = f"CREATE TABLE bench (id text PRIMARY KEY, text text, tags jsonb, embedding vector({args.dim}))"
            results = {"psycopg": [], "reader alone (NoOp)": [], "npy reader alone (NoOp)": []}
            for c in counts:
                for label in ("flowline end to end", "flowline writer", "flowline upsert end to end",
                              "flowline from .npy end to end", "flowline from .npy, writer"):
                    results[f"{label} ({c} conn)"] = []
            sides = [("flowline", c) for c in counts] + [("upsert", c) for c in counts] + [("psycopg", 0)]
            sides += [("npy", c) for c in counts]
            docs = None
            if flowline:
                docs = [flowline.Document(texts[i], id=ids[i], tags={}, embedding=vectors[i]) for i in range(args.rows)]
                sides += [("in process", c) for c in counts]
                for c in counts:
                    results[f"flowline in process, post ({c} conn)"] = []
                    results[f"flowline in process, writer ({c} conn)"] = []
            digests = set()
            backend_stat = pathlib.Path(f"/proc/{conn.info.backend_pid}/stat").read_text()
            postmaster = int(backend_stat.rsplit(")", 1)[1].split()[1])  # the backend's parent
            name = {side: side[0] if side[0] == "psycopg" else f"{side[0]} ({side[1]} conn)" for side in sides}
            cpu = {name[side]: {"server": [], "client": []} for side in sides}
            for _ in range(args.runs):
                results["reader alone (NoOp)"].append(flowline_run(args, uri, flows["noop"], jsonl, work)[0])
                results["npy reader alone (NoOp)"].append(flowline_run(args, uri, flows["noop"], npy, work)[0])
                for side in sides:
                    conn.execute("DROP TABLE IF EXISTS bench")
                    conn.execute("DELETE FROM flowline_progress WHERE split_part(sink, '#', 1) = 'bench'"
                                 if conn.execute("SELECT to_regclass('flowline_progress')").fetchone()[0] else "SELECT 1")
                    conn.execute("CHECKPOINT")
                    if side[0] == "in process":
                        post, writer = measured(cpu[name[side]], postmaster, args.rows, lambda: in_process_run(
                            flowline, uri, docs, side[1], args.request, args.dim))
                        results[f"flowline in process, post ({side[1]} conn)"].append(post)
                        results[f"flowline in process, writer ({side[1]} conn)"].append(writer)
                    elif side[0] == "psycopg":
                        conn.execute(ddl)
                        results["psycopg"].append(measured(cpu["psycopg"], postmaster, args.rows, lambda: psycopg_run(
                            conn, "bench", ids, texts, vectors, args.request)))
                    else:
                        flow = flows["update" if side[0] == "upsert" else "error", side[1]]
                        source = npy if side[0] == "npy" else jsonl
                        e2e, writer, rows = measured(cpu[name[side]], postmaster, args.rows,
                                                     lambda: flowline_run(args, uri, flow, source, work))
                        assert rows == args.rows, rows
                        if side[0] == "npy":
                            results[f"flowline from .npy end to end ({side[1]} conn)"].append(e2e)
                            results[f"flowline from .npy, writer ({side[1]} conn)"].append(writer)
                        elif side[0] == "flowline":
                            results[f"flowline end to end ({side[1]} conn)"].append(e2e)
                            results[f"flowline writer ({side[1]} conn)"].append(writer)
                        else:
                            results[f"flowline upsert end to end ({side[1]} conn)"].append(e2e)
                    digests.add(tuple(conn.execute(DIGEST.format("bench")).fetchone()))
            if len(digests) != 1:
                sys.exit(f"the sides stored different rows: {digests}")
            best = {k: max(v) for k, v in results.items()}
            print(json.dumps({"rows": args.rows, "dim": args.dim, "request": args.request, "runs": args.runs,
                              "replicas": args.replicas, "connections": counts,
                              "rows_per_s_best": {k: round(v) for k, v in best.items()},
                              "rows_per_s_all": {k: [round(x) for x in v] for k, v in results.items()},
                              "writer_over_psycopg": {c: round(best[f"flowline writer ({c} conn)"] / best["psycopg"], 2)
                                                      for c in counts},
                              "end_to_end_over_psycopg": {
                                  c: round(best[f"flowline end to end ({c} conn)"] / best["psycopg"], 2)
                                  for c in counts},
                              "npy_end_to_end_over_psycopg": {
                                  c: round(best[f"flowline from .npy end to end ({c} conn)"] / best["psycopg"], 2)
                                  for c in counts},
                              "in_process_writer_over_psycopg": {
                                  c: round(best[f"flowline in process, writer ({c} conn)"] / best["psycopg"], 2)
                                  for c in counts} if flowline else None,
                              "cpu_us_per_row": cpu,
                              "same_rows_digest": list(digests)[0][1]}, indent=2))
    finally:
        subprocess.run([sys.executable, str(SERVER), "stop", folder], capture_output=True, timeout=120)


if __name__ == "__main__":
    main()
