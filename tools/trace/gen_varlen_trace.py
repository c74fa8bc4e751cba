#!/usr/bin/env python3
"""Write a synthetic fine-tuning trace whose sequence length changes every step.

Not recorded from a real run: a model of the allocation pattern of a decoder-only
Transformer fine-tuned on batches of varying length (the case where cached blocks
of one step rarely fit the next), for the expandable-segments test and benchmark.
Deterministic: the same arguments give the same file.

Model (bf16): weights, fp32 master weights, two Adam moments and gradients stay
live; each step draws a sequence length, runs the forward pass keeping per-layer
activations (qkv, attention probabilities, MLP), then the backward pass freeing
them in reverse order with short-lived gradient temporaries.
"""
import argparse
import random


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--min-seq", type=int, default=128)
    ap.add_argument("--max-seq", type=int, default=2048)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rnd = random.Random(a.seed)
    out = open(a.output, "w")
    out.write("hbmtrace 1\n")
    out.write(f"# synthetic (tools/trace/gen_varlen_trace.py {' '.join(f'--{k.replace(chr(95), chr(45))} {v}' for k, v in vars(a).items() if k != 'output')})\n")
    out.write("# fine-tuning a decoder-only Transformer with a new sequence length every step\n")
    nid = [0]

    def alloc(size):
        i = nid[0]
        nid[0] += 1
        out.write(f"a {i} {size}\n")
        return i

    def free(i):
        out.write(f"f {i}\n")

    h = a.hidden
    bf16, fp32 = 2, 4
    per_layer = [4 * h * h, 8 * h * h]  # attention (qkv + out), MLP (up + down)
    for _ in range(a.layers):
        for n in per_layer:
            alloc(n * bf16)   # weight
            alloc(n * fp32)   # master weight
            alloc(n * fp32)   # adam m
            alloc(n * fp32)   # adam v
    for _ in range(a.steps):
        s = rnd.randint(a.min_seq, a.max_seq) // 8 * 8
        tok = a.batch * s
        saved = []
        x = alloc(tok * h * bf16)
        for _ in range(a.layers):
            qkv = alloc(3 * tok * h * bf16)
            probs = alloc(a.batch * a.heads * s * s * bf16)
            ctx = alloc(tok * h * bf16)
            scratch = alloc(a.batch * a.heads * s * s * fp32)  # softmax in fp32, freed at once
            free(scratch)
            up = alloc(4 * tok * h * bf16)
            act = alloc(4 * tok * h * bf16)
            y = alloc(tok * h * bf16)
            saved.append([qkv, probs, ctx, up, act, y])
        logits = alloc(tok * 32000 * bf16)
        free(logits)
        grads = [alloc(n * bf16) for _ in range(a.layers) for n in per_layer]
        for layer in reversed(saved):
            g = alloc(4 * tok * h * bf16)
            for t in reversed(layer):
                free(t)
            free(g)
        free(x)
        for g in grads:
            free(g)
    out.close()


if __name__ == "__main__":
    main()
