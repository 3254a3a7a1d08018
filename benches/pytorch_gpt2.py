#!/usr/bin/env python3
"""Plain PyTorch GPT-2 training loop: the reference `gpt2_small_hybrid --mode full` is
compared against, on a GPU and on the CPU (`--device cpu`; docs/benchmarks.md).

Same model as `src/model/gpt2.rs` (pre-LayerNorm blocks, fused QKV, 4x GELU MLP, tied LM
head, N(0, 0.02) init, residual projections N(0, 0.02/sqrt(2 layers)), no dropout), same
optimizer (AdamW, betas 0.9/0.999, eps 1e-8 -- leanburn's clipped_adamw --, weight decay 0.1,
gradient norm clipped at 1, linear warmup over 10% of the steps then cosine decay to a
tenth), same shapes, the loss read back to the host every step as the example does by
default. Reports tokens/s over the steps after `--skip` and the allocator's peaks (on the
CPU: the process's peak resident memory, `ru_maxrss`, instead).

Data: `--data FILE` is tokenized with GPT-2's BPE (`r50k_base`, the encoding the example
uses) through tiktoken. tiktoken downloads its vocabulary on first use, which a machine
without network cannot do, so `--bpe FILE` names a local `r50k_base.tiktoken` (the copy
tiktoken-rs ships in its `assets/`). With no `--data`, or no tiktoken, the windows are
drawn from uniform random token ids and the script says so: speed and memory do not depend
on which tokens are fed, but the loss values then mean nothing.

    python3 benches/pytorch_gpt2.py --batch 8 --seq 1024 --steps 60
    python3 benches/pytorch_gpt2.py --precision bf16 --json-out result.json
    python3 benches/pytorch_gpt2.py --device cpu --threads 2 --preset gpt2-mini --batch 8 --seq 64
"""

import argparse
import json
import math
import resource
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# Resident memory of the process once torch is loaded, before any model or data: the part
# of the CPU peak that is the library itself.
RESIDENT_AFTER_IMPORT = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

PRESETS = {
    # layers, width, heads, context
    "gpt2-tiny": (2, 64, 2, 64),
    "gpt2-mini": (4, 128, 4, 128),
    "gpt2-micro": (6, 384, 6, 256),
    "gpt2-small": (12, 768, 12, 1024),
}
VOCAB = 50257


class Block(nn.Module):
    def __init__(self, d, heads, std, residual_std, attention):
        super().__init__()
        self.heads = heads
        self.attention = attention
        self.ln1 = nn.LayerNorm(d, eps=1e-5)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d, eps=1e-5)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)
        for lin, s in ((self.qkv, std), (self.fc, std), (self.proj, residual_std), (self.out, residual_std)):
            nn.init.normal_(lin.weight, 0.0, s)
            nn.init.zeros_(lin.bias)

    def attend(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        if self.attention == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # the textbook form: scores, mask, softmax, weighted sum
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
            y = scores.masked_fill(mask, float("-inf")).softmax(-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, d))

    def forward(self, x):
        x = x + self.attend(self.ln1(x))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class Gpt2(nn.Module):
    def __init__(self, layers, d, heads, context, attention, pad_vocab=1):
        super().__init__()
        # Rows past VOCAB are never a target (nanoGPT pads to 50,304 the same way).
        self.tokens = nn.Embedding(-(-VOCAB // pad_vocab) * pad_vocab, d)
        self.positions = nn.Embedding(context, d)
        nn.init.normal_(self.tokens.weight, 0.0, 0.02)
        nn.init.normal_(self.positions.weight, 0.0, 0.02)
        residual_std = 0.02 / math.sqrt(2 * layers)
        self.blocks = nn.ModuleList(Block(d, heads, 0.02, residual_std, attention) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d, eps=1e-5)

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.tokens(idx) + self.positions(torch.arange(t, device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.ln_f(x) @ self.tokens.weight.t()  # tied LM head
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))


# GPT-2's pre-tokenizer (tiktoken's r50k_base pattern).
R50K_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def encoding(bpe):
    import tiktoken

    if bpe is None:
        return tiktoken.get_encoding("r50k_base")  # downloads the vocabulary once
    from tiktoken.load import load_tiktoken_bpe

    ranks = load_tiktoken_bpe(bpe)
    return tiktoken.Encoding("r50k_base", pat_str=R50K_PATTERN, mergeable_ranks=ranks,
                             special_tokens={"<|endoftext|>": 50256})


def load_tokens(path, bpe):
    if path is None:
        return None, "uniform random token ids (no --data)"
    try:
        enc = encoding(bpe)
    except ImportError:
        return None, f"uniform random token ids (tiktoken is not installed; {path} not read)"
    with open(path, encoding="utf-8") as f:
        ids = enc.encode_ordinary(f.read())
    return torch.tensor(ids, dtype=torch.long), f"{path}: {len(ids):,} tokens"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="gpt2-small", choices=sorted(PRESETS))
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--skip", type=int, default=10, help="steps left out of the tokens/s figure")
    p.add_argument("--lr", type=float, default=6e-4)
    p.add_argument("--precision", default="f32", choices=["f32", "tf32", "bf16"],
                   help="f32: strict fp32 matmuls; tf32: TF32 tensor cores; bf16: autocast with fp32 master weights")
    p.add_argument("--attention", default="sdpa", choices=["sdpa", "naive"])
    p.add_argument("--pad-vocab", type=int, default=1,
                   help="round the embedding's rows up to a multiple of this (64: 50,304, as leanburn on GPUs)")
    p.add_argument("--data")
    p.add_argument("--bpe", help="a local r50k_base.tiktoken, for machines without network")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--json-out")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--threads", type=int, help="CPU threads (torch.set_num_threads)")
    a = p.parse_args()
    if a.steps <= a.skip:
        sys.exit(f"--steps ({a.steps}) must exceed --skip ({a.skip})")
    cuda = a.device == "cuda"
    if cuda and not torch.cuda.is_available():
        sys.exit("no CUDA device: use --device cpu to measure the CPU")
    if not cuda and a.precision != "f32":
        sys.exit("--device cpu measures f32 only")
    if a.threads:
        torch.set_num_threads(a.threads)
    layers, d, heads, context = PRESETS[a.preset]
    if a.seq > context:
        sys.exit(f"--seq {a.seq} exceeds the {a.preset} context {context}")

    torch.manual_seed(a.seed)
    dev = torch.device(a.device)
    device_name = torch.cuda.get_device_name() if cuda else f"cpu, {torch.get_num_threads()} threads"
    torch.backends.cuda.matmul.allow_tf32 = a.precision == "tf32"
    torch.backends.cudnn.allow_tf32 = a.precision == "tf32"
    tokens, source = load_tokens(a.data, a.bpe)
    print(f"torch {torch.__version__} on {device_name}; data: {source}", flush=True)

    if a.pad_vocab < 1:
        sys.exit(f"--pad-vocab must be at least 1, got {a.pad_vocab}")
    model = Gpt2(layers, d, heads, context, a.attention, a.pad_vocab).to(dev)
    params = sum(q.numel() for q in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)
    warmup = max(1, a.steps // 10)

    def lr_at(step):
        if step < warmup:
            return a.lr * (step + 1) / warmup
        progress = (step - warmup) / max(1, a.steps - warmup)
        return a.lr / 10 + (a.lr - a.lr / 10) * 0.5 * (1 + math.cos(math.pi * progress))

    def batch():
        if tokens is None:
            w = torch.randint(0, VOCAB, (a.batch, a.seq + 1))
        else:
            starts = torch.randint(0, len(tokens) - a.seq - 1, (a.batch,))
            w = torch.stack([tokens[s:s + a.seq + 1] for s in starts])
        w = w.to(dev, non_blocking=True)
        return w[:, :-1], w[:, 1:]

    print(f"{a.preset}: {params:,} parameters; batch {a.batch} x {a.seq}; {a.precision}, attention {a.attention}", flush=True)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    losses, start = [], None
    for step in range(a.steps):
        if step == a.skip:
            if cuda:
                torch.cuda.synchronize()
            start = time.perf_counter()
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        x, y = batch()
        with torch.autocast(a.device, dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())  # one host read per step, like the example's default
        if step % 10 == 0 or step == a.steps - 1:
            print(f"step {step:4d} loss {losses[-1]:.4f}", flush=True)
    if cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    timed = a.steps - a.skip
    result = {
        "name": f"PyTorch {torch.__version__} eager, full logits",
        "device": device_name,
        "torch": torch.__version__,
        "preset": a.preset,
        "parameters": params,
        "batch": a.batch,
        "seq": a.seq,
        "steps": a.steps,
        "precision": a.precision,
        "attention": a.attention,
        "pad_vocab": a.pad_vocab,
        "data": source,
        "tokens_per_s": timed * a.batch * a.seq / seconds,
        "seconds_per_step": seconds / timed,
        "peak_allocated_bytes": torch.cuda.max_memory_allocated() if cuda else None,
        "peak_reserved_bytes": torch.cuda.max_memory_reserved() if cuda else None,
        # Linux reports ru_maxrss in KiB.
        "peak_resident_bytes": None if cuda else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "resident_after_import_bytes": None if cuda else RESIDENT_AFTER_IMPORT,
        "first_loss": losses[0],
        "final_loss": losses[-1],
    }
    print(json.dumps(result), flush=True)
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
