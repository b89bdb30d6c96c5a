"""Where DeBERTa-v3's attention spends its time on a GPU (issue 52 §2: DeBERTa-v3-base ≥ 15,000 docs/s).

Runs, in PyTorch on one GPU, the operations src/models/architectures/deberta_v2.cpp runs per layer and segment
(position_bias: the c2p and p2c products against the shared position projections, their gathers by bucketed
distance, the scale; the padding mask added; scaled_dot_product_attention with that bias), beside one layer's
linear work for the same tokens, and times each with CUDA events; then variants of the bias (contiguous products
before the gathers; the bias folded into one tensor written once). Figures per layer for one pass of --count
sequences of --length tokens, fp16.

  python3 bench/deberta_attention.py [--count 1024] [--length 72] [--rounds 20]
"""
import argparse

import torch
import torch.nn.functional as F


def timed(fn, rounds):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(rounds):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / rounds


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=1024)
    parser.add_argument("--length", type=int, default=72)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    dev, dt = "cuda", torch.float16
    C, L, Hh, D = args.count, args.length, args.heads, args.head_dim
    H = Hh * D
    R = 2 * L - 1
    scale = 1.0 / (D * 3) ** 0.5
    torch.manual_seed(0)
    x = torch.randn(C * L, H, device=dev, dtype=dt)
    qkv_w = torch.randn(3 * H, H, device=dev, dtype=dt) * 0.02
    up_w = torch.randn(4 * H, H, device=dev, dtype=dt) * 0.02
    down_w = torch.randn(H, 4 * H, device=dev, dtype=dt) * 0.02
    out_w = torch.randn(H, H, device=dev, dtype=dt) * 0.02
    pos_key = torch.randn(R, Hh, D, device=dev, dtype=dt)
    pos_query = torch.randn(R, Hh, D, device=dev, dtype=dt)
    q, k, v = (torch.randn(C, Hh, L, D, device=dev, dtype=dt) for _ in range(3))
    keys = torch.arange(L, device=dev)
    index2 = (keys.unsqueeze(1) - keys.unsqueeze(0) + (L - 1))  # [L, L]: the position row of i - j
    index = index2.expand(C, Hh, L, L)
    mask = torch.zeros(C, 1, 1, L, device=dev, dtype=dt)

    def against(t, table):  # as the C++: one bmm per head over all rows, a permuted view back
        rows = t.permute(1, 0, 2, 3).reshape(Hh, C * L, D)
        return torch.bmm(rows, table.permute(1, 2, 0)).view(Hh, C, L, R).permute(1, 0, 2, 3)

    def bias_now():
        c2p = torch.gather(against(q, pos_key), 3, index)
        p2c = torch.gather(against(k, pos_query), 3, index.transpose(2, 3)).transpose(2, 3)
        return (c2p + p2c) * scale

    def bias_contiguous():
        c2p = torch.gather(against(q, pos_key).contiguous(), 3, index)
        p2c = torch.gather(against(k, pos_query).contiguous(), 3, index.transpose(2, 3)).transpose(2, 3)
        return (c2p + p2c) * scale

    def bias_matmul():  # broadcast matmul straight in [C, heads, L, R] layout, then one gather each
        c2p = torch.matmul(q, pos_key.permute(1, 2, 0).unsqueeze(0))
        p2c = torch.matmul(k, pos_query.permute(1, 2, 0).unsqueeze(0))
        return (torch.gather(c2p, 3, index) + torch.gather(p2c, 3, index.transpose(2, 3)).transpose(2, 3)) * scale

    R8 = (R + 7) // 8 * 8  # what deberta_v2.cpp reads since 6ed272d: rows rounded up to 8, tables padded and scaled
    pos_key8 = torch.cat([pos_key * scale, torch.zeros(R8 - R, Hh, D, device=dev, dtype=dt)])
    pos_query8 = torch.cat([pos_query * scale, torch.zeros(R8 - R, Hh, D, device=dev, dtype=dt)])

    def against8(t, table):
        rows = t.permute(1, 0, 2, 3).reshape(Hh, C * L, D)
        return torch.bmm(rows, table.permute(1, 2, 0)).view(Hh, C, L, R8).permute(1, 0, 2, 3)

    def bias_aligned():
        c2p = torch.gather(against8(q, pos_key8), 3, index)
        return c2p.add_(torch.gather(against8(k, pos_query8), 3, index.transpose(2, 3)).transpose(2, 3))

    def attend(bias):
        return F.scaled_dot_product_attention(q, k, v, mask + bias, 0.0, False, scale=scale)

    ref = bias_now()
    for name, fn in (("contiguous", bias_contiguous), ("matmul", bias_matmul), ("aligned", bias_aligned)):
        diff = (fn() - ref).abs().max().item()
        print(f"check {name}: max abs diff {diff:.3g}")
    b = bias_now()
    rows = [
        ("linear work of one layer (qkv, out, up, down)", lambda: (F.linear(x, qkv_w), F.linear(x, out_w),
                                                                    F.linear(F.linear(x, up_w), down_w))),
        ("bias as the C++ runs it (products, gathers, scale)", bias_now),
        ("  the two products alone", lambda: (against(q, pos_key), against(k, pos_query))),
        ("  c2p gather alone", lambda: torch.gather(against(q, pos_key), 3, index)),
        ("bias as the C++ runs it since 6ed272d (rows rounded up to 8, scaled tables, in place)", bias_aligned),
        ("  the two products alone, rows rounded up to 8", lambda: (against8(q, pos_key8), against8(k, pos_query8))),
        ("bias, products made contiguous first", bias_contiguous),
        ("bias, broadcast matmul", bias_matmul),
        ("mask + bias", lambda: mask + b),
        ("SDPA with the bias as mask", lambda: attend(b)),
        ("SDPA without a mask (flash)", lambda: F.scaled_dot_product_attention(q, k, v, None, 0.0, False,
                                                                               scale=scale)),
    ]
    print(f"one layer, {C} sequences of {L} tokens, {Hh} heads of {D}, fp16, {torch.cuda.get_device_name()}")
    for name, fn in rows:
        print(f"{timed(fn, args.rounds):9.3f} ms  {name}")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            attend(bias_now())
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=15))


if __name__ == "__main__":
    main()
