#!/usr/bin/env python3
"""flowline's hnsw backend beside hnswlib's own Python bindings and FAISS's IndexHNSWFlat, on the same vectors
with the same parameters, in one run (docs/benchmarks.md, "Index and search").

    .venv-ref/bin/python bench/index_peers.py --count 1000000 [--dim 384] [--queries 1000] [--ef 64,128,256]

1. build/bench/vector_index_bench generates the vectors and queries (its stated generator: 1,000 centres on
   the unit sphere, Gaussian noise of norm ~0.5), writes them with the exact fp32 top-10 (the truth) to
   --work, and measures flowline: build time, queries/s and recall@10 for each ef, through a real Flow
   (/search requests of --batch queries).
2. hnswlib (pip hnswlib) and FAISS (pip faiss-cpu) build the same graph (cosine as inner product over
   normalised vectors, M 16, ef_construction 200, all cores) and search the same queries in batches of
   --batch with the same ef values; recall@10 against the same truth.
Each prints one line per ef. Needs a build (build/bench/vector_index_bench) and numpy, hnswlib, faiss-cpu.
"""
import argparse
import os
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def recall(found, truth, k):
    hits = sum(len(set(f[:k]) & set(t[:k])) for f, t in zip(found, truth))
    return hits / (len(truth) * k)


def timed(search, queries, batch, repeats):
    rates, found = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        parts = [search(queries[i:i + batch]) for i in range(0, len(queries), batch)]
        rates.append(len(queries) / (time.perf_counter() - started))
        found = np.concatenate(parts)
    rates.sort()
    return rates[len(rates) // 2], found


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--count', type=int, default=1000000)
    p.add_argument('--dim', type=int, default=384)
    p.add_argument('--queries', type=int, default=1000)
    p.add_argument('--batch', type=int, default=1000)
    p.add_argument('--ef', default='64,128,256')
    p.add_argument('--m', type=int, default=16)
    p.add_argument('--ef-construction', type=int, default=200)
    p.add_argument('--repeats', type=int, default=3)
    p.add_argument('--work', default='/tmp/flowline-index-peers')
    p.add_argument('--bench', default=os.path.join(ROOT, 'build/bench/vector_index_bench'))
    args = p.parse_args()
    efs = [int(e) for e in args.ef.split(',')]
    threads = os.cpu_count()
    print(f'# {args.count} vectors x {args.dim}, {args.queries} queries in batches of {args.batch}, top-10, '
          f'M {args.m}, ef_construction {args.ef_construction}, {threads} threads', flush=True)

    # 1. flowline (writes the vectors, queries and truth the peers use)
    cmd = [args.bench, '--mode', 'search', '--backend', 'hnsw', '--count', str(args.count), '--dim', str(args.dim),
           '--queries', str(args.queries), '--batch', str(args.batch), '--ef', args.ef, '--m', str(args.m),
           '--ef-construction', str(args.ef_construction), '--repeats', str(args.repeats), '--save', args.work]
    out = subprocess.run(cmd, capture_output=True, text=True)
    for line in out.stdout.splitlines():
        print(f'flowline: {line}', flush=True)
    if out.returncode != 0:
        sys.exit(f'vector_index_bench failed: {out.stderr[-2000:]}')
    vectors = np.fromfile(os.path.join(args.work, 'vectors.f32'), dtype=np.float32).reshape(-1, args.dim)
    queries = np.fromfile(os.path.join(args.work, 'queries.f32'), dtype=np.float32).reshape(-1, args.dim)
    truth = np.fromfile(os.path.join(args.work, 'truth.i64'), dtype=np.int64).reshape(len(queries), -1)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)

    # 2. hnswlib
    import hnswlib
    index = hnswlib.Index(space='ip', dim=args.dim)
    index.init_index(max_elements=len(vectors), ef_construction=args.ef_construction, M=args.m)
    index.set_num_threads(threads)
    started = time.perf_counter()
    index.add_items(vectors, np.arange(len(vectors)))
    built = time.perf_counter() - started
    print(f'hnswlib {hnswlib.__version__ if hasattr(hnswlib, "__version__") else ""}: built in {built:.1f} s '
          f'({len(vectors) / built:.0f} vectors/s)', flush=True)
    for ef in efs:
        index.set_ef(ef)
        rate, found = timed(lambda q: index.knn_query(q, k=10, num_threads=threads)[0], queries, args.batch,
                            args.repeats)
        print(f'hnswlib: ef {ef}: {rate:.0f} queries/s, recall@10 {recall(found, truth, 10):.4f}', flush=True)
    del index

    # 3. FAISS
    import faiss
    faiss.omp_set_num_threads(threads)
    index = faiss.IndexHNSWFlat(args.dim, args.m, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = args.ef_construction
    started = time.perf_counter()
    index.add(vectors)
    built = time.perf_counter() - started
    print(f'faiss {faiss.__version__}: built in {built:.1f} s ({len(vectors) / built:.0f} vectors/s)', flush=True)
    for ef in efs:
        index.hnsw.efSearch = ef
        rate, found = timed(lambda q: index.search(q, 10)[1], queries, args.batch, args.repeats)
        print(f'faiss: ef {ef}: {rate:.0f} queries/s, recall@10 {recall(found, truth, 10):.4f}', flush=True)


if __name__ == '__main__':
    main()
