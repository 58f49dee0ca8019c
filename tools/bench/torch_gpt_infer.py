"""torch_gpt_infer.py: strata-bench infer's peer: PyTorch eager (Debian's python3-torch) running a
gpt exported by `strata-ckpt export --format safetensors` (GPT-2 names) with the same KV-cache
algorithm as strata's generation: one prefill of the right-padded prompts, then one token a step
for every row at its own position, greedy.

    python3 torch_gpt_infer.py MODEL.safetensors HEADS PROMPTS_JSON MAX_NEW_TOKENS THREADS
Prints one JSON object: tokens per prompt, prefill_ms, decode_ms_per_step, tokens_per_s.
"""
import json
import math
import struct
import sys
import time

import torch


def load(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = bytearray(f.read())
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        begin, end = e["data_offsets"]
        out[name] = torch.frombuffer(data[begin:end], dtype=torch.float32).reshape(e["shape"]).clone()
    return out


class Gpt:
    def __init__(self, t, heads):
        self.t, self.heads = t, heads
        self.layers = 0
        while f"transformer.h.{self.layers}.ln_1.weight" in t:
            self.layers += 1
        self.width = t["transformer.wte.weight"].shape[1]
        self.lm_head_t = t["lm_head.weight"].t().contiguous()

    def forward(self, ids, starts, cache):
        """ids [B, n] at positions starts[b] + j; cache: per layer [k, v] of [B, H, ctx, hd]."""
        t, H = self.t, self.heads
        B, n = ids.shape
        C = self.width
        hd = C // H
        pos = torch.stack([torch.arange(s, s + n) for s in starts])
        x = t["transformer.wte.weight"][ids] + t["transformer.wpe.weight"][pos]
        for i in range(self.layers):
            p = f"transformer.h.{i}."
            h = torch.nn.functional.layer_norm(x, (C,), t[p + "ln_1.weight"], t[p + "ln_1.bias"], 1e-5)
            qkv = torch.addmm(t[p + "attn.c_attn.bias"], h.reshape(B * n, C), t[p + "attn.c_attn.weight"])
            q, k, v = qkv.reshape(B, n, 3, H, hd).permute(2, 0, 3, 1, 4)
            kc, vc = cache[i]
            y = torch.empty(B, H, n, hd)
            for b in range(B):
                s = starts[b]
                kc[b, :, s:s + n] = k[b]
                vc[b, :, s:s + n] = v[b]
                keys = s + n
                sc = q[b] @ kc[b, :, :keys].transpose(-1, -2) / math.sqrt(hd)
                mask = torch.arange(keys)[None, :] > (s + torch.arange(n))[:, None]
                sc = sc.masked_fill(mask, float("-inf"))
                y[b] = torch.softmax(sc, dim=-1) @ vc[b, :, :keys]
            y = y.transpose(1, 2).reshape(B * n, C)
            x = x + torch.addmm(t[p + "attn.c_proj.bias"], y, t[p + "attn.c_proj.weight"]).reshape(B, n, C)
            h = torch.nn.functional.layer_norm(x, (C,), t[p + "ln_2.weight"], t[p + "ln_2.bias"], 1e-5)
            f = torch.nn.functional.gelu(torch.addmm(t[p + "mlp.c_fc.bias"], h.reshape(B * n, C),
                                                     t[p + "mlp.c_fc.weight"]), approximate="tanh")
            x = x + torch.addmm(t[p + "mlp.c_proj.bias"], f, t[p + "mlp.c_proj.weight"]).reshape(B, n, C)
        x = torch.nn.functional.layer_norm(x, (C,), t["transformer.ln_f.weight"], t["transformer.ln_f.bias"], 1e-5)
        return x @ self.lm_head_t


def main():
    model_path, heads, prompts, max_new, threads = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]), int(
        sys.argv[4]), int(sys.argv[5])
    torch.set_num_threads(threads)
    t = load(model_path)
    gpt = Gpt(t, heads)
    ctx = t["transformer.wpe.weight"].shape[0]
    B = len(prompts)
    seqs = [list(p.encode("latin-1")) for p in prompts]
    lens = [len(s) for s in seqs]
    H, hd = heads, gpt.width // heads
    with torch.inference_mode():
        cache = [[torch.zeros(B, H, ctx, hd), torch.zeros(B, H, ctx, hd)] for _ in range(gpt.layers)]
        longest = max(lens)
        ids = torch.zeros(B, longest, dtype=torch.long)
        for b, s in enumerate(seqs):
            ids[b, :len(s)] = torch.tensor(s)
        starts = [0] * B
        start = time.perf_counter()
        prefill_ms = 0.0
        for step in range(max_new):
            logits = gpt.forward(ids, starts, cache)
            for b in range(B):
                row = logits[b, lens[b] - 1] if step == 0 else logits[b, -1]
                seqs[b].append(int(torch.argmax(row)))
            if step == 0:
                prefill_ms = (time.perf_counter() - start) * 1e3
            starts = [len(s) - 1 for s in seqs]
            ids = torch.tensor([[s[-1]] for s in seqs])
        total_ms = (time.perf_counter() - start) * 1e3
    print(json.dumps({"tokens": [s[l:] for s, l in zip(seqs, lens)], "prefill_ms": prefill_ms,
                      "decode_ms_per_step": (total_ms - prefill_ms) / max(1, max_new - 1),
                      "tokens_per_s": 1e3 * B * max_new / total_ms, "torch": torch.__version__}))


if __name__ == "__main__":
    main()
