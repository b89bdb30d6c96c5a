"""Reranking on one GPU (issue 29's target: >= 1,000 queries/s of 1 query x 100 candidate paragraphs through
`/rerank` with a MiniLM-L6-shaped cross-encoder), one command on the GPU machine after scripts/gpu-run.sh.

A cross-encoder with random weights of cross-encoder/ms-marco-MiniLM-L-6-v2's configuration
(BertForSequenceClassification, 6 layers, hidden 384, one label) is made with transformers and given
all-MiniLM-L6-v2's WordPiece tokenizer. Then, on the same GPU in fp16:
  flowline   `flowline serve` of a Reranker flow (fp16, --replicas, pairs per pass --batch-size, queries from
             several clients batched up to --max-batch), loaded by bench/http_load with --connections
             keep-alive connections, each posting TEI's /rerank body {"query", "texts": 100 paragraphs};
             queries/s = requests/s, pairs/s = 100 x that; p50/p99 latency;
  sentence-transformers  CrossEncoder.predict() of the same folder in fp16 over --st-queries queries x 100
             pairs, best of batch sizes 64..1024 (in process: no HTTP).
Prints a table and writes rerank_gpu.json to --out.

  python3 bench/rerank_gpu.py --build build-gpu --model models/all-MiniLM-L6-v2 --corpus .device/corpus --out $OUT
"""
import json
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "bench"))
from corpus import corpus  # noqa: E402
from gpu_bench import gpu_parser  # noqa: E402
from serve_gpu import post, start_server  # noqa: E402

TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"]


def make_cross_encoder(tokenizer_dir, folder):
    import torch
    from transformers import BertConfig, BertForSequenceClassification
    torch.manual_seed(0)
    config = BertConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                        intermediate_size=1536, max_position_embeddings=512, num_labels=1)
    BertForSequenceClassification(config).save_pretrained(folder, safe_serialization=True)
    for f in TOKENIZER_FILES:
        if (tokenizer_dir / f).exists():
            shutil.copy(tokenizer_dir / f, folder / f)


def run_flowline(args, folder, body, tmp):
    flow = tmp / "rerank.yml"
    flow.write_text(json.dumps({"jtype": "Flow", "executors": [{
        "name": "reranker", "uses": "Reranker", "device": "cuda",
        "replicas": int(args.replicas) if args.replicas.isdigit() else args.replicas,
        "batching": {"max_batch_size": args.max_batch, "max_delay_ms": args.delay_ms},
        "with": {"model": str(folder), "dtype": "fp16", "batch_size": args.batch_size}}]}))
    proc, (port,) = start_server(args, flow, tmp)  # the HTTP port (no gRPC front)
    try:
        url = f"http://127.0.0.1:{port}/rerank"
        answer = json.loads(post(url, body)[1])
        if len(answer) != args.candidates:
            raise SystemExit(f"/rerank answered {len(answer)} results, want {args.candidates}")
        body_file = tmp / "body.json"
        body_file.write_text(body)
        out_json = tmp / "load.json"
        cmd = [str(pathlib.Path(args.build) / "bench/http_load"), "--url", url, "--body-file", str(body_file),
               "--connections", str(args.connections), "--duration", str(args.duration), "--warmup", "2",
               "--docs-per-request", str(args.candidates), "--json", str(out_json)]
        print(f"==> {' '.join(cmd)}", flush=True)
        run = subprocess.run(cmd, capture_output=True, text=True)
        print(run.stdout + run.stderr, flush=True)
        if not out_json.exists():
            raise SystemExit(f"http_load wrote no figures (exit {run.returncode})")
        return json.loads(out_json.read_text())
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def run_sentence_transformers(folder, queries, candidates):
    import torch
    from sentence_transformers import CrossEncoder
    model = CrossEncoder(str(folder), device="cuda", model_kwargs={"torch_dtype": torch.float16})
    pairs = [(q, c) for q in queries for c in candidates]
    best = (0.0, 0)
    for batch in (64, 128, 256, 512, 1024):
        model.predict(pairs[:2048], batch_size=batch, show_progress_bar=False)
        torch.cuda.synchronize()
        start = time.time()
        model.predict(pairs, batch_size=batch, show_progress_bar=False)
        torch.cuda.synchronize()
        best = max(best, (len(queries) / (time.time() - start), batch))
    return best


def main():
    parser = gpu_parser()
    parser.add_argument("--candidates", type=int, default=100)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--duration", type=float, default=10)
    parser.add_argument("--replicas", default="2")
    parser.add_argument("--batch-size", type=int, default=1024, help="pairs per forward pass")
    parser.add_argument("--max-batch", type=int, default=16, help="queries batched across clients")
    parser.add_argument("--delay-ms", type=float, default=2)
    parser.add_argument("--st-queries", type=int, default=200)
    parser.add_argument("--no-st", action="store_true")
    parser.set_defaults(grpc=False, io_threads=0)  # serve_gpu.start_server's options: HTTP only, its default threads
    args = parser.parse_args()
    texts = [t for _, _, t in corpus(pathlib.Path(args.corpus))]
    query = "Who went down the rabbit hole, and what did she find at the bottom of it?"
    candidates = texts[: args.candidates]
    body = json.dumps({"query": query, "texts": candidates})
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = pathlib.Path(tmp_name)
        folder = tmp / "minilm-l6-cross-encoder"
        make_cross_encoder(pathlib.Path(args.model), folder)
        figures = run_flowline(args, folder, body, tmp)
        st = (0.0, 0) if args.no_st else run_sentence_transformers(folder, [query] * args.st_queries, candidates)
    lat = figures.get("latency_ms", {})
    qps = figures["requests_per_s"]
    print(f"\n{'who':<36} {'queries/s':>10} {'pairs/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'errors':>7}")
    print(f"{'flowline serve /rerank':<36} {qps:>10.0f} {qps * args.candidates:>10.0f} {lat.get('p50', 0):>8.2f} "
          f"{lat.get('p99', 0):>8.2f} {figures['errors']['total']:>7}")
    if not args.no_st:
        print(f"{'sentence-transformers CrossEncoder':<36} {st[0]:>10.0f} {st[0] * args.candidates:>10.0f} "
              f"{'':>8} {'':>8} {'':>7}  (in process, batch {st[1]})")
    result = {"flowline": figures, "sentence_transformers": {"queries_per_s": st[0], "batch": st[1]},
              "candidates": args.candidates, "connections": args.connections, "replicas": args.replicas,
              "batch_size": args.batch_size, "max_batch": args.max_batch}
    (out / "rerank_gpu.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
