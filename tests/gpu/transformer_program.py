"""A user's own GPU-bound training program, as stacktune's live command runs it on a GPU host.

A bf16 transformer (8 pre-norm layers, width 1024, sequence 1024, batch 16) trained with AdamW
on random tokens' embeddings: forward, backward and an optimizer step, about 51 ms a step on
one H200 at its 700 W limit, where the GPU draws close to its power cap. Prints one JSON line
per step, {"step_ms": ...} (stacktune's command format), after a synchronised step, until
--steps steps are done or SIGTERM.

    python3 tests/gpu/transformer_program.py --steps 100000 [--batch 16] [--layers 8]
"""

import argparse
import json
import signal
import time

import torch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100000)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--seq", type=int, default=1024)
    args = parser.parse_args()
    stop = []
    signal.signal(signal.SIGTERM, lambda _s, _f: stop.append(1))
    dev = torch.device("cuda")
    torch.manual_seed(0)
    layers = [
        torch.nn.TransformerEncoderLayer(
            d_model=args.width,
            nhead=16,
            dim_feedforward=4 * args.width,
            dropout=0.0,
            batch_first=True,
            norm_first=True,
        )
        for _layer in range(args.layers)
    ]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(args.width, args.width)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(args.batch, args.seq, args.width, device=dev)
    target = torch.randn(args.batch, args.seq, args.width, device=dev)
    start = time.perf_counter()
    for _step in range(args.steps):
        if stop:
            break
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            out = model(x)
        loss = torch.nn.functional.mse_loss(out.float(), target)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        now = time.perf_counter()
        print(json.dumps({"step_ms": (now - start) * 1000.0}), flush=True)
        start = now


if __name__ == "__main__":
    main()
