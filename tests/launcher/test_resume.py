"""`flowline run --resume` with real processes (issue 55 §1): runs killed with SIGKILL at random moments and
resumed, five times in a row, end in files equal byte for byte to one uninterrupted run's — for --output and
for the writer executors of the shipped flows (flows/encode.yml's JsonlWriter together with a --output, and
flows/ner.yml's TsvWriter); a partial that is not this run's (a changed input, another flow, a partial without
its manifest, one cut shorter than its sync point, one whose record at the sync point is another document)
is refused and left as it was, for --output and for a writer.

    test_resume.py LAUNCHER SOURCE_DIR CASE
        CASE: jsonl | npy | safetensors | refusals | encode-flow | ner-flow | encode-replicas | jsonl-replicas |
              index-flow | pg-flow | pg-flow-N-update | pg-flow-N-error | pg-flow-N-MODE-rR (R writer replicas) |
              writer-refusals

The tiny random checkpoint tests/data/tiny-models/bert-all-poolings-dense encodes the corpus
(FLOWLINE_CORPUS_DIR, as the build found it; else ../shared/data/corpus) on the CPU. Every run is bounded (180 s:
two cases at once under ctest -j2 slow each other's runs many times over) and killed on the way out; the scratch
folder is removed whatever happens. The random kill moments come from a
seed printed first (FLOWLINE_RESUME_SEED repeats a run).
"""
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

DEADLINE = 180
KILLS = 5


class Runner:
    def __init__(self, launcher, source_dir, scratch):
        self.launcher = launcher
        self.scratch = scratch
        self.source_dir = source_dir
        model = self.model = os.path.join(source_dir, "tests/data/tiny-models/bert-all-poolings-dense")
        self.flow = os.path.join(scratch, "flow.yml")
        with open(self.flow, "w") as f:
            f.write("jtype: Flow\nexecutors:\n  - name: encoder\n    uses: SentenceEncoder\n    device: cpu\n"
                    f"    with:\n      model: {model}\n      batch_size: 32\n")
        # The whole corpus (a folder: 29,742 lines) for the kills, so that a run outlasts a few of them even on an
        # idle machine (the tiny encoder does about 8,000 lines a second); a copy of 3,000 of its lines that the
        # refusals may change.
        # FLOWLINE_CORPUS_DIR: the build's (tests/CMakeLists.txt sets it; a fresh clone's corpus is not beside it).
        corpus = os.environ.get("FLOWLINE_CORPUS_DIR") or os.path.join(source_dir, "..", "shared", "data", "corpus")
        first = os.path.join(corpus, "alice-in-wonderland.txt")
        if not os.path.isfile(first):
            raise SystemExit(f"no corpus at {corpus} (FLOWLINE_CORPUS_DIR): the kill series needs its 29,742 lines")
        self.corpus = corpus
        self.input = os.path.join(scratch, "input.txt")
        with open(first, encoding="utf-8") as f, open(self.input, "w", encoding="utf-8") as out:
            out.writelines(f.readlines()[:3000])
        self.children = []

    def args(self, output, *extra, flow=None):
        # Outputs named killed* are the kill series' (the corpus); the others the refusals' (the copy).
        source = self.corpus if os.path.basename(output).startswith("killed") else self.input
        return [self.launcher, "run", flow or self.flow, "--input", source, "--output", output,
                "--progress", "never", "--request-size", "50", "--sync-every", "400", *extra]

    def run(self, output, *extra, flow=None, deadline=DEADLINE):
        """Runs to the end; past `deadline` seconds the run's threads' stacks are printed (gdb, where there is one)
        before it is killed and subprocess.TimeoutExpired raised: a slow machine and a hang look alike otherwise."""
        child = subprocess.Popen(self.args(output, *extra, flow=flow), cwd=self.scratch, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        try:
            out, err = child.communicate(timeout=deadline)
        except subprocess.TimeoutExpired:
            try:
                if shutil.which("gdb"):
                    stacks = subprocess.run(["gdb", "-p", str(child.pid), "-batch", "-ex", "thread apply all bt"],
                                            capture_output=True, text=True, timeout=60)
                    print(f"the run passed {deadline} s; its threads:\n{stacks.stdout[-20000:]}", flush=True)
            except (OSError, subprocess.SubprocessError) as e:
                print(f"the run passed {deadline} s; no stacks ({e})", flush=True)
            child.kill()
            out, err = child.communicate()
            print(f"its stderr:\n{err[-4000:]}", flush=True)
            raise
        return subprocess.CompletedProcess(child.args, child.returncode, out, err)

    def run_and_kill(self, output, delay, *extra, argv=None, env=None, synced=None):
        """Starts a run (`argv`, else one writing `output`), waits until `output` has a sync point past the one it
        started from (`synced()`, else its manifest's), then sends SIGKILL `delay` seconds later (so every kill
        lands in a run that made progress, at a random moment of it); returns the exit code (0 when the run
        ended first)."""
        synced_documents = synced or (lambda: globals()["synced_documents"](output))
        start = max(synced_documents(), 0)
        child = subprocess.Popen(argv or self.args(output, *extra), cwd=self.scratch, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, env=env)
        self.children.append(child)
        deadline = time.monotonic() + DEADLINE
        while child.poll() is None and synced_documents() <= start:
            check(time.monotonic() < deadline, "a run made no progress within the deadline")
            time.sleep(0.01)
        try:
            child.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            child.kill()
        return child.wait(timeout=DEADLINE)

    def close(self):
        for child in self.children:
            if child.poll() is None:
                child.kill()
                child.wait()


def synced_documents(output):
    try:
        return json.loads(read(output + ".resume.json"))["synced"]["documents"]
    except (OSError, ValueError, KeyError):
        return -1  # none yet, or being replaced this moment


def files_of(output):
    """The output and, for a binary format, its sidecar of ids, texts and tags."""
    stem, extension = os.path.splitext(output)
    return [output] if extension == ".jsonl" else [output, stem + ".docs.jsonl"]


def read(path):
    with open(path, "rb") as f:
        return f.read()


def check(condition, message):
    if not condition:
        raise AssertionError(message)


def a_run_killed_five_times_and_resumed_equals_an_uninterrupted_run(r, rng, extension):
    reference = os.path.join(r.scratch, "killed-reference" + extension)
    done = r.run(reference)
    check(done.returncode == 0, f"the uninterrupted run failed: {done.stderr}")
    output = os.path.join(r.scratch, "killed" + extension)
    partial = output + ".partial"
    kills = 0
    for attempt in range(KILLS):
        code = r.run_and_kill(output, rng.uniform(0.0, 0.3), *(["--resume"] if attempt else []))
        if code == 0:
            break  # it finished before the kill: the output is complete
        kills += 1
        check(code == -9, f"a killed run exited {code}")
        if os.path.exists(partial + "") and os.path.exists(output + ".resume.json"):
            synced = json.loads(read(output + ".resume.json"))["synced"]["documents"]
            print(f"kill {kills}: {synced} documents synced, partial of {os.path.getsize(partial)} bytes")
    # A run that ends before its kill (near the end of the input) ends the series early; most must be killed.
    check(kills >= 3, f"only {kills} of the runs were killed before they ended")
    # The last --resume encodes most of the corpus, syncing every 400 documents: on a loaded two-core machine, with
    # a build writing beside it, that once took past 180 s (CI, session 35), so it gets twice the deadline.
    final = r.run(output, "--resume", "--stats-json", os.path.join(r.scratch, "stats.json"), deadline=2 * DEADLINE)
    check(final.returncode == 0, f"the last --resume failed ({final.returncode}): {final.stderr}")
    for want, got in zip(files_of(reference), files_of(output)):
        check(read(want) == read(got), f"'{got}' differs from the uninterrupted run's '{want}'")
    check(not os.path.exists(output + ".resume.json"), "the manifest stayed beside a complete output")
    if "nothing to resume" in final.stderr:  # a run ended before its kill: the last --resume had nothing to do
        print(f"{extension}: {kills} kills, then equal to the uninterrupted run byte for byte")
        return
    resume = json.loads(read(os.path.join(r.scratch, "stats.json")))["resume"]
    documents = read(files_of(reference)[-1]).count(b"\n")
    check(resume["skipped_documents"] + resume["left_documents"] == documents,
          f"skipped + left is not the input's {documents} documents: {resume}")
    print(f"{extension}: {kills} kills, then equal to the uninterrupted run byte for byte ({resume})")


def expect_refusal(r, output, words, *extra, flow=None):
    partial = output + ".partial"
    before = read(partial) if os.path.exists(partial) else None
    done = r.run(output, "--resume", *extra, flow=flow)
    check(done.returncode == 2, f"--resume was not refused (exit {done.returncode}): {done.stderr}")
    check(words in done.stderr, f"the refusal does not say '{words}': {done.stderr}")
    after = read(partial) if os.path.exists(partial) else None
    check(before == after, "a refused --resume changed the partial")
    print(f"refused: {done.stderr.strip().splitlines()[-1]}")


def leave_partial(r, output):
    """A run killed once its output holds a sync point."""
    child = subprocess.Popen(r.args(output), cwd=r.scratch, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    r.children.append(child)
    manifest = output + ".resume.json"
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline and child.poll() is None:
        if os.path.exists(manifest) and json.loads(read(manifest))["synced"]["documents"] > 0:
            break
        time.sleep(0.02)
    child.kill()
    child.wait()
    check(os.path.exists(output + ".partial"), "the killed run left no partial")


def a_partial_that_is_not_this_runs_is_refused(r):
    output = os.path.join(r.scratch, "out.jsonl")
    leave_partial(r, output)
    expect_refusal(r, output, "another flow file", flow=shutil.copy(r.flow, os.path.join(r.scratch, "other.yml")))
    expect_refusal(r, output, "a changed flow", "--set", "encoder.batch_size=16")
    original = read(r.input)
    with open(r.input, "ab") as f:
        f.write(b"one more line\n")
    expect_refusal(r, output, "a changed input")
    with open(r.input, "wb") as f:
        f.write(original)
    # The record at the sync point names another document (a partial copied from elsewhere).
    synced = json.loads(read(output + ".resume.json"))["synced"]
    text = read(output + ".partial")
    last_id = synced["last_id"].encode()
    at = text.rindex(last_id, 0, synced["bytes"])
    with open(output + ".partial", "r+b") as f:
        f.seek(at)
        f.write(b"f" * len(last_id))
    expect_refusal(r, output, "not this run's partial")
    with open(output + ".partial", "r+b") as f:
        f.seek(at)
        f.write(last_id)
    os.truncate(output + ".partial", synced["bytes"] - 1)
    expect_refusal(r, output, "fewer than the")
    os.remove(output + ".resume.json")
    expect_refusal(r, output, "not the partial of a run that can be resumed")
    # A complete output: nothing to resume, and it stays as it is — unless the input is another one now (it grew):
    # that is refused, naming both inputs, rather than leaving the new documents out in silence.
    for name in ("complete.jsonl", "complete.npy"):
        complete = os.path.join(r.scratch, name)
        check(r.run(complete).returncode == 0, "a run failed")
        written = [read(f) for f in files_of(complete)]
        again = r.run(complete, "--resume")
        check(again.returncode == 0 and "nothing to resume" in again.stderr, f"--resume of a complete output: {again}")
        with open(r.input, "ab") as f:
            f.write(b"one more line\n")
        grown = r.run(complete, "--resume")
        check(grown.returncode == 2 and "is complete, but of another input" in grown.stderr,
              f"--resume of a complete output of another input was not refused: {grown}")
        check([read(f) for f in files_of(complete)] == written, "a refused --resume changed a complete output")
        print(f"refused: {grown.stderr.strip().splitlines()[-1]}")
        with open(r.input, "wb") as f:
            f.write(original)


class FlowCase:
    """A shipped flow whose writer executor writes `name` into FLOWLINE_OUT_DIR, run over the corpus on the CPU."""

    def __init__(self, r, flow, name, *extra):
        self.r, self.flow, self.name, self.extra = r, os.path.join(r.source_dir, "flows", flow), name, extra

    def env(self, out_dir):
        return dict(os.environ, FLOWLINE_OUT_DIR=out_dir)

    def argv(self, out_dir, *more):
        return [self.r.launcher, "run", self.flow, "--input", self.r.corpus, "--progress", "never", "--request-size",
                "50", "--sync-every", "400", *self.extra, *more]

    def run(self, out_dir, *more):
        return subprocess.run(self.argv(out_dir, *more), cwd=self.r.scratch, capture_output=True, text=True,
                              timeout=DEADLINE, env=self.env(out_dir))


class JsonlInputCase(FlowCase):
    """A FlowCase fed a jsonl input: the corpus's lines as documents with ids of their own (not in sorted order),
    so the sinks learn the input positions from the run's position board, not from the ids."""

    def __init__(self, r, flow, name, *extra):
        super().__init__(r, flow, name, *extra)
        self.documents, self.ids = os.path.join(r.scratch, "corpus.jsonl"), []
        with open(self.documents, "w", encoding="utf-8") as out:
            for book in sorted(os.listdir(r.corpus)):
                with open(os.path.join(r.corpus, book), encoding="utf-8") as f:
                    for line in f:
                        if line.strip():
                            self.ids.append(f"{len(self.ids) * 2654435761 % 2 ** 32:08x}-{len(self.ids)}")
                            out.write(json.dumps({"id": self.ids[-1], "text": line.rstrip("\n")}) + "\n")

    def argv(self, out_dir, *more):
        argv = super().argv(out_dir, *more)
        argv[argv.index("--input") + 1] = self.documents
        return argv


def a_flow_killed_five_times_and_resumed_equals_an_uninterrupted_run(r, rng, case, output_extension=None):
    """The writer's file (and --output's, when `output_extension`) after five kills and resumes equals an
    uninterrupted run's byte for byte; the last resume's stats count what was skipped and left."""
    reference_dir, killed_dir = os.path.join(r.scratch, "reference"), os.path.join(r.scratch, "killed")
    outputs = lambda d: [os.path.join(d, case.name)] + (
        [os.path.join(d, "out" + output_extension)] if output_extension else [])
    with_output = lambda d: ["--output", outputs(d)[1]] if output_extension else []
    reference_stats = os.path.join(r.scratch, "reference-stats.json")
    done = case.run(reference_dir, *with_output(reference_dir), "--stats-json", reference_stats)
    check(done.returncode == 0, f"the uninterrupted run failed: {done.stderr}")
    reference_figures = json.loads(read(reference_stats))
    documents = reference_figures["documents"]
    # Kills land up to 0.3 s after a run's first sync, or sooner for a flow whose whole run takes little more
    # (flows/ner.yml's tiny tagger posts the corpus in ~0.4 s: with 0.3 s, the runs ended before their kills).
    longest_delay = min(0.3, reference_figures["seconds"] / 8)
    writer = outputs(killed_dir)[0]
    kills = 0
    for attempt in range(KILLS):
        extra = with_output(killed_dir) + (["--resume"] if attempt else [])
        code = r.run_and_kill(writer, rng.uniform(0.0, longest_delay), argv=case.argv(killed_dir, *extra),
                              env=case.env(killed_dir))
        if code == 0:
            break
        kills += 1
        check(code == -9, f"a killed run exited {code}")
        held = [synced_documents(f) for f in outputs(killed_dir)]
        print(f"kill {kills}: synced documents {held}, partial of {os.path.getsize(writer + '.partial')} bytes")
    check(kills >= 3, f"only {kills} of the runs were killed before they ended")
    stats = os.path.join(r.scratch, "stats.json")
    final = case.run(killed_dir, *with_output(killed_dir), "--resume", "--stats-json", stats)
    check(final.returncode == 0, f"the last --resume failed ({final.returncode}): {final.stderr}")
    for want, got in zip(outputs(reference_dir), outputs(killed_dir)):
        check(read(want) == read(got), f"'{got}' differs from the uninterrupted run's '{want}'")
        check(not os.path.exists(got + ".resume.json"), f"the manifest stayed beside the complete '{got}'")
        check(not os.path.exists(got + ".partial"), f"'{got}.partial' stayed beside the complete file")
    if "nothing to resume" in final.stderr:
        print(f"{case.name}: {kills} kills, then equal to the uninterrupted run byte for byte")
        return
    final_stats = json.loads(read(stats))
    resume = final_stats["resume"]
    check(resume["skipped_documents"] == min(resume["held"].values()), f"skipped is not the smallest held: {resume}")
    check(resume["skipped_documents"] + resume["left_documents"] == documents,
          f"skipped + left is not the input's {documents} documents: {resume}")
    check(final_stats["documents"] == resume["left_documents"], f"the run posted other than what was left: {resume}")
    print(f"{case.name}: {kills} kills, then equal to the uninterrupted run byte for byte ({resume})")


def an_index_killed_five_times_and_resumed_answers_as_an_uninterrupted_one(r, rng):
    """flows/index.yml into a VectorIndex workspace: after five kills and resumes the index holds the documents an
    uninterrupted run's holds and answers every query alike (flows/search.yml over both workspaces, byte-equal);
    the last resume skipped what the workspace held (re-read, not re-encoded)."""
    model = ["--set", f"encoder.model={r.model}"]

    def argv(flow, *more):
        return [r.launcher, "run", os.path.join(r.source_dir, "flows", flow), "--progress", "never", *model, *more]

    def run(workspace, flow, *more):
        done = subprocess.run(argv(flow, *more), cwd=r.scratch, capture_output=True, text=True, timeout=DEADLINE,
                              env=dict(os.environ, FLOWLINE_WORKSPACE=workspace))
        check(done.returncode == 0, f"{flow} {more} failed ({done.returncode}): {done.stderr}")
        return done

    indexing = ["--input", r.corpus, "--request-size", "50", "--sync-every", "400"]
    reference, killed = os.path.join(r.scratch, "ws-reference"), os.path.join(r.scratch, "ws-killed")
    run(reference, "index.yml", *indexing)
    progress = os.path.join(killed, "index", "run")
    kills = 0
    for attempt in range(KILLS):
        code = r.run_and_kill(progress, rng.uniform(0.0, 0.3),
                              argv=argv("index.yml", *indexing, *(["--resume"] if attempt else [])),
                              env=dict(os.environ, FLOWLINE_WORKSPACE=killed))
        if code == 0:
            break
        kills += 1
        check(code == -9, f"a killed run exited {code}")
        print(f"kill {kills}: the workspace holds {synced_documents(progress)} input documents by its progress")
    check(kills >= 3, f"only {kills} of the runs were killed before they ended")
    stats = os.path.join(r.scratch, "index-stats.json")
    run(killed, "index.yml", *indexing, "--resume", "--stats-json", stats)
    resume = json.loads(read(stats))["resume"]
    check(resume["skipped_documents"] > 0 and resume["skipped_documents"] == resume["held"]["index"],
          f"the last resume did not skip what the workspace held: {resume}")
    total = resume["skipped_documents"] + resume["left_documents"]
    check(synced_documents(progress) == total,
          f"the completed run's progress does not name its {total} input documents: {synced_documents(progress)}")
    queries = os.path.join(r.scratch, "queries.txt")
    with open(r.input, encoding="utf-8") as f, open(queries, "w", encoding="utf-8") as out:
        out.writelines(line for line in f.readlines()[:400:20] if line.strip())
    answers = []
    for workspace in (reference, killed):
        output = os.path.join(r.scratch, os.path.basename(workspace) + "-answers.jsonl")
        # /search (the flow's default endpoint reaches no index), every query in one request: queries posted one by
        # one meet the encoder's dynamic batching, whose batches differ from run to run and so do the last bits of
        # a query's embedding (the CI saw it); the tiny random checkpoint's vectors all lie within 1e-6 of one
        # another, so such bits reorder the matches.
        run(workspace, "search.yml", "--input", queries, "--endpoint", "/search", "--request-size", "1000",
            "--output", output)
        status = os.path.join(r.scratch, os.path.basename(workspace) + "-status.jsonl")
        run(workspace, "search.yml", "--input", queries, "--endpoint", "/status", "--output", status)
        answered = read(output)
        check(answered.count(b'"matches":[{') == len(answered.splitlines()) > 0, f"a query without matches: {output}")
        answers.append((answered, json.loads(read(status).splitlines()[0])["tags"]["count"]))
    check(answers[0][1] == answers[1][1], f"the indexes hold {answers[0][1]} and {answers[1][1]} documents")
    # The searches left the index run's progress as it was, and a --resume of the completed run (a job restarted
    # after its end) skips the whole input and exits 0.
    check(synced_documents(progress) == total, f"searching the workspace changed its progress: {read(progress + '.resume.json')}")
    for _ in range(2):  # twice: the first posts nothing and must leave the progress as it found it
        run(killed, "index.yml", *indexing, "--resume", "--stats-json", stats)
        again = json.loads(read(stats))["resume"]
        check(again["skipped_documents"] == total and again["left_documents"] == 0,
              f"a --resume of the completed run did not skip everything: {again}")
    if answers[0][0] != answers[1][0]:
        pairs = zip(answers[0][0].splitlines(), answers[1][0].splitlines())
        want, got = next(((want, got) for want, got in pairs if want != got), (b"(shorter)", b"(longer)"))
        at = next((i for i, (a, b) in enumerate(zip(want, got)) if a != b), min(len(want), len(got)))
        check(False, "the resumed index answers the queries otherwise than the uninterrupted one; first difference:"
              f"\n  uninterrupted: ...{want[max(0, at - 600):at + 300]}\n  resumed:       ...{got[max(0, at - 600):at + 300]}")
    print(f"index: {kills} kills, {answers[1][1]} documents, answers equal to the uninterrupted run's ({resume})")


class PgServer:
    """A PostgreSQL server with pgvector on a Unix socket (tests/pgvector/pg_server.py, PyPI's pgserver)."""

    def __init__(self, r):
        self.python = os.environ.get("FLOWLINE_TEST_PYTHON") or os.path.join(r.source_dir, ".venv", "bin", "python")
        self.script = os.path.join(r.source_dir, "tests", "pgvector", "pg_server.py")
        done = subprocess.run([self.python, self.script, "start"], capture_output=True, text=True, timeout=90)
        if done.returncode == 77:
            print(f"skipped: {done.stderr.strip()}")
            raise SystemExit(77)
        check(done.returncode == 0, f"the PostgreSQL server did not start: {done.stderr}")
        started = json.loads(done.stdout)
        self.folder, self.psql = started["socket_dir"], os.path.join(started["bin"], "psql")
        self.uri = f"postgresql://postgres@/postgres?host={self.folder}"

    def rows(self, sql):
        done = subprocess.run([self.psql, "-h", self.folder, "-U", "postgres", "-d", "postgres", "-At", "-c", sql],
                              capture_output=True, text=True, timeout=DEADLINE)
        check(done.returncode == 0, f"psql {sql}: {done.stderr}")
        return done.stdout.splitlines()

    def stop(self):
        subprocess.run([self.python, self.script, "stop", self.folder], capture_output=True, timeout=90)


def a_table_killed_five_times_and_resumed_equals_an_uninterrupted_runs(r, rng, connections=1, on_conflict="update",
                                                                       replicas=1):
    """flows/index-pg.yml into PostgreSQL: after five kills and resumes the table's rows equal an uninterrupted
    run's table row for row (ids, texts, tags, embeddings), and the last resume skipped what flowline_progress
    said had committed. `connections`: the writer's (each request split between them, a transaction each: a kill
    between their COMMITs leaves a request committed in part, which --resume repairs); `on_conflict`: update
    (upsert) or error (plain COPY); `replicas`: the writer's (they commit requests in any order, and their
    progress rows name the ranges committed past the input prefix, which --resume skips)."""
    flow = os.path.join(r.source_dir, "flows", "index-pg.yml")
    if replicas > 1:
        with open(flow, encoding="utf-8") as f:
            text = f.read()
        check("    uses: PgVectorWriter\n" in text, "flows/index-pg.yml has no PgVectorWriter line to give replicas")
        flow = os.path.join(r.scratch, "index-pg-replicas.yml")
        with open(flow, "w", encoding="utf-8") as f:
            f.write(text.replace("    uses: PgVectorWriter\n", f"    uses: PgVectorWriter\n    replicas: {replicas}\n"))
    pg = PgServer(r)
    # The corpus's first 30,000 lines (its files in order): rows go in at the encoder's pace, and a shorter
    # input keeps the two whole runs short. Not shorter: on a quiet 2-core machine 10,000 lines went in so fast
    # that a resumed run ended before its kill (7,300 committed at the first kill, the second run then finished
    # within the kill's delay: "only 1 of the runs were killed").
    source = os.path.join(r.scratch, "pg-input.txt")
    with open(source, "w", encoding="utf-8") as out:
        lines = []
        for name in sorted(os.listdir(r.corpus)):
            with open(os.path.join(r.corpus, name), encoding="utf-8") as f:
                lines.extend(f.readlines()[:30000 - len(lines)])
        out.writelines(lines)
    try:
        def argv(table, *more):
            return [r.launcher, "run", flow, "--progress", "never",
                    "--input", source, "--request-size", "50", "--set", f"encoder.model={r.model}", "--set",
                    f"db.uri={pg.uri}", "--set", f"db.table={table}", "--set", "db.index=none", "--set",
                    f"db.connections={connections}", "--set", f"db.on_conflict={on_conflict}", *more]

        def committed():
            time.sleep(0.05)
            rows = pg.rows("SELECT coalesce(max(documents), -1) FROM flowline_progress WHERE "
                           "split_part(sink, '#', 1) = 'killed'") \
                if pg.rows("SELECT to_regclass('flowline_progress') IS NOT NULL")[0] == "t" else ["-1"]
            return int(rows[0])

        stats = os.path.join(r.scratch, "pg-stats.json")
        done = subprocess.run(argv("reference", "--stats-json", stats), capture_output=True, text=True,
                              timeout=DEADLINE, cwd=r.scratch)
        check(done.returncode == 0, f"the uninterrupted run failed: {done.stderr}")
        documents = json.loads(read(stats))["documents"]
        kills = 0
        for attempt in range(KILLS):
            # A shorter delay than the files' cases: committed() polls through psql, so progress is seen late.
            code = r.run_and_kill(None, rng.uniform(0.0, 0.15), argv=argv("killed", *(["--resume"] if attempt else [])),
                                  synced=committed)
            if code == 0:
                break
            kills += 1
            check(code == -9, f"a killed run exited {code}")
            past = "" if replicas == 1 else ", ranges past them: " + pg.rows(
                "SELECT string_agg(sink || ' ' || ranges::text, '; ' ORDER BY sink) FROM flowline_progress WHERE "
                "split_part(sink, '#', 1) = 'killed'")[0]
            print(f"kill {kills}: {committed()} input documents committed{past}")
        check(kills >= 3, f"only {kills} of the runs were killed before they ended")
        # Another run's progress row (a changed --set) is refused, the table left as it was.
        before = pg.rows("SELECT count(*) FROM killed")
        done = subprocess.run(argv("killed", "--resume", "--set", "encoder.batch_size=16"), capture_output=True,
                              text=True, timeout=DEADLINE, cwd=r.scratch)
        check(done.returncode != 0 and "filled by another run" in done.stderr,
              f"another run's progress was not refused ({done.returncode}): {done.stderr}")
        check(pg.rows("SELECT count(*) FROM killed") == before, "a refused --resume changed the table")
        done = subprocess.run(argv("killed", "--resume", "--stats-json", stats), capture_output=True, text=True,
                              timeout=DEADLINE, cwd=r.scratch)
        check(done.returncode == 0, f"the last --resume failed ({done.returncode}): {done.stderr}")
        resume = json.loads(read(stats))["resume"]
        check(resume["skipped_documents"] > 0 and resume["skipped_documents"] + resume["left_documents"] == documents,
              f"the last resume skipped nothing, or skipped + left is not {documents}: {resume}")
        dump = "SELECT id, text, tags::text, embedding::text FROM {} ORDER BY id"
        want, got = pg.rows(dump.format("reference")), pg.rows(dump.format("killed"))
        check(len(want) == documents, f"the reference table holds {len(want)} rows, the input {documents} documents")
        check(want == got, f"the resumed table differs from the uninterrupted run's ({len(got)} rows, {len(want)})")
        check(pg.rows("SELECT string_agg(sink || ' ' || documents || ' ' || complete, '; ') FROM flowline_progress "
                      "WHERE split_part(sink, '#', 1) = 'killed'") == [f"killed {documents} true"],
              "the completed run's progress rows are not one row saying it completed")
        # A --resume of the completed run (a job restarted after its end) writes nothing and exits 0, as for a
        # complete file: with on_conflict: error, writing again would fail on every row. Twice: the first such
        # resume posts nothing, and must leave the row saying the run completed as it found it.
        for _ in range(2):
            done = subprocess.run(argv("killed", "--resume", "--stats-json", stats), capture_output=True, text=True,
                                  timeout=DEADLINE, cwd=r.scratch)
            check(done.returncode == 0, f"a --resume of the completed run failed ({done.returncode}): {done.stderr}")
            again = json.loads(read(stats))
            check(again["resume"]["skipped_documents"] == documents and again["resume"]["left_documents"] == 0,
                  f"a --resume of the completed run did not skip everything: {again['resume']}")
            check(pg.rows(dump.format("killed")) == want, "a --resume of the completed run changed the table")
        done = subprocess.run(argv("killed", "--resume", "--set", "encoder.batch_size=16"), capture_output=True,
                              text=True, timeout=DEADLINE, cwd=r.scratch)
        check(done.returncode != 0 and "filled by another run" in done.stderr,
              f"another run's --resume of the completed table was not refused ({done.returncode}): {done.stderr}")
        print(f"pg, {replicas} replica(s) of {connections} connection(s), on_conflict {on_conflict}: {kills} kills, "
              f"then {len(got)} rows equal "
              f"to the uninterrupted run's ({resume})")
    finally:
        pg.stop()


def a_writers_partial_that_is_not_this_runs_is_refused(r):
    case = FlowCase(r, "encode.yml", "embeddings.jsonl", "--set", f"encoder.model={r.model}")
    out_dir = os.path.join(r.scratch, "writer")
    writer = os.path.join(out_dir, case.name)
    r.run_and_kill(writer, 0.0, argv=case.argv(out_dir), env=case.env(out_dir))
    check(os.path.exists(writer + ".partial"), "the killed run left no partial")

    def refused(words, *more):
        before = read(writer + ".partial")
        done = case.run(out_dir, "--resume", *more)
        check(done.returncode == 2, f"--resume was not refused (exit {done.returncode}): {done.stderr}")
        check(words in done.stderr, f"the refusal does not say '{words}': {done.stderr}")
        check(read(writer + ".partial") == before, "a refused --resume changed the writer's partial")
        print(f"refused: {done.stderr.strip().splitlines()[-1]}")

    refused("left by another run", "--set", "encoder.batch_size=16")
    synced = json.loads(read(writer + ".resume.json"))["synced"]
    os.truncate(writer + ".partial", synced["bytes"] - 1)
    refused("fewer than the")
    os.remove(writer + ".resume.json")
    refused("not the partial of a run that can be resumed")


def main():
    launcher, source_dir, case = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]), sys.argv[3]
    seed = int(os.environ.get("FLOWLINE_RESUME_SEED", random.randrange(1 << 30)))
    print(f"seed {seed}")
    rng = random.Random(seed)
    scratch = tempfile.mkdtemp(prefix="flowline-resume-")
    r = Runner(launcher, source_dir, scratch)
    try:
        if case == "refusals":
            a_partial_that_is_not_this_runs_is_refused(r)
        elif case == "encode-flow":
            # The writer syncs at other points than --output: the run resumes from the smaller of the two.
            flow = FlowCase(r, "encode.yml", "embeddings.jsonl", "--set", f"encoder.model={r.model}", "--set",
                            "writer.sync_every=300")
            a_flow_killed_five_times_and_resumed_equals_an_uninterrupted_run(r, rng, flow, ".jsonl")
        elif case == "encode-replicas":
            # Two encoder replicas finish requests in any order: the writer puts them back in input order.
            flow = os.path.join(scratch, "encode-replicas.yml")
            with open(os.path.join(source_dir, "flows", "encode.yml")) as f, open(flow, "w") as out:
                text = f.read().replace("replicas: auto", "replicas: 2")
                out.write(text.replace("${{ ENV.FLOWLINE_MODEL_DIR:-../models }}/all-MiniLM-L6-v2", r.model))
            flow = FlowCase(r, flow, "embeddings.jsonl", "--set", f"encoder.model={r.model}")
            a_flow_killed_five_times_and_resumed_equals_an_uninterrupted_run(r, rng, flow)
            ids = [json.loads(line)["id"] for line in read(os.path.join(scratch, "reference", flow.name)).splitlines()]
            positions = [int(i[16:], 16) for i in ids]
            check(positions == list(range(len(ids))), "the writer's file is not in input order")
        elif case == "jsonl-replicas":
            # A jsonl input (its own ids) through two encoder replicas into the JsonlWriter: the writer puts the
            # documents back in input order by the positions the run posts for them; --output too.
            flow = os.path.join(scratch, "jsonl-replicas.yml")
            with open(os.path.join(source_dir, "flows", "encode.yml")) as f, open(flow, "w") as out:
                text = f.read().replace("replicas: auto", "replicas: 2")
                out.write(text.replace("${{ ENV.FLOWLINE_MODEL_DIR:-../models }}/all-MiniLM-L6-v2", r.model))
            flow = JsonlInputCase(r, flow, "embeddings.jsonl", "--set", f"encoder.model={r.model}")
            a_flow_killed_five_times_and_resumed_equals_an_uninterrupted_run(r, rng, flow, ".jsonl")
            ids = [json.loads(line)["id"] for line in read(os.path.join(scratch, "reference", flow.name)).splitlines()]
            check(ids == flow.ids, "the writer's file is not the input's documents in input order")
        elif case == "ner-flow":
            flow = FlowCase(r, "ner.yml", "entities.tsv", "--input-format", "paragraphs")
            a_flow_killed_five_times_and_resumed_equals_an_uninterrupted_run(r, rng, flow)
        elif case == "pg-flow":
            a_table_killed_five_times_and_resumed_equals_an_uninterrupted_runs(r, rng)
        elif case.startswith("pg-flow-"):  # pg-flow-CONNECTIONS-ON_CONFLICT[-rREPLICAS], e.g. pg-flow-2-error-r2
            _, _, connections, on_conflict, *replicas = case.split("-")
            a_table_killed_five_times_and_resumed_equals_an_uninterrupted_runs(
                r, rng, int(connections), on_conflict, int(replicas[0][1:]) if replicas else 1)
        elif case == "index-flow":
            an_index_killed_five_times_and_resumed_answers_as_an_uninterrupted_one(r, rng)
        elif case == "writer-refusals":
            a_writers_partial_that_is_not_this_runs_is_refused(r)
        else:
            a_run_killed_five_times_and_resumed_equals_an_uninterrupted_run(r, rng, "." + case)
    finally:
        r.close()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
