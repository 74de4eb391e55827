"""An independent measure of two interpreters (e.g. two torch releases) on a small training step, to check what
`nvbench ab --a PY --b PY` says of them (issue 50): no harness code runs in the timed processes, only torch and
this file's own model. Each pair runs one process per side, in a seeded random order; each process builds a
small residual CNN, warms up, then times `--steps` training steps on one thread and prints its img/s. The answer
is B/A as the ratio of the sides' mean img/s, with a 95 % bootstrap interval over the pairs.

    python benchmarks/torch_release_ab.py --a /venv-2.12/bin/python --b /venv-2.13/bin/python --pairs 10

Run it with nothing else on the machine.
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys

CHILD = r"""
import sys, time, torch
torch.set_num_threads(1)
torch.manual_seed(0)
nn = torch.nn

class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.a, self.b = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.na, self.nb = nn.BatchNorm2d(c), nn.BatchNorm2d(c)
    def forward(self, x):
        return torch.relu(x + self.nb(self.b(torch.relu(self.na(self.a(x))))))

model = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), Block(32), nn.MaxPool2d(2), nn.Conv2d(32, 64, 1),
                      Block(64), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x, y = torch.randn(16, 3, 32, 32), torch.randint(0, 10, (16,))
steps = int(sys.argv[1])

def step():
    opt.zero_grad(set_to_none=True)
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()

for _ in range(10):
    step()
start = time.perf_counter()
for _ in range(steps):
    step()
print(16 * steps / (time.perf_counter() - start), torch.__version__)
"""


def one(python: str, steps: int) -> tuple[float, str]:
    out = subprocess.run([python, "-c", CHILD, str(steps)], capture_output=True, text=True, check=True).stdout.split()
    return float(out[0]), out[1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--a", required=True, help="side A's interpreter")
    p.add_argument("--b", required=True, help="side B's interpreter")
    p.add_argument("--pairs", type=int, default=10, help="processes per side (default: %(default)s)")
    p.add_argument("--steps", type=int, default=60, help="timed steps per process (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="order and bootstrap seed (default: %(default)s)")
    args = p.parse_args()
    rng = random.Random(args.seed)
    rates: dict[str, list[float]] = {"a": [], "b": []}
    versions = {}
    for pair in range(args.pairs):
        order = ["a", "b"]
        rng.shuffle(order)
        for side in order:
            rate, versions[side] = one(getattr(args, side), args.steps)
            rates[side].append(rate)
        print(f"pair {pair}: A {rates['a'][-1]:.1f}  B {rates['b'][-1]:.1f} img/s ({' then '.join(order)})", flush=True)
    ratio = statistics.fmean(rates["b"]) / statistics.fmean(rates["a"])
    boot = []
    for _ in range(10000):
        idx = [rng.randrange(args.pairs) for _ in range(args.pairs)]
        boot.append(statistics.fmean(rates["b"][i] for i in idx) / statistics.fmean(rates["a"][i] for i in idx))
    boot.sort()
    print(f"A torch {versions['a']}: median {statistics.median(rates['a']):.1f} img/s; "
          f"B torch {versions['b']}: median {statistics.median(rates['b']):.1f} img/s")
    print(f"B/A {ratio:.3f} [{boot[249]:.3f}, {boot[9749]:.3f}] (95 % bootstrap over {args.pairs} pairs)")


if __name__ == "__main__":
    sys.exit(main())
