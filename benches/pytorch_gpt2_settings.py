#!/usr/bin/env python3
"""Which training setting makes a small GPT-2 learn faster early on: the PyTorch model of
`benches/pytorch_gpt2.py` (leanburn's GPT-2, written in PyTorch) trained on one corpus with
one setting changed at a time, several seeds, the validation loss at chosen steps.

Settings (each run changes one from the baseline, which is leanburn's GPT-2 example before
2026-11-26, later: AdamW with Burn's epsilon 1e-5, weight decay 0.1 on every parameter, the
gradient norm clipped globally at 1, linear warmup over a tenth of the steps then cosine
decay to a tenth):

- `eps8`: AdamW's epsilon 1e-8, PyTorch's and nanoGPT's default (leanburn's since);
- `per-tensor-clip`: each parameter's gradient clipped to norm 1 on its own (Burn 0.21's
  `GradientClippingConfig::Norm`, which leanburn used before `GlobalNormClipping`);
- `decay-2d`: weight decay on the matrices and embeddings only (nanoGPT's groups);
- `eps8-bf16`: `eps8` with every training forward pass under `torch.autocast(bfloat16)`
  (weights, gradients and AdamW in f32; validation in f32, as leanburn's example validates
  its f32 master weights): bf16's cost against `eps8`, beside leanburn's `--precision bf16`
  against its f32 (docs/gpt2.md).

    python3 benches/pytorch_gpt2_settings.py --data ../shared/data/tinyshakespeare.txt \\
        --bpe ~/.cargo/registry/src/*/tiktoken-rs-*/assets/r50k_base.tiktoken --threads 2

Prints one line per run and a table of the mean validation loss per setting and step.
"""

import argparse
import math
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_gpt2 import PRESETS, Gpt2, load_tokens  # noqa: E402

SETTINGS = ["baseline", "eps8", "per-tensor-clip", "decay-2d", "eps8-bf16"]


def train(setting, seed, a, train_ids, windows):
    torch.manual_seed(seed)
    layers, d, heads, context = PRESETS[a.preset]
    model = Gpt2(layers, d, heads, context, "sdpa")
    eps = 1e-8 if setting.startswith("eps8") else 1e-5
    autocast = setting.endswith("bf16")
    if setting == "decay-2d":
        decay = [p for p in model.parameters() if p.dim() >= 2]
        rest = [p for p in model.parameters() if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}]
    else:
        groups = [{"params": list(model.parameters()), "weight_decay": 0.1}]
    opt = torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, 0.999), eps=eps)
    warmup = max(1, a.steps // 10)

    def lr_at(step):
        if step < warmup:
            return a.lr * (step + 1) / warmup
        progress = (step - warmup) / max(1, a.steps - warmup)
        return a.lr / 10 + (a.lr - a.lr / 10) * 0.5 * (1 + math.cos(math.pi * progress))

    def evaluate():
        model.eval()
        with torch.no_grad():
            loss = sum(model(x, y).item() for x, y in windows) / len(windows)
        model.train()
        return loss

    generator = torch.Generator().manual_seed(seed)
    found = {}
    for step in range(1, a.steps + 1):
        for g in opt.param_groups:
            g["lr"] = lr_at(step - 1)
        starts = torch.randint(0, len(train_ids) - a.seq - 1, (a.batch,), generator=generator)
        w = torch.stack([train_ids[s:s + a.seq + 1] for s in starts])
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = model(w[:, :-1], w[:, 1:])
        loss.backward()
        if setting == "per-tensor-clip":
            for p in model.parameters():
                torch.nn.utils.clip_grad_norm_([p], 1.0)
        else:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step in a.at:
            found[step] = evaluate()
    return found


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True)
    p.add_argument("--bpe")
    p.add_argument("--preset", default="gpt2-mini", choices=sorted(PRESETS))
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--settings", nargs="+", default=SETTINGS, choices=SETTINGS)
    p.add_argument("--at", type=int, nargs="+", default=[25, 50, 100, 200], help="steps to evaluate after")
    p.add_argument("--eval-windows", type=int, default=4, help="validation batches of --batch x --seq")
    p.add_argument("--threads", type=int)
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    tokens, source = load_tokens(a.data, a.bpe)
    if tokens is None:
        sys.exit(f"no tokens: {source}")
    split = len(tokens) - round(len(tokens) * 0.1)
    train_ids, valid_ids = tokens[:split], tokens[split:]
    stride = a.seq + 1
    windows = []
    for i in range(a.eval_windows):
        w = torch.stack([valid_ids[(i * a.batch + j) * stride:(i * a.batch + j) * stride + stride] for j in range(a.batch)])
        windows.append((w[:, :-1], w[:, 1:]))
    print(f"torch {torch.__version__}; {source}; {a.preset}, batch {a.batch} x {a.seq}, {a.steps} steps, lr {a.lr}")
    results = {}
    for setting in a.settings:
        for seed in a.seeds:
            started = time.time()
            found = train(setting, seed, a, train_ids, windows)
            results.setdefault(setting, []).append(found)
            losses = ", ".join(f"step {s}: {v:.3f}" for s, v in sorted(found.items()))
            print(f"{setting:16s} seed {seed}: {losses} ({time.time() - started:.0f} s)", flush=True)
    print("\n| setting | " + " | ".join(f"step {s}" for s in a.at) + " |")
    print("|---|" + "---|" * len(a.at))
    for setting, runs in results.items():
        means = [sum(r[s] for r in runs) / len(runs) for s in a.at]
        print(f"| {setting} | " + " | ".join(f"{m:.3f}" for m in means) + " |")


if __name__ == "__main__":
    main()
