"""What a GEMM of a never-seen shape costs on a GPU (docs/benchmarks.md, seed 4's passes; session 45): torch's
linear of [M, 768] by bert-base's [3072, 768] in fp16, for twelve new M, again for the same M, then for M + 1, with
and without a bias, through whichever BLAS library torch prefers (default, cublas or cublaslt).

  python3 bench/gemm_shapes.py [default|cublas|cublaslt]       # the GPU machine (its torch)
"""
import sys
import time

import torch


def main():
    torch.backends.cuda.matmul.allow_tf32 = False
    library = sys.argv[1] if len(sys.argv) > 1 else "default"
    if library != "default":
        torch.backends.cuda.preferred_blas_library(library)
    torch.cuda.set_stream(torch.cuda.Stream())  # as flowline's replicas run: a stream of their own
    half = {"device": "cuda", "dtype": torch.half}
    weight, bias = torch.randn(3072, 768, **half), torch.randn(3072, **half)
    rows = torch.randn(40000, 768, **half)
    torch.nn.functional.linear(rows[:25600], weight, bias)  # cuBLAS's handle and workspace, one shape met
    torch.cuda.synchronize()

    def milliseconds(m, with_bias):
        torch.cuda.synchronize()
        start = time.perf_counter()
        torch.nn.functional.linear(rows[:m], weight, bias if with_bias else None)
        torch.cuda.synchronize()
        return (time.perf_counter() - start) * 1e3

    for with_bias in (True, False):
        ms = [2000 + 37 * i for i in range(12)]
        rounds = {"first": [milliseconds(m, with_bias) for m in ms],
                  "again": [milliseconds(m, with_bias) for m in ms],
                  "M+1  ": [milliseconds(m + 1, with_bias) for m in ms]}
        for name, values in rounds.items():
            print(library, "bias" if with_bias else "nobias", name, " ".join(f"{v:.2f}" for v in values))


if __name__ == "__main__":
    main()
