"""What a GEMM of a never-seen shape costs on a GPU (docs/benchmarks.md, seed 4's passes; session 45): torch's
linear of [M, 768] by bert-base's [3072, 768] in fp16, for twelve new M, again for the same M, then for M + 1, with
and without a bias, through whichever BLAS library torch prefers (default, cublas or cublaslt).

  python3 bench/gemm_shapes.py [default|cublas|cublaslt]       # the GPU machine (its torch)
"""
import time, sys, torch
torch.backends.cuda.matmul.allow_tf32 = False
lib = sys.argv[1] if len(sys.argv) > 1 else "default"
if lib != "default":
    torch.backends.cuda.preferred_blas_library(lib)
dev = "cuda"
s = torch.cuda.Stream()
torch.cuda.set_stream(s)
w = torch.randn(3072, 768, device=dev, dtype=torch.half); b = torch.randn(3072, device=dev, dtype=torch.half)
x0 = torch.randn(40000, 768, device=dev, dtype=torch.half)
torch.nn.functional.linear(x0[:25600], w, b); torch.cuda.synchronize()
def t(M, bias=True):
    x = x0[:M]
    torch.cuda.synchronize(); a = time.perf_counter()
    torch.nn.functional.linear(x, w, b if bias else None); torch.cuda.synchronize()
    return (time.perf_counter() - a) * 1e3
for bias in (True, False):
    Ms = [2000 + 37 * i for i in range(12)]
    first = [t(M, bias) for M in Ms]
    second = [t(M, bias) for M in Ms]
    near = [t(M + 1, bias) for M in Ms]
    print(lib, "bias" if bias else "nobias", "first %s" % " ".join("%.2f" % v for v in first))
    print(lib, "bias" if bias else "nobias", "again %s" % " ".join("%.2f" % v for v in second))
    print(lib, "bias" if bias else "nobias", "M+1   %s" % " ".join("%.2f" % v for v in near))
