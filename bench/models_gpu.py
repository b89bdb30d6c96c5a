"""Architectures on one GPU (issue 29's targets), one command on the GPU machine after scripts/gpu-run.sh:
for each base-size shape (all-mpnet-base-v2's MPNet, XLM-R base, ModernBERT base, Qwen3-Embedding-0.6B, and
MiniLM-L6 as the anchor), a checkpoint with random weights of the real configuration is made with transformers (real weights
of that size do not travel), then, side by side on the same GPU in fp16:
  flowline   `flowline run` of a SentenceEncoder flow (replicas and batch sizes auto, CUDA graphs where the
             architecture's attention is flash), text to embeddings on the host, corpus x COPIES;
  sentence-transformers  SentenceTransformer.encode() of the same folder in fp16, best of batch 64/128/256,
             on corpus x ST_COPIES (it is ~10x slower; its docs/s is steady well before that).
Every checkpoint carries all-MiniLM-L6-v2's WordPiece tokenizer, so both sides see the same ~70 tokens per
paragraph whatever the shape (the embedding tables have the real vocabulary sizes). Prints docs/s, the
linear layers' achieved TFLOP/s (2 x their parameters per token) and its fraction of the H100's dense
fp16 peak (989 TFLOP/s); writes models_gpu.csv to --out. With --before BUILD (an older tree built by
bench/build_before.sh) the older build's flowline run alternates with this one's on the same checkpoint.

  python3 bench/models_gpu.py --build build-gpu --model models/all-MiniLM-L6-v2 --corpus .device/corpus --out $OUT
      [--only mpnet-base,...] [--no-st] [--before /tmp/before/build --rounds 2]
"""
import csv
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from corpus import corpus  # noqa: E402
from gpu_bench import gpu_parser  # noqa: E402

PEAK_TFLOPS = 989.0
TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"]


def shapes():
    from transformers import (BertConfig, DebertaV2Config, DistilBertConfig, ModernBertConfig, MPNetConfig,
                              Qwen3Config, XLMRobertaConfig)
    return {
        "minilm-l6": BertConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                                intermediate_size=1536, max_position_embeddings=512),
        # msmarco-distilbert-base-tas-b's shape (issue 52 §2): CLS pooling, no Normalize (dot product)
        "distilbert-tas-b": DistilBertConfig(vocab_size=30522, dim=768, n_layers=6, n_heads=12, hidden_dim=3072,
                                             max_position_embeddings=512),
        # DeBERTa-v3-base's shape (issue 52 §2): disentangled attention over 256 log buckets, shared position
        # projections, no absolute positions or token types; mean pooling + Normalize as its embedding finetunes.
        # flowline runs its attention padded with the c2p/p2c bias (no packed kernel, no CUDA graphs).
        "deberta-v3-base": DebertaV2Config(vocab_size=128100, hidden_size=768, num_hidden_layers=12,
                                           num_attention_heads=12, intermediate_size=3072,
                                           max_position_embeddings=512, relative_attention=True, position_buckets=256,
                                           max_relative_positions=-1, pos_att_type="p2c|c2p", share_att_key=True,
                                           norm_rel_ebd="layer_norm", position_biased_input=False, type_vocab_size=0,
                                           layer_norm_eps=1e-7),
        "mpnet-base": MPNetConfig(vocab_size=30527, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                                  intermediate_size=3072, max_position_embeddings=514),
        "xlm-roberta-base": XLMRobertaConfig(vocab_size=250002, hidden_size=768, num_hidden_layers=12,
                                             num_attention_heads=12, intermediate_size=3072,
                                             max_position_embeddings=514, type_vocab_size=1),
        "modernbert-base": ModernBertConfig(vocab_size=50368, hidden_size=768, num_hidden_layers=22,
                                            num_attention_heads=12, intermediate_size=1152,
                                            max_position_embeddings=8192),
        # Qwen3-Embedding-0.6B's shape: a decoder (causal attention, 8 key/value heads), last-token pooling
        "qwen3-0.6b": Qwen3Config(vocab_size=151669, hidden_size=1024, num_hidden_layers=28, num_attention_heads=16,
                                  num_key_value_heads=8, head_dim=128, intermediate_size=3072,
                                  max_position_embeddings=32768, rope_theta=1000000.0, tie_word_embeddings=True),
    }


def linear_params(config):
    """Parameters of the matrix products per token (attention projections and feed-forward)."""
    h, n = config.hidden_size, config.num_hidden_layers
    i = config.hidden_dim if config.model_type == "distilbert" else config.intermediate_size
    if config.model_type == "modernbert":
        return n * (3 * h * h + h * h + 2 * i * h + i * h)  # Wqkv, Wo, Wi (GeGLU: 2I), Wo
    if config.model_type == "qwen3":
        q, kv = config.num_attention_heads * config.head_dim, config.num_key_value_heads * config.head_dim
        return n * (h * q + 2 * h * kv + q * h + 3 * h * i)  # q, k, v, o; gate, up, down
    return n * (4 * h * h + 2 * h * i)


def make_checkpoint(name, config, tokenizer_dir, folder):
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Normalize, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling
    from transformers import AutoModel
    torch.manual_seed(0)
    model = AutoModel.from_config(config)
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        for f in TOKENIZER_FILES:
            if (tokenizer_dir / f).exists():
                shutil.copy(tokenizer_dir / f, pathlib.Path(tmp) / f)
        transformer = Transformer(tmp, max_seq_length=256)
        pooling = {"qwen3": "lasttoken", "distilbert": "cls"}.get(config.model_type, "mean")
        modules = [transformer, Pooling(config.hidden_size, pooling)]
        if config.model_type != "distilbert":
            modules.append(Normalize())
        st = SentenceTransformer(modules=modules, device="cpu")
        st.save(str(folder))
    for f in TOKENIZER_FILES:  # transformers 5 saves a generic tokenizer config; keep the WordPiece files
        if (tokenizer_dir / f).exists():
            shutil.copy(tokenizer_dir / f, folder / f)


def run_flowline(build, folder, texts_file, count, replicas, batch_size):
    flow = folder.parent / f"{folder.name}.yml"
    flow.write_text(json.dumps({"jtype": "Flow", "with": {"request_size": 1024}, "executors": [{
        "name": "encoder", "uses": "SentenceEncoder", "device": "cuda", "replicas": replicas,
        "with": {"model": str(folder), "dtype": "fp16", "batch_size": batch_size}}]}))
    start = time.time()
    # No --output: the embeddings reach the host (the executor copies them down) and are not written.
    proc = subprocess.run([str(build / "src/flowline"), "run", str(flow), "--input", str(texts_file), "--progress",
                           "never"], capture_output=True, text=True)
    if proc.returncode != 0:
        print(proc.stdout[-2000:], proc.stderr[-4000:])
        return None
    line = (proc.stdout + proc.stderr).strip().splitlines()[-1]
    match = re.search(r"\(([\d.]+) docs/s", line)
    return float(match.group(1)) if match else count / (time.time() - start)


def run_sentence_transformers(folder, texts):
    import torch
    from sentence_transformers import SentenceTransformer
    model = SentenceTransformer(str(folder), device="cuda").half()
    best = (0.0, 0)
    for batch in (64, 128, 256):
        model.encode(texts[:2048], batch_size=batch)
        torch.cuda.synchronize()
        start = time.time()
        model.encode(texts, batch_size=batch)
        torch.cuda.synchronize()
        rate = len(texts) / (time.time() - start)
        best = max(best, (rate, batch))
    del model
    torch.cuda.empty_cache()
    return best


def main():
    parser = gpu_parser()
    parser.add_argument("--copies", type=int, default=50)
    parser.add_argument("--st-copies", type=int, default=5)
    parser.add_argument("--only", default="", help="comma-separated shape names")
    parser.add_argument("--no-st", action="store_true")
    parser.add_argument("--replicas", default="auto", help="the encoder's replicas (auto, or a number)")
    parser.add_argument("--batch-size", default="auto", help="the encoder's batch_size (auto, or a number)")
    parser.add_argument("--before", default="", help="an older build (bench/build_before.sh): its flowline run "
                        "on the same checkpoint, alternating with this build's, --rounds times")
    parser.add_argument("--rounds", type=int, default=1, help="flowline runs per build (the best is reported)")
    args = parser.parse_args()
    build, out_dir = pathlib.Path(args.build), pathlib.Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    paragraphs = [t for _, _, t in corpus(args.corpus)]
    work = pathlib.Path(tempfile.mkdtemp(prefix="models_gpu_"))
    texts_file = work / "texts.txt"
    lines = [p.replace("\r", " ").replace("\n", " ") for p in paragraphs]
    texts_file.write_text("\n".join(lines * args.copies) + "\n", encoding="utf-8")
    from transformers import AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    tokens = sum(len(tokenizer(t, truncation=True, max_length=256)["input_ids"]) for t in lines) / len(lines)
    rows = []
    for name, config in shapes().items():
        if args.only and name not in args.only.split(","):
            continue
        folder = work / name
        make_checkpoint(name, config, pathlib.Path(args.model), folder)
        replicas = int(args.replicas) if args.replicas.isdigit() else args.replicas
        batch = int(args.batch_size) if args.batch_size.isdigit() else args.batch_size
        count = len(lines) * args.copies
        runs, before_runs = [], []
        for r in range(args.rounds):
            if args.before:
                before_runs.append(run_flowline(pathlib.Path(args.before), folder, texts_file, count, replicas, batch) or 0)
                print(f"{name} round {r + 1}: before {before_runs[-1]:.0f} docs/s", flush=True)
            runs.append(run_flowline(build, folder, texts_file, count, replicas, batch) or 0)
            print(f"{name} round {r + 1}: flowline {runs[-1]:.0f} docs/s", flush=True)
        flowline = max(runs)
        st = (0.0, 0) if args.no_st else run_sentence_transformers(folder, lines * args.st_copies)
        tflops = (flowline or 0) * tokens * 2 * linear_params(config) / 1e12
        row = {"shape": name, "replicas": args.replicas, "batch_size": args.batch_size, "flowline_docs_s": round(flowline or 0), "st_docs_s": round(st[0]),
               "st_batch": st[1], "speedup": round((flowline or 0) / st[0], 1) if st[0] else "",
               "tokens_per_doc": round(tokens, 1), "linear_tflops": round(tflops, 1),
               "fraction_of_peak": round(tflops / PEAK_TFLOPS, 3)}
        if args.before:
            row["before_docs_s"] = round(max(before_runs))
            row["after_over_before"] = round(flowline / max(before_runs), 3) if max(before_runs) else ""
        print(json.dumps(row), flush=True)
        rows.append(row)
        shutil.rmtree(folder, ignore_errors=True)
    with open(out_dir / "models_gpu.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        writer.writeheader()
        writer.writerows(rows)


if __name__ == "__main__":
    main()
