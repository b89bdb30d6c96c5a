"""Seed 4, measured as the seed measured it (issue 52 §5): named entities of Alice in Wonderland's 881 paragraphs
with a checkpoint of bert-base-NER's shape, flowline beside transformers' token-classification pipeline in the
same run, on one GPU (--device cuda) or this machine's CPU (--device cpu).

The checkpoint: BertForTokenClassification of bert-base-NER's configuration (12 layers, hidden 768, 12 heads,
nine labels O, B-MISC, I-MISC, B-PER, I-PER, B-ORG, I-ORG, B-LOC, I-LOC) with random weights made here by
transformers, the "O" logit raised by --o-bias so that most tokens are O and entities are sparse, as a trained
tagger's are. Its tokenizer is --tokenizer's WordPiece (all-MiniLM-L6-v2's: bert-base-NER's own cased vocabulary
cannot be had here; the texts' token counts are alike), vocab_size set to it.

  flowline  `flowline profile flows/ner.yml --batch-sizes 50,300 --set tagger.model=DIR` (the seed's table: total
            time, model memory, peak batch memory, total peak, RAM, mean batch time, largest batch that fits),
            then `flowline run flows/ner.yml` at --run-batch for the entities written to entities.tsv;
  transformers  pipeline("token-classification", aggregation_strategy="simple") at batch 50 and 300, the
            model loaded once (not timed), its peak memory from torch.cuda.max_memory_allocated.
The two's entities are compared (same paragraph, word, label, start, end) at fp32.

  python3 bench/ner_seed4.py --build build-gpu --device cuda --out $OUT            # the GPU machine
  .venv-ref/bin/python bench/ner_seed4.py --build build --device cpu --paragraphs 200 --out /tmp/ner  # this machine
"""
import csv
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "bench"))
from corpus import paragraphs  # noqa: E402
from gpu_bench import gpu_parser  # noqa: E402

LABELS = ["O", "B-MISC", "I-MISC", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC"]
TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"]


def make_tagger(tokenizer_dir, folder, o_bias):
    import torch
    from transformers import BertConfig, BertForTokenClassification
    folder.mkdir(parents=True, exist_ok=True)
    for f in TOKENIZER_FILES:
        if (tokenizer_dir / f).exists():
            shutil.copy(tokenizer_dir / f, folder / f)
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    vocab = len(tokenizer["model"]["vocab"])
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["model_max_length"] = 512
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    torch.manual_seed(4)
    model = BertForTokenClassification(BertConfig(
        vocab_size=vocab, hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
        max_position_embeddings=512, id2label=dict(enumerate(LABELS)), label2id={l: i for i, l in enumerate(LABELS)}))
    with torch.no_grad():
        model.classifier.bias[0] += o_bias
    model.save_pretrained(str(folder), safe_serialization=True)
    (folder / "RANDOM_WEIGHTS").write_text("bert-base-NER's shape with random weights (bench/ner_seed4.py)\n")


def run_flowline(args, folder, alice, tmp):
    env = dict(os.environ, FLOWLINE_OUT_DIR=str(tmp / "out"))
    launcher = str(pathlib.Path(args.build) / "src/flowline")
    common = ["--set", f"tagger.model={folder}", "--set", f"tagger.device={args.device}",
              "--set", f"tagger.dtype={args.dtype}"]
    profile = [launcher, "profile", str(ROOT / "flows/ner.yml"), "--input", str(alice), "--input-format",
               "paragraphs", "--batch-sizes", args.batch_sizes, "--json", str(tmp / "profile.json")] + common
    print("$ " + " ".join(profile), flush=True)
    shown = subprocess.run(profile, env=env, capture_output=True, text=True)
    print(shown.stdout[-6000:], shown.stderr[-3000:], flush=True)
    if shown.returncode != 0:
        raise SystemExit(f"flowline profile failed ({shown.returncode})")
    run = [launcher, "run", str(ROOT / "flows/ner.yml"), "--input", str(alice), "--input-format", "paragraphs",
           "--overwrite", "--set", f"tagger.batch_size={args.run_batch}", "--stats-json", str(tmp / "stats.json")] + common
    print("$ " + " ".join(run), flush=True)
    start = time.perf_counter()
    done = subprocess.run(run, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        print(done.stdout[-3000:], done.stderr[-3000:])
        raise SystemExit(f"flowline run failed ({done.returncode})")
    stats = json.loads((tmp / "stats.json").read_text())
    print("flowline run stats (the tagger's phases: tokenize, model, post seconds):",
          json.dumps({k: stats.get(k) for k in ("replicas", "executors", "seconds", "source_seconds", "deliver_seconds")})[:4000], flush=True)
    with open(tmp / "out/entities.tsv", encoding="utf-8") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]  # the header row
    return json.loads((tmp / "profile.json").read_text()), wall, rows


def run_pipeline(args, folder, texts):
    import torch
    from transformers import pipeline
    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    gpu = args.device.startswith("cuda")
    start = time.perf_counter()
    tagger = pipeline("token-classification", model=str(folder), aggregation_strategy="simple",
                      device=0 if gpu else -1, dtype=dtype)
    load_s = time.perf_counter() - start
    model_mib = torch.cuda.memory_allocated() / 2**20 if gpu else 0.0
    results = {}
    for batch in [int(b) for b in args.batch_sizes.split(",")]:
        if gpu:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        entities = tagger(texts, batch_size=batch)
        if gpu:
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        peak = torch.cuda.max_memory_allocated() / 2**20 if gpu else 0.0
        results[batch] = {"seconds": seconds, "paragraphs_per_s": len(texts) / seconds, "peak_mib": peak,
                          "peak_batch_mib": peak - model_mib, "entities": entities}
        print(f"transformers pipeline batch {batch}: {seconds:.2f} s, {len(texts) / seconds:.0f} paragraphs/s, "
              f"peak {peak:.0f} MiB", flush=True)
    return load_s, model_mib, results


def compare(rows, texts, entities):
    """Entities of both, as (paragraph, word, label, start, end); flowline's paragraph numbers count from 0 in
    the order read."""
    ours = {(int(r[0]), r[1], r[2], int(r[3]), int(r[4])) for r in rows}
    theirs = {(i, e["word"], e["entity_group"], int(e["start"]), int(e["end"]))
              for i, found in enumerate(entities) for e in found}
    return len(ours), len(theirs), len(ours & theirs)


def main():
    parser = gpu_parser()
    parser.add_argument("--device", default="cuda", help="cuda or cpu")
    parser.add_argument("--dtype", default="fp32", choices=["fp32", "fp16", "bf16"])
    parser.add_argument("--batch-sizes", default="50,300")
    parser.add_argument("--run-batch", type=int, default=300)
    parser.add_argument("--tokenizer", default=str(ROOT / "models/all-MiniLM-L6-v2"))
    parser.add_argument("--o-bias", type=float, default=1.5)
    parser.add_argument("--tagger", default="",
                        help="keep the checkpoint in this folder (made there when it has no config.json) for runs "
                             "after this one; default: a temporary folder")
    parser.add_argument("--paragraphs", type=int, default=0,
                        help="only Alice's first N paragraphs (0: all 881), for a CPU run of bounded length")
    args = parser.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    alice = pathlib.Path(args.corpus) / "alice-in-wonderland.txt"
    texts = paragraphs(alice.read_bytes().decode("utf-8"))
    if args.paragraphs:
        texts = texts[:args.paragraphs]
    if args.device == "cpu":
        import torch
        torch.set_num_threads(os.cpu_count() or 1)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = pathlib.Path(tmp_name)
        if args.paragraphs:  # the same paragraphs for flowline, split as it splits them
            alice = tmp / "alice-part.txt"
            alice.write_text("\n\n".join(texts) + "\n", encoding="utf-8")
        folder = pathlib.Path(args.tagger) if args.tagger else tmp / "bert-base-ner-shape"
        if not (folder / "config.json").exists():
            make_tagger(pathlib.Path(args.tokenizer), folder, args.o_bias)
        profile, run_wall, rows = run_flowline(args, folder, alice, tmp)
        load_s, model_mib, pipe = run_pipeline(args, folder, texts)
    runs = [r for r in profile.get("runs", []) if r.get("ok")]
    best = max((r["docs_per_second"] for r in runs), default=0.0)
    print(f"\n{len(texts)} paragraphs of Alice, {args.device}, {args.dtype}")
    print(f"{'':<34} {'batch':>6} {'total s':>8} {'para/s':>8} {'peak MiB':>9}")
    for r in runs:
        print(f"{'flowline profile':<34} {r['batch_size']:>6} {r['total_seconds']:>8.2f} {r['docs_per_second']:>8.0f} "
              f"{r.get('total_peak_mib', r.get('peak_allocated_mib', 0)):>9.0f}")
    print(f"{'flowline run (end to end, load incl.)':<34} {args.run_batch:>6} {run_wall:>8.2f} "
          f"{len(texts) / run_wall:>8.0f}")
    for batch, r in pipe.items():
        print(f"{'transformers pipeline (load excl.)':<34} {batch:>6} {r['seconds']:>8.2f} "
              f"{r['paragraphs_per_s']:>8.0f} {r['peak_mib']:>9.0f}")
    agreement = {}
    for batch, r in pipe.items():
        ours, theirs, same = compare(rows, texts, r["entities"])
        agreement[batch] = {"flowline": ours, "pipeline": theirs, "same": same}
        print(f"entities: flowline {ours}, pipeline (batch {batch}) {theirs}, identical {same}")
    for r in pipe.values():
        del r["entities"]
    report = {"device": args.device, "dtype": args.dtype, "paragraphs": len(texts), "flowline_profile": profile,
              "flowline_run_wall_s": run_wall, "pipeline_load_s": load_s, "pipeline_model_mib": model_mib,
              "pipeline": pipe, "agreement": agreement, "best_flowline_paragraphs_per_s": best}
    (out / f"ner_seed4_{args.device}_{args.dtype}.json").write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
