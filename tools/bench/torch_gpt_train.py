"""torch_gpt_train.py: strata-bench step's peer: PyTorch eager training steps of the gpt strata
builds (trainer/models/gpt.cc: token and position embeddings, pre-LayerNorm blocks with a fused
qkv projection, causal attention, a 4x GELU(tanh) MLP, a final LayerNorm and an untied head
without bias), on random tokens, with AdamW, the same shapes and dtype as strata's run.

    python3 torch_gpt_train.py --layers L --width C --heads H --context T --batch B --vocab V \
        --steps S --warmup W --device cpu|cuda[:N] [--threads N] [--attention sdpa|math] \
        [--precision fp32|tf32|bf16]

Prints one JSON object: the median step in milliseconds over the steps after the warm-up, tokens
per second, the parameter count and what ran. Attention is PyTorch's fused
scaled_dot_product_attention where this PyTorch has it (the stronger peer; --attention math
spells it out as strata computes it). --precision: fp32 matmuls in fp32 (the default); tf32 lets
them use TF32 tensor cores (set_float32_matmul_precision "high"); bf16 runs forward and loss under
autocast to bfloat16 (bf16 activations and matmuls, fp32 weights and AdamW), which is how PyTorch
eager trains in bf16: PyTorch on CUDA has no bf16 multiply of fp32 tensors, so this peer is the
stronger one for strata's train.matmul_precision bf16.
"""
import argparse
import contextlib
import json
import math
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, c, heads, sdpa):
        super().__init__()
        self.heads, self.sdpa = heads, sdpa
        self.ln1 = nn.LayerNorm(c)
        self.qkv = nn.Linear(c, 3 * c)
        self.proj = nn.Linear(c, c)
        self.ln2 = nn.LayerNorm(c)
        self.fc1 = nn.Linear(c, 4 * c)
        self.fc2 = nn.Linear(4 * c, c)

    def attention(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            s = (q @ k.transpose(-2, -1)) / math.sqrt(c // self.heads)
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
            y = s.masked_fill(mask, float("-inf")).softmax(dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, c))

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, a, sdpa):
        super().__init__()
        self.tok = nn.Embedding(a.vocab, a.width)
        self.pos = nn.Embedding(a.context, a.width)
        self.blocks = nn.ModuleList(Block(a.width, a.heads, sdpa) for _ in range(a.layers))
        self.ln_f = nn.LayerNorm(a.width)
        self.head = nn.Linear(a.width, a.vocab, bias=False)

    def forward(self, ids, targets):
        x = self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def main():
    p = argparse.ArgumentParser()
    for name, default in (("layers", 4), ("width", 256), ("heads", 4), ("context", 128), ("batch", 8),
                          ("vocab", 256), ("steps", 20), ("warmup", 5), ("threads", 0)):
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--device", default="cpu")
    p.add_argument("--attention", choices=("sdpa", "math"), default="sdpa")
    p.add_argument("--precision", choices=("fp32", "tf32", "bf16"), default="fp32")
    a = p.parse_args()
    if a.steps <= a.warmup:
        sys.exit("--steps must exceed --warmup")
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    sdpa = a.attention == "sdpa" and hasattr(F, "scaled_dot_product_attention")
    device = torch.device(a.device)
    torch.set_float32_matmul_precision("highest" if a.precision == "fp32" else "high")
    autocast = (torch.autocast(device_type=device.type, dtype=torch.bfloat16) if a.precision == "bf16"
                else contextlib.nullcontext())
    torch.manual_seed(1)
    model = Gpt(a, sdpa).to(device)
    optim = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.01)
    ids = torch.randint(0, a.vocab, (a.batch, a.context + 1), device=device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    times = []
    for step in range(a.steps):
        sync()
        start = time.perf_counter()
        with autocast:
            loss = model(ids[:, :-1], ids[:, 1:])
        optim.zero_grad(set_to_none=True)
        loss.backward()
        optim.step()
        sync()
        if step >= a.warmup:
            times.append(time.perf_counter() - start)
    step_s = statistics.median(times)
    print(json.dumps({"step_ms": step_s * 1e3, "tokens_per_s": a.batch * a.context / step_s,
                      "params": sum(t.numel() for t in model.parameters()), "loss": loss.item(),
                      "attention": "sdpa" if sdpa else "math", "precision": a.precision,
                      "torch": torch.__version__,
                      "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                      "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
