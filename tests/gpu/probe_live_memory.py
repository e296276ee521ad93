"""Where a long-running train_step process's GPU memory goes (the live trial's workload).

Runs the train_step body of ``workloads/host/gpu.py`` (4 pre-norm transformer layers, width 1024,
bf16 autocast, AdamW) for ``--steps`` steps in one process, twice: keeping every step's
detached loss (as a block does, to check the first and the last) and keeping only the first
and the last. Prints the allocated and reserved GPU memory every ``--every`` steps and the
spread of the step time over windows of ``--window`` steps, so a leak and its cost show.

    python3 tests/gpu/probe_live_memory.py --steps 1500 --batch 32
"""

import argparse
import statistics
import time

import torch


def build(batch, seq=256, width=1024, layers=4):
    torch.manual_seed(0)
    blocks = [
        torch.nn.TransformerEncoderLayer(
            d_model=width, nhead=16, dim_feedforward=4 * width, dropout=0.0, batch_first=True, norm_first=True
        )
        for _layer in range(layers)
    ]
    model = torch.nn.Sequential(*blocks, torch.nn.Linear(width, width)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(batch, seq, width, device="cuda")
    target = torch.randn(batch, seq, width, device="cuda")
    return model, opt, x, target


def run(keep_all, steps, every, window, batch):
    model, opt, x, target = build(batch)
    losses = []
    first = [None]
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for i in range(steps):
        start.record()
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            out = model(x)
        loss = torch.nn.functional.mse_loss(out.float(), target)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if keep_all:
            losses.append(loss.detach())
        else:
            if first[0] is None:
                first[0] = loss.detach()
            losses[:] = [loss.detach()]
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
        if (i + 1) % every == 0:
            print(
                "  keep_all=%s step %5d allocated %8.1f MiB reserved %8.1f MiB"
                % (
                    keep_all,
                    i + 1,
                    torch.cuda.memory_allocated() / 2**20,
                    torch.cuda.memory_reserved() / 2**20,
                ),
                flush=True,
            )
    means = [statistics.fmean(times[k : k + window]) for k in range(window, len(times) - window + 1, window)]
    spread = 100.0 * statistics.stdev(means) / statistics.fmean(means) if len(means) > 1 else float("nan")
    print(
        "keep_all=%s: mean step %.3f ms, %d windows of %d steps, spread of window means %.2f%%"
        % (keep_all, statistics.fmean(times[window:]), len(means), window, spread),
        flush=True,
    )
    del model, opt, x, target, losses
    torch.cuda.empty_cache()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--every", type=int, default=300)
    parser.add_argument("--window", type=int, default=250)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()
    t0 = time.time()
    for keep_all in (False, True):
        run(keep_all, args.steps, args.every, args.window, args.batch)
    print("probe took %.1f s" % (time.time() - t0))


if __name__ == "__main__":
    main()
