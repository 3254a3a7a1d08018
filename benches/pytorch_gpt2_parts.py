#!/usr/bin/env python3
"""PyTorch's side of `benches/gpt2_parts.rs`: the same parts of a GPT-2 training step at the
same shapes, each the median of `--reps` runs after `--warmup`, synchronised around each
run, printed as one JSON line `{part: {"calls", "ms", "flops"}}` (ms per call).

- gemm.qkv / gemm.proj / gemm.fc / gemm.out (once per layer), gemm.head (once): a linear
  layer's three GEMMs `X @ W`, `dY @ W.T`, `X.T @ dY` on `batch * seq` rows;
- attention (once per layer): `scaled_dot_product_attention(q, k, v, is_causal=True)`,
  forward and backward of `out.sum()`;
- step.forward, step.backward, step.optimizer (gradient norm clipped at 1, AdamW), each
  synchronised, and step, the same without synchronisation between them: the model and
  optimizer of `benches/pytorch_gpt2.py` with the full logits; step.host, the time until
  that unsynchronised step's last call returned, before the sync (a step whose host time
  is close to its synced time keeps the GPU waiting on the host).

--precision: f32 (strict), tf32 (TF32 matmuls) or bf16 (tensors in bf16 for the GEMMs and
the attention; autocast for the step).

    python3 benches/pytorch_gpt2_parts.py --preset gpt2-small --batch 8 --seq 1024 --precision tf32
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_gpt2 import PRESETS, VOCAB, Gpt2  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="gpt2-small", choices=sorted(PRESETS))
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int)
    p.add_argument("--pad-vocab", type=int, default=64)
    p.add_argument("--parts", default="gemm,attention,step")
    p.add_argument("--precision", default="tf32", choices=["f32", "tf32", "bf16"])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--threads", type=int)
    a = p.parse_args()
    cuda = a.device == "cuda"
    if cuda and not torch.cuda.is_available():
        sys.exit("no CUDA device: use --device cpu")
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.backends.cuda.matmul.allow_tf32 = a.precision == "tf32"
    torch.backends.cudnn.allow_tf32 = a.precision == "tf32"
    layers, d, heads, context = PRESETS[a.preset]
    seq = a.seq or context
    dev = torch.device(a.device)
    dtype = torch.bfloat16 if a.precision == "bf16" else torch.float32
    vocab = -(-VOCAB // a.pad_vocab) * a.pad_vocab
    parts = set(a.parts.split(","))
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    torch.manual_seed(42)

    def timed(calls, flops, f):
        samples = []
        for rep in range(a.warmup + a.reps):
            sync()
            start = time.perf_counter()
            results = f()
            sync()
            del results
            if rep >= a.warmup:
                samples.append((time.perf_counter() - start) * 1e3)
        samples.sort()
        return {"calls": calls, "ms": samples[len(samples) // 2], "flops": flops}

    out = {}
    m = a.batch * seq
    if "gemm" in parts:
        for name, k, n, calls in (("qkv", d, 3 * d, layers), ("proj", d, d, layers), ("fc", d, 4 * d, layers),
                                  ("out", 4 * d, d, layers), ("head", d, vocab, 1)):
            x, w, dy = (torch.randn(s, device=dev, dtype=dtype) for s in ((m, k), (k, n), (m, n)))
            out[f"gemm.{name}"] = timed(calls, 6.0 * m * k * n, lambda: (x @ w, dy @ w.t(), x.t() @ dy))
            del x, w, dy
    if "attention" in parts:
        q, k, v = (torch.randn(a.batch, heads, seq, d // heads, device=dev, dtype=dtype, requires_grad=True)
                   for _ in range(3))

        def attend():
            F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
            return None

        out["attention"] = timed(layers, None, attend)
        del q, k, v
    if "step" in parts:
        model = Gpt2(layers, d, heads, context, "sdpa", a.pad_vocab).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)
        ids = (torch.arange(a.batch * (seq + 1), device=dev) * 7919 + 13) % VOCAB
        windows = ids.view(a.batch, seq + 1)
        x, y = windows[:, :-1], windows[:, 1:]
        samples = {"step.forward": [], "step.backward": [], "step.optimizer": [], "step": [], "step.host": []}

        def forward():
            with torch.autocast(a.device, dtype=torch.bfloat16, enabled=a.precision == "bf16"):
                return model(x, y)

        def update():
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)

        for rep in range(a.warmup + a.reps):
            sync()
            t0 = time.perf_counter()
            loss = forward()
            sync()
            t1 = time.perf_counter()
            loss.backward()
            sync()
            t2 = time.perf_counter()
            update()
            sync()
            t3 = time.perf_counter()
            forward().backward()
            update()
            queued = time.perf_counter()
            sync()
            t4 = time.perf_counter()
            if rep >= a.warmup:
                for name, ms in (("step.forward", t1 - t0), ("step.backward", t2 - t1),
                                 ("step.optimizer", t3 - t2), ("step", t4 - t3), ("step.host", queued - t3)):
                    samples[name].append(ms * 1e3)
        for name, values in samples.items():
            values.sort()
            out[name] = {"calls": 1, "ms": values[len(values) // 2], "flops": None}
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
