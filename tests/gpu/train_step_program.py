"""A user's own training program, as stacktune's command workload runs it on a GPU host.

ResNet-18 on synthetic 224x224 images: a DataLoader with 4 worker processes passes float32
batches through /dev/shm (pinned memory, prefetch 4) into the GPU, then forward, backward and
an SGD step in bf16 autocast. Prints one JSON line per step, {"step_ms": ...} (stacktune's
command format), after a synchronised step. With /dev/shm too small for the workers' batches
it fails the way real training does: "RuntimeError: unable to allocate shared memory(shm)".

    python3 tests/gpu/train_step_program.py --steps 60 [--workers 4] [--batch 64]

PIN_MEMORY=0 in the environment turns pinned memory off, the way a job's own configuration
changes it: a real change with a known effect on one H200 (median step up, p99 down).
"""

import argparse
import json
import os
import time

import torch
import torchvision


class Images(torch.utils.data.Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return torch.rand(3, 224, 224, generator=g), i % 1000


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    device = torch.device("cuda")
    model = torchvision.models.resnet18(num_classes=1000).to(device).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loader = torch.utils.data.DataLoader(
        Images(args.steps * args.batch),
        batch_size=args.batch,
        num_workers=args.workers,
        pin_memory=os.environ.get("PIN_MEMORY", "1") != "0",
        prefetch_factor=4 if args.workers else None,
        persistent_workers=False,
    )
    loss_fn = torch.nn.CrossEntropyLoss()
    start = time.perf_counter()
    for batch, target in loader:
        images = batch.to(device, non_blocking=True).to(memory_format=torch.channels_last)
        labels = target.to(device, non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn(model(images), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        now = time.perf_counter()
        print(json.dumps({"step_ms": (now - start) * 1000.0}), flush=True)
        start = now


if __name__ == "__main__":
    main()
