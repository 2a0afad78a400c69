"""Are our generated Pathfinder images learnable at all? A small CNN as a control for the Transformer.

The `paper` Transformer memorises our Pathfinder-32 training images without generalising
(results/pathfinder/README.md). This trains a model family known to solve Pathfinder quickly — a
residual CNN whose dilated 3x3 convolutions (dilation 1, 2, 4, 8, twice) see the whole 32 x 32
image, max-pooled, 32 channels, batch norm — on images drawn straight from the generator
(`tasks.pathfinder_gen`, the split names and seed the data pipeline uses), with the label-preserving
flips and 90-degree rotations as augmentation, and reports training and validation accuracy per
epoch. If it generalises, the images carry the label in a learnable form and the Transformer's
failure lies on the model / training side.

    python scripts/pathfinder_cnn_check.py --difficulty easy --n-train 20000 --n-val 2000 --epochs 5

CPU is enough (about 4 minutes per epoch of 20,000 images on 2 cores); `--device cuda` uses a GPU.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from multiprocessing import Pool
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from lra import provenance  # noqa: E402
from tasks.pathfinder_gen import generate_into, params_for  # noqa: E402

CHUNK = 500


def _draw(job):
    params, seed, split, start, stop = job
    images = np.empty((stop - start, params.size, params.size), dtype=np.uint8)
    labels = generate_into(params, seed, split, range(start, stop), images)
    return images, labels


def draw(params, seed: int, split: str, n: int, workers: int) -> tuple[torch.Tensor, torch.Tensor]:
    """n images of a split as (n, 1, S, S) floats in [0, 1] and their labels."""
    jobs = [(params, seed, split, a, min(a + CHUNK, n)) for a in range(0, n, CHUNK)]
    if workers > 1:
        with Pool(workers) as pool:
            parts = pool.map(_draw, jobs)
    else:
        parts = [_draw(j) for j in jobs]
    images = np.concatenate([p[0] for p in parts])
    labels = np.concatenate([p[1] for p in parts])
    return torch.from_numpy(images).float().div(255).unsqueeze(1), torch.from_numpy(labels)


class Residual(nn.Module):
    def __init__(self, channels: int, dilation: int):
        super().__init__()
        conv = lambda: nn.Conv2d(channels, channels, 3, padding=dilation, dilation=dilation)  # noqa: E731
        self.body = nn.Sequential(conv(), nn.BatchNorm2d(channels), nn.ReLU(), conv(), nn.BatchNorm2d(channels))

    def forward(self, x):
        return torch.relu(x + self.body(x))


def make_cnn(channels: int = 32) -> nn.Module:
    return nn.Sequential(nn.Conv2d(1, channels, 3, padding=1), nn.BatchNorm2d(channels), nn.ReLU(),
                         *[Residual(channels, d) for d in (1, 2, 4, 8, 1, 2, 4, 8)],
                         nn.AdaptiveMaxPool2d(1), nn.Flatten(), nn.Linear(channels, 2))


def augment(x: torch.Tensor, rng: np.random.Generator) -> torch.Tensor:
    """One random rotation by a multiple of 90 degrees and a random flip for the whole batch."""
    x = torch.rot90(x, int(rng.integers(4)), (2, 3))
    return x.flip(3) if rng.random() < 0.5 else x


def accuracy(model, x, y, batch=500) -> float:
    model.eval()
    with torch.no_grad():
        hits = sum((model(x[i:i + batch]).argmax(1) == y[i:i + batch]).sum().item() for i in range(0, len(x), batch))
    return hits / len(x)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=32, choices=(32, 64, 128, 256))
    parser.add_argument("--difficulty", default="hard", help="easy | intermediate | hard (contour 6 / 9 / 14)")
    parser.add_argument("--n-train", type=int, default=20000)
    parser.add_argument("--n-val", type=int, default=2000)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0, help="generator seed (the data pipeline's default is 0)")
    parser.add_argument("--train-seed", type=int, default=0,
                        help="seed of the initialisation, batch order and augmentation (whether and when the "
                             "CNN takes off from chance varies with it)")
    parser.add_argument("--workers", type=int, default=2, help="processes drawing the images")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default=None, help="JSON file for the per-epoch accuracies")
    args = parser.parse_args(argv)

    meta = provenance.collect()
    print(f"{meta['command']} | {meta['device']} | torch {meta['versions'].get('torch')}, triton "
          f"{meta['versions'].get('triton')} | {meta['date']} | git {meta['git_rev']}", flush=True)
    torch.manual_seed(args.train_seed)
    rng = np.random.default_rng(args.train_seed)
    params = params_for(args.size, args.difficulty)
    t0 = time.time()
    x, y = draw(params, args.seed, "train", args.n_train, args.workers)
    xv, yv = draw(params, args.seed, "val", args.n_val, args.workers)
    print(f"{args.n_train} training / {args.n_val} validation images ({args.size}px, {args.difficulty}) "
          f"drawn in {time.time() - t0:.0f} s; positives {y.float().mean():.3f} / {yv.float().mean():.3f}", flush=True)
    device = torch.device(args.device)
    x, y, xv, yv = x.to(device), y.to(device), xv.to(device), yv.to(device)
    model = make_cnn().to(device)
    opt = torch.optim.Adam(model.parameters(), args.lr)
    history = []
    for epoch in range(args.epochs):
        t0 = time.time()
        model.train()
        hits = 0
        for idx in torch.randperm(len(x), device=device).split(args.batch_size):
            out = model(augment(x[idx], rng))
            loss = nn.functional.cross_entropy(out, y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            hits += (out.argmax(1) == y[idx]).sum().item()
        row = {"epoch": epoch + 1, "train_acc": hits / len(x), "val_acc": accuracy(model, xv, yv),
               "seconds": time.time() - t0}
        history.append(row)
        print(f"epoch {row['epoch']}: train {row['train_acc']:.3f}  val {row['val_acc']:.3f}  "
              f"({row['seconds']:.0f} s)", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps({"provenance": meta, "args": vars(args), "history": history}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
