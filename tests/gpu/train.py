#!/usr/bin/env python3
"""Short training loops on a real GPU under one allocator configuration, for scripts/gpu-check.sh.

    gpu_train.py MODEL ALLOCATOR OUTDIR
      MODEL:     resnet50 | gpt2
      ALLOCATOR: native | hbmalloc | hbmalloc-expandable

Random weights and data. resnet50: torchvision's ResNet-50, batch 32 at 224x224, SGD. gpt2: a GPT-2-sized
decoder (12 layers, d_model 768, 12 heads) built from torch.nn, batch 8 with a new sequence length (128..1024)
every step, AdamW. Prints one JSON line: median step time, peak reserved and allocated bytes, device allocation
calls; writes the allocator's memory snapshot into OUTDIR. Must run in a fresh process: the allocator is chosen
before anything touches the GPU.
"""
import json
import os
import random
import statistics
import sys
import time


def main():
    model_name, allocator, outdir = sys.argv[1:4]
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "..", "python"))
    if allocator != "native":
        os.environ["HBMALLOC_BACKEND"] = "cuda"
        os.environ["HBMALLOC_CONF"] = "expandable_segments:True" if allocator == "hbmalloc-expandable" else ""
        import hbmalloc_torch
        hbmalloc_torch.use(os.environ["HBMALLOC_TORCH_LIB"])
    import torch
    torch.manual_seed(0)
    random.seed(0)
    dev = torch.device("cuda")
    # The same torch calls under either allocator: under hbmalloc they are routed to it (docs/PYTORCH.md).
    torch.cuda.memory._record_memory_history(max_entries=200000)

    if model_name == "resnet50":
        import torchvision
        model = torchvision.models.resnet50().to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

        def batch():
            return torch.randn(32, 3, 224, 224, device=dev), torch.randint(0, 1000, (32,), device=dev)

        def loss_fn(x, y):
            return torch.nn.functional.cross_entropy(model(x), y)
        steps = 20
    else:
        vocab, d = 50257, 768
        layer = torch.nn.TransformerEncoderLayer(d, 12, 4 * d, batch_first=True, norm_first=True)
        body = torch.nn.TransformerEncoder(layer, 12)
        emb, head = torch.nn.Embedding(vocab, d), torch.nn.Linear(d, vocab, bias=False)
        model = torch.nn.ModuleList([emb, body, head]).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def batch():
            s = random.randint(128, 1024)
            return torch.randint(0, vocab, (8, s), device=dev), torch.randint(0, vocab, (8, s), device=dev)

        def loss_fn(x, y):
            mask = torch.nn.Transformer.generate_square_subsequent_mask(x.shape[1], device=dev)
            h = body(emb(x), mask=mask, is_causal=True)
            return torch.nn.functional.cross_entropy(head(h).flatten(0, 1), y.flatten())
        steps = 30

    times = []
    for i in range(steps):
        x, y = batch()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(x, y)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        if i >= 3:  # warm-up steps excluded
            times.append(time.perf_counter() - t0)
        del x, y, loss

    snap = os.path.join(outdir, f"{model_name}-{allocator}.pickle")
    s = torch.cuda.memory_stats()
    peak_reserved, peak_alloc = s["reserved_bytes.all.peak"], s["allocated_bytes.all.peak"]
    dev_allocs = s.get("num_device_alloc", -1)
    torch.cuda.memory._dump_snapshot(snap)
    print(json.dumps({"model": model_name, "allocator": allocator, "median_step_s": statistics.median(times),
                      "peak_reserved": peak_reserved, "peak_allocated": peak_alloc, "device_allocs": dev_allocs,
                      "snapshot": snap}))


if __name__ == "__main__":
    main()
