#!/usr/bin/env python3
"""Writes a trace of training steps of a chosen length, for measuring the step plan's planning at sizes the
recorded traces do not reach (issue #38 item 6: 1,000, 10,000 and 100,000 allocations per step).

The shape is a training step's, as the recorded CPU trace (examples/cpu-transformer-trainstep.trace) has it:
parameters allocated once before the first step; per layer, forward, an activation kept until that layer's backward
and two temporaries freed at once; per layer, backward (last layer first), two temporaries freed at once, the
layer's activation freed, and the layer's gradient allocated, kept into the next step and freed there by
optimizer.zero_grad() (set_to_none, torch's default since 2.0: every gradient freed in one loop, before the forward:
the tensors carried over a step boundary). Sizes are 512-byte multiples from 4 KiB to 1 MiB, the same for a
layer in every step (a fixed seed). Six allocations per layer: --allocs 100000 gives 16,666 layers.

usage: bench/synth_steps.py --allocs N [--steps S] > step.trace
"""
import argparse
import random
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--allocs", type=int, required=True, help="allocations per step (rounded down to 6 per layer)")
    ap.add_argument("--steps", type=int, default=5, help="steps (default 5: a warm-up, two recorded, two served)")
    args = ap.parse_args()
    if args.allocs < 6 or args.steps < 1:
        sys.exit("synth_steps.py: --allocs must be at least 6 and --steps at least 1")
    layers = args.allocs // 6
    rnd = random.Random(38)
    size = lambda: 512 * rnd.randint(8, 2048)
    act = [size() for _ in range(layers)]
    tmp = [(size(), size(), size(), size()) for _ in range(layers)]
    grad = [size() for _ in range(layers)]
    out = sys.stdout
    out.write("# bench/synth_steps.py --allocs %d --steps %d: %d layers, 6 allocations each per step\n"
              % (args.allocs, args.steps, layers))
    ids = iter(range(1 << 62))
    for i in range(layers):  # parameters, kept for good
        out.write("a %d %d\n" % (next(ids), grad[i]))
    held_grad = [None] * layers
    for _ in range(args.steps):
        held_act = [None] * layers
        for i in range(layers):  # zero_grad
            if held_grad[i] is not None:
                out.write("f %d\n" % held_grad[i])
        for i in range(layers):
            held_act[i] = next(ids)
            out.write("a %d %d\n" % (held_act[i], act[i]))
            for t in tmp[i][:2]:
                k = next(ids)
                out.write("a %d %d\nf %d\n" % (k, t, k))
        for i in reversed(range(layers)):
            for t in tmp[i][2:]:
                k = next(ids)
                out.write("a %d %d\nf %d\n" % (k, t, k))
            out.write("f %d\n" % held_act[i])
            held_grad[i] = next(ids)
            out.write("a %d %d\n" % (held_grad[i], grad[i]))


if __name__ == "__main__":
    main()
