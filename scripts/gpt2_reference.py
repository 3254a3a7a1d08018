#!/usr/bin/env python3
"""Writes the reference state `tests/parity/gpt2_parity/` checks leanburn's GPT-2 against, the way
llm.c's `test_gpt2` checks its model: a small GPT-2 computed by an independent
implementation, Hugging Face transformers' `GPT2LMHeadModel` (exact-erf GELU, eager
attention, float32, no dropout), and PyTorch's own AdamW and `clip_grad_norm_`.

Run by hand, not in CI (CI has no PyTorch); commit what it writes:

    python3 -m venv /tmp/ref && /tmp/ref/bin/pip install torch transformers safetensors
    /tmp/ref/bin/python scripts/gpt2_reference.py          # -> tests/data/gpt2_reference.safetensors
    /tmp/ref/bin/python scripts/gpt2_reference.py --precision bf16   # -> ..._bf16.safetensors

With `--precision bf16` every forward pass (and so its backward) runs under
`torch.autocast("cpu", dtype=torch.bfloat16)`: the mixed precision PyTorch users train in,
with the weights, their gradients and AdamW in f32. Same seed, same weights and batch.

The file (safetensors, float32 unless said) holds, under leanburn's parameter paths
(`blocks.0.attention.qkv.weight`, ...; linear weights as `[d_in, d_out]`, as both Burn and
GPT-2's `Conv1D` store them):

- `param.<path>`: the weights, drawn here: GPT-2's N(0, 0.02) initialisation, with the
  LayerNorm gains, their shifts and every bias perturbed away from 1 and 0 so that a weight
  loaded into the wrong place shows, and the MLP's first weights at N(0, 0.25) so that
  GELU sees inputs over [-4, 4], where an inexact derivative shows;
- `inputs`, `targets`: one batch of token ids, int64 `[batch, seq]`;
- `logits` `[batch, seq, vocab]`, `loss` `[1]`: the forward pass at those weights;
- `grad.<path>`: the gradient of the mean cross-entropy for every parameter;
- `losses` `[steps]`: the loss of each of `steps` training steps on the same batch, each
  taken before its update: gradient norm clipped globally (`clip_grad_norm_`), then AdamW;
- `final.<path>`: the weights after those steps.

The metadata records the model's shape and the optimizer's settings; the test reads them
from there, so the two sides cannot drift apart.
"""

import argparse
import json
import os

import torch
from safetensors.torch import save_file
from transformers import GPT2Config, GPT2LMHeadModel

HERE = os.path.dirname(os.path.abspath(__file__))

# The model: small enough to commit (about 29k parameters), every part of GPT-2 present.
MODEL = dict(vocab=96, context=16, layers=2, d_model=32, heads=4, layer_norm_eps=1e-5)
BATCH = dict(batch=4, seq=16)
# The optimizer: Burn's AdamW defaults for the betas and epsilon, the example's weight decay
# and clipping; a learning rate large enough that weight decay changes the losses visibly.
OPTIMIZER = dict(lr=1e-2, beta_1=0.9, beta_2=0.999, epsilon=1e-5, weight_decay=0.1, clip_norm=1.0, steps=10)


def leanburn_paths(layers):
    """(leanburn's path, transformers' name) for every parameter, in the model's order."""
    pairs = [("token_embedding.weight", "transformer.wte.weight"), ("position_embedding.weight", "transformer.wpe.weight")]
    for i in range(layers):
        hf = f"transformer.h.{i}"
        ours = f"blocks.{i}"
        pairs += [
            (f"{ours}.attention_norm.gamma", f"{hf}.ln_1.weight"),
            (f"{ours}.attention_norm.beta", f"{hf}.ln_1.bias"),
            (f"{ours}.attention.qkv.weight", f"{hf}.attn.c_attn.weight"),
            (f"{ours}.attention.qkv.bias", f"{hf}.attn.c_attn.bias"),
            (f"{ours}.attention.projection.weight", f"{hf}.attn.c_proj.weight"),
            (f"{ours}.attention.projection.bias", f"{hf}.attn.c_proj.bias"),
            (f"{ours}.mlp_norm.gamma", f"{hf}.ln_2.weight"),
            (f"{ours}.mlp_norm.beta", f"{hf}.ln_2.bias"),
            (f"{ours}.mlp.expand.weight", f"{hf}.mlp.c_fc.weight"),
            (f"{ours}.mlp.expand.bias", f"{hf}.mlp.c_fc.bias"),
            (f"{ours}.mlp.project.weight", f"{hf}.mlp.c_proj.weight"),
            (f"{ours}.mlp.project.bias", f"{hf}.mlp.c_proj.bias"),
        ]
    pairs += [("final_norm.gamma", "transformer.ln_f.weight"), ("final_norm.beta", "transformer.ln_f.bias")]
    return pairs


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.path.join(HERE, "..", "tests", "data", "gpt2_reference.safetensors"))
    p.add_argument("--seed", type=int, default=20261126)
    p.add_argument(
        "--precision",
        default="f32",
        choices=["f32", "bf16"],
        help="bf16: every forward pass under torch.autocast(bfloat16) (f32 master weights, "
        "optimizer and gradients), written to gpt2_reference_bf16.safetensors by default",
    )
    args = p.parse_args()
    if args.precision == "bf16" and args.out == p.get_default("out"):
        args.out = args.out.replace(".safetensors", "_bf16.safetensors")
    autocast = lambda: torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16")

    torch.manual_seed(args.seed)
    torch.backends.cuda.matmul.allow_tf32 = False
    config = GPT2Config(
        vocab_size=MODEL["vocab"],
        n_positions=MODEL["context"],
        n_embd=MODEL["d_model"],
        n_layer=MODEL["layers"],
        n_head=MODEL["heads"],
        activation_function="gelu",  # the exact erf form, as leanburn's (GPT-2's own is "gelu_new")
        layer_norm_epsilon=MODEL["layer_norm_eps"],
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=None,
    )
    config._attn_implementation = "eager"
    model = GPT2LMHeadModel(config).float()
    model.train()  # dropout is 0: train mode changes nothing but says what is measured
    names = dict(model.named_parameters())
    pairs = leanburn_paths(MODEL["layers"])
    assert {hf for _, hf in pairs} == set(names), sorted(set(names) ^ {hf for _, hf in pairs})
    with torch.no_grad():
        for ours, hf in pairs:
            param = names[hf]
            if ours.endswith("mlp.expand.weight"):
                # GELU's inputs spread over [-4, 4] (std about 1.4), where its exact derivative
                # and the tanh approximation's differ most (up to 8.7e-4 near |x| = 2); at
                # GPT-2's N(0, 0.02) they would sit near 0, where the two agree.
                param.normal_(0.0, 0.25)
            elif ours.endswith(".gamma"):
                param.copy_(1.0 + 0.1 * torch.randn_like(param))
            elif ours.endswith((".beta", ".bias")):
                param.copy_(0.02 * torch.randn_like(param))

    stream = torch.randint(0, MODEL["vocab"], (BATCH["batch"], BATCH["seq"] + 1))
    inputs, targets = stream[:, :-1].contiguous(), stream[:, 1:].contiguous()

    def loss_of(logits):
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    out = {"inputs": inputs, "targets": targets}
    for ours, hf in pairs:
        out[f"param.{ours}"] = names[hf].detach().clone()

    with autocast():
        logits = model(inputs).logits
        loss = loss_of(logits)
    loss.backward()
    out["logits"] = logits.detach().float().clone()
    out["loss"] = loss.detach().reshape(1).clone()
    for ours, hf in pairs:
        out[f"grad.{ours}"] = names[hf].grad.detach().clone()
    model.zero_grad(set_to_none=True)

    optimizer = torch.optim.AdamW(
        model.parameters(),
        lr=OPTIMIZER["lr"],
        betas=(OPTIMIZER["beta_1"], OPTIMIZER["beta_2"]),
        eps=OPTIMIZER["epsilon"],
        weight_decay=OPTIMIZER["weight_decay"],
    )
    losses, norms = [], []
    for _ in range(OPTIMIZER["steps"]):
        optimizer.zero_grad(set_to_none=True)
        with autocast():
            loss = loss_of(model(inputs).logits)
        loss.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), OPTIMIZER["clip_norm"])))
        optimizer.step()
        losses.append(loss.item())
    out["losses"] = torch.tensor(losses, dtype=torch.float32)
    for ours, hf in pairs:
        out[f"final.{ours}"] = names[hf].detach().clone()

    metadata = {
        "model": json.dumps(MODEL),
        "batch": json.dumps(BATCH),
        "optimizer": json.dumps(OPTIMIZER),
        "precision": args.precision,
        "written_by": f"scripts/gpt2_reference.py, torch {torch.__version__}, seed {args.seed}",
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    save_file({k: v.contiguous() for k, v in out.items()}, args.out, metadata=metadata)
    print(f"wrote {args.out}: {sum(v.numel() for k, v in out.items() if k.startswith('param.'))} parameters")
    print(f"loss {out['loss'].item():.6f}; losses {[round(x, 5) for x in losses]}")
    print(f"global gradient norms before clipping {[round(x, 3) for x in norms]}")


if __name__ == "__main__":
    main()
