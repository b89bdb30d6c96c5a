"""Seed 3's job at its shape: msmarco-distilbert-base-tas-b over the corpus x50 into a local PostgreSQL (issue 55 §3).

flows/index-pg.yml as the README runs it (SentenceEncoder, `replicas: auto`, `batch_size: auto`, then the
PgVectorWriter `db`), with the encoder given a random-weight checkpoint of msmarco-distilbert-base-tas-b's shape
(DistilBERT, 768 wide, 6 layers, CLS pooling, no Normalize: made here by transformers, the speed does not depend on
the weights) and the writer given a PostgreSQL + pgvector server started here from pgserver's build (--pginstall:
its `pginstall` folder in site-packages, or a .tar.xz of `pgserver/pginstall` and `pgserver.libs` made in
site-packages), on a Unix socket, with its default durability (fsync and synchronous
commit on). Per dtype: the encoder alone (no writer: the ceiling), then the whole flow into a fresh table; docs/s
end to end from process start to exit, the table's row count and dimension checked, and what 20.6M chunks would
take at that rate. --hnsw also times `index: hnsw` (built after loading) on the last table. --connections N
sets the writer's connections (each request's rows split between N connections written at once); --writers
RxC[,RxC...] runs the flow once per writer setting instead, R writer replicas of C connections each (two requests
in flight with R = 2; the writer keeps its resumable progress either way), each into a table of its own.

  python3 bench/seed3_pg.py --launcher build-gpu/src/flowline --tokenizer .device/model/all-MiniLM-L6-v2 \\
      --pginstall .device/pginstall.tar.xz --corpus .device/corpus --out $OUT
"""
import argparse
import json
import os
import pathlib
import pwd
import re
import shutil
import subprocess
import sys
import tarfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
SEED3_CHUNKS = 20_600_000


def start_postgres(pginstall, work):
    if pginstall.is_file():  # pgserver/pginstall and pgserver.libs (its binaries' rpath) from site-packages
        with tarfile.open(pginstall) as tar:
            tar.extractall(work, filter="tar")
        pginstall = work / "pgserver" / "pginstall"
    bin_dir = pginstall / "bin"
    env = dict(os.environ, LD_LIBRARY_PATH=f"{pginstall / 'lib'}:{os.environ.get('LD_LIBRARY_PATH', '')}")
    data, socket = work / "pgdata", work / "pgsock"
    socket.mkdir()
    user = ["-U", "postgres"]
    # initdb refuses to run as root: a root machine runs the server as `nobody`.
    as_user = []
    if os.geteuid() == 0:
        nobody = pwd.getpwnam("nobody")
        as_user = (["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups"]
                   if shutil.which("setpriv") else ["runuser", "-u", "nobody", "--"])
    if as_user:
        for path in (work, data.parent):
            os.chmod(path, 0o777)
        data.mkdir(mode=0o700)
        os.chown(data, nobody.pw_uid, nobody.pw_gid)
        os.chmod(socket, 0o777)
    subprocess.run(as_user + [str(bin_dir / "initdb"), "-D", str(data), *user, "--auth=trust", "-E", "UTF8"],
                   check=True, env=env, stdout=subprocess.DEVNULL)
    options = f"-k {socket} -c listen_addresses='' -c max_wal_size=8GB -c maintenance_work_mem=2GB"
    subprocess.run(as_user + [str(bin_dir / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(work / "pg.log"),
                              "-w", "start"], check=True, env=env, stdout=subprocess.DEVNULL)
    uri = f"postgresql://postgres@/postgres?host={socket}"

    def psql(sql):
        done = subprocess.run([str(bin_dir / "psql"), uri, "-tAc", sql], capture_output=True, text=True, env=env)
        if done.returncode != 0:
            raise SystemExit(f"psql {sql!r}: {done.stderr}")
        return done.stdout.strip()

    def stop():
        subprocess.run(as_user + [str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "fast", "stop"], env=env,
                       stdout=subprocess.DEVNULL)

    return uri, psql, stop, env


def timed(command, env):
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, command))} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return seconds, done.stdout + done.stderr


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--launcher", default=str(ROOT / "build/src/flowline"))
    parser.add_argument("--tokenizer", required=True, help="a folder with bert-base-uncased's WordPiece files "
                        "(all-MiniLM-L6-v2's: tas-b has the same vocabulary)")
    parser.add_argument("--pginstall", required=True, type=pathlib.Path)
    parser.add_argument("--corpus", default=str(ROOT.parent / "shared/data/corpus"))
    parser.add_argument("--copies", type=int, default=50)
    parser.add_argument("--dtypes", nargs="+", default=["fp16", "fp32"])
    parser.add_argument("--hnsw", action="store_true")
    parser.add_argument("--connections", type=int, default=None,
                        help="the writer's connections (db.connections; default: the flow's)")
    parser.add_argument("--writers", default=None,
                        help="writer settings to compare, RxC[,RxC...]: R replicas of C connections each")
    parser.add_argument("--work", default="/tmp/seed3-pg")
    parser.add_argument("--out", default=".")
    args = parser.parse_args()

    work = pathlib.Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    (work / "input").mkdir(parents=True)
    for i in range(args.copies):
        for book in sorted(pathlib.Path(args.corpus).glob("*.txt")):
            shutil.copy(book, work / "input" / f"{i:03d}-{book.name}")
    from models_gpu import make_checkpoint, shapes
    model = work / "models" / "msmarco-distilbert-base-tas-b"
    model.parent.mkdir()
    make_checkpoint("distilbert-tas-b", shapes()["distilbert-tas-b"], pathlib.Path(args.tokenizer), model)

    uri, psql, stop, pg_env = start_postgres(args.pginstall.resolve(), work)
    env = dict(os.environ, LD_LIBRARY_PATH=pg_env["LD_LIBRARY_PATH"])
    figures = {"postgres": psql("SELECT version()"), "runs": []}
    try:
        psql("CREATE EXTENSION IF NOT EXISTS vector")
        figures["pgvector"] = psql("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        shipped = (ROOT / "flows/index-pg.yml").read_text()
        writers = [None]  # the flow as shipped (with --connections when given)
        if args.writers:
            writers = [tuple(int(n) for n in w.split("x")) for w in args.writers.split(",")]

        def flow_of(writer):
            if writer is None:
                more = ["--set", f"db.connections={args.connections}"] if args.connections else []
                return ROOT / "flows/index-pg.yml", more
            replicas, connections = writer
            path = work / f"index-pg-{replicas}x{connections}.yml"
            path.write_text(shipped.replace("    uses: PgVectorWriter\n",
                                            f"    uses: PgVectorWriter\n    replicas: {replicas}\n"))
            return path, ["--set", f"db.connections={connections}"]
        for dtype in args.dtypes:
            alone = work / f"encoder-{dtype}.yml"
            alone.write_text(json.dumps({"jtype": "Flow", "with": {"request_size": 1024}, "executors": [{
                "name": "encoder", "uses": "SentenceEncoder", "device": "auto", "replicas": "auto",
                "with": {"model": str(model), "dtype": dtype, "batch_size": "auto"}}]}))
            seconds_alone, _ = timed([args.launcher, "run", str(alone), "--input", str(work / "input"),
                                      "--input-format", "paragraphs", "--progress", "never",
                                      "--stats-json", str(work / "alone.json")], env)
            documents = json.loads((work / "alone.json").read_text())["documents"]
            for round_, writer in enumerate(writers):
                flow, more = flow_of(writer)
                base = [args.launcher, "run", str(flow), "--input", str(work / "input"), "--input-format",
                        "paragraphs", "--progress", "never", "--set", f"encoder.model={model}", *more]
                label = "default" if writer is None else f"{writer[0]}x{writer[1]}"
                # A table of its own per run (a setting given twice must not upsert over its first table).
                table = f"passages_{dtype}" + ("" if writer is None else f"_{writer[0]}x{writer[1]}_{round_}")
                last = dtype == args.dtypes[-1] and writer == writers[-1]
                index = "hnsw" if args.hnsw and last else "none"
                seconds, log = timed(base + ["--set", f"encoder.dtype={dtype}", "--set", f"db.uri={uri}", "--set",
                                           f"db.table={table}", "--set", f"db.index={index}", "--set",
                                           "db.metric=ip", "--stats-json", str(work / "flow.json")], env)
                rows = int(psql(f"SELECT count(*) FROM {table}"))
                dims = psql(f"SELECT DISTINCT vector_dims(embedding) FROM {table}")
                run = {"dtype": dtype, "documents": documents, "encoder_alone_s": round(seconds_alone, 2),
                       "encoder_alone_docs_per_s": round(documents / seconds_alone),
                       "writer": label if writer else f"as shipped, connections {args.connections or 'default'}",
                       "into_postgres_s": round(seconds, 2), "into_postgres_docs_per_s": round(rows / seconds),
                       "rows": rows, "dimensions": dims, "index": index,
                       "table_mb": round(int(psql(f"SELECT pg_total_relation_size('{table}')")) / 2**20),
                       "seed3_hours_at_this_rate": round(SEED3_CHUNKS / (rows / seconds) / 3600, 2)}
                built = re.search(r"index \(\w+\) of \S+ built in ([0-9.]+) s", log)
                if built:  # the writer's own log line: the CREATE INDEX after loading, inside into_postgres_s
                    run["index_build_s"] = float(built.group(1))
                if rows != documents or dims != "768":
                    run["error"] = f"the table holds {rows} rows of {dims} dimensions, not {documents} of 768"
                figures["runs"].append(run)
                print(json.dumps(run), flush=True)
    finally:
        stop()
    pathlib.Path(args.out, "seed3_pg.json").write_text(json.dumps(figures, indent=1) + "\n")
    print(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
