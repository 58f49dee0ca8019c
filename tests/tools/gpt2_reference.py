"""gpt2_reference.py: reads a safetensors file written by `strata-ckpt export` with nothing but
json, struct and numpy, runs GPT-2's forward on it (the Hugging Face GPT2LMHeadModel's math:
pre-norm blocks, LayerNorm eps 1e-5, tanh-GELU, causal attention scaled by 1/sqrt(head dim),
Conv1D weights [in, out], lm_head [vocab, width]) and checks it against strata's generation
output (infer.save_logits): the logits of each prompt's first generated token, and the greedy
tokens when decoded by whole-sequence forwards.

    python3 gpt2_reference.py MODEL.safetensors GENERATED.jsonl HEADS
Exit 0 when everything agrees (max |diff| <= 1e-4 of the row's largest |logit|), 1 otherwise.
"""
import json
import struct
import sys

import numpy as np


def load(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    tensors = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        assert e["dtype"] == "F32", (name, e["dtype"])
        begin, end = e["data_offsets"]
        tensors[name] = np.frombuffer(data[begin:end], dtype="<f4").reshape(e["shape"]).astype(np.float64)
    return tensors


def layer_norm(x, w, b):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-5) * w + b


def gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def forward(t, ids, heads):
    """Logits [T, V] of one sequence."""
    T = len(ids)
    x = t["transformer.wte.weight"][ids] + t["transformer.wpe.weight"][:T]
    C = x.shape[1]
    hd = C // heads
    mask = np.triu(np.full((T, T), -np.inf), 1)
    i = 0
    while f"transformer.h.{i}.ln_1.weight" in t:
        p = f"transformer.h.{i}."
        h = layer_norm(x, t[p + "ln_1.weight"], t[p + "ln_1.bias"])
        qkv = h @ t[p + "attn.c_attn.weight"] + t[p + "attn.c_attn.bias"]
        q, k, v = np.split(qkv, 3, axis=-1)
        q, k, v = (z.reshape(T, heads, hd).transpose(1, 0, 2) for z in (q, k, v))
        s = q @ k.transpose(0, 2, 1) / np.sqrt(hd) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        y = (s @ v).transpose(1, 0, 2).reshape(T, C)
        x = x + y @ t[p + "attn.c_proj.weight"] + t[p + "attn.c_proj.bias"]
        h = layer_norm(x, t[p + "ln_2.weight"], t[p + "ln_2.bias"])
        x = x + gelu(h @ t[p + "mlp.c_fc.weight"] + t[p + "mlp.c_fc.bias"]) @ t[p + "mlp.c_proj.weight"] + t[
            p + "mlp.c_proj.bias"]
        i += 1
    x = layer_norm(x, t["transformer.ln_f.weight"], t["transformer.ln_f.bias"])
    return x @ t["lm_head.weight"].T


def main():
    model, generated, heads = sys.argv[1], sys.argv[2], int(sys.argv[3])
    t = load(model)
    ok = True
    for line in open(generated):
        g = json.loads(line)
        prompt = list(g["prompt"].encode("latin-1"))
        want = np.array(g["logits"][0])
        got = forward(t, prompt, heads)[-1]
        diff = np.abs(got - want).max() / np.abs(want).max()
        # Greedy decoding by whole-sequence forwards, as many tokens as strata generated.
        seq = list(prompt)
        for _ in g["tokens"]:
            seq.append(int(np.argmax(forward(t, seq, heads)[-1])))
        same = seq[len(prompt):] == g["tokens"]
        print(f"prompt {g['prompt_index']}: first-token logits max diff {diff:.2e} of the row's scale; "
              f"greedy tokens {'equal' if same else 'DIFFER'}")
        ok = ok and diff <= 1e-4 and same
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
