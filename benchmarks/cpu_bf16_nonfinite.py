"""Where a bf16 CPU cell's loss turns NaN: resnet50, batch 4, NHWC, bf16 autocast on the CPU, SGD at lr 0.001,
one fresh process per seed. Each training step checks every module's output and every parameter's gradient and
names the first that is non-finite (docs/performance.md, the smoke run: at 16 px it is the gradient of
`layer4.0.conv2.weight`, the stride-2 3x3 convolution whose input is then 1x1).

    OMP_NUM_THREADS=1 python benchmarks/cpu_bf16_nonfinite.py --size 16 --seeds 2 5 6    # most non-finite
    OMP_NUM_THREADS=1 python benchmarks/cpu_bf16_nonfinite.py --size 24 --seeds 2 5 6 7  # finite
    OMP_NUM_THREADS=1 python benchmarks/cpu_bf16_nonfinite.py --size 16 --seeds 2 5 6 --no-onednn  # finite

It is not deterministic: the same seed can come out finite in one process and not in the next.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def one(size: int, seed: int, steps: int, onednn: bool) -> str:
    """Train `steps` steps in this process; the first non-finite output or gradient, or `finite`."""
    import torch

    sys.path.insert(0, str(ROOT))
    from harness.models import build_model

    torch.manual_seed(seed)
    torch.backends.mkldnn.enabled = onednn
    model = build_model("resnet50", num_classes=10, zero_init_residual=True, search_dirs=())
    model = model.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.001, momentum=0.875, weight_decay=3.05e-5)
    x = torch.randn(4, 3, size, size).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (4,))
    names = {m: n for n, m in model.named_modules()}
    bad: list[str] = []

    def hook(module, _inputs, out):
        if not bad and isinstance(out, torch.Tensor) and not torch.isfinite(out).all():
            bad.append(f"output of {names[module] or 'the model'}")

    for module in model.modules():
        module.register_forward_hook(hook)
    for step in range(steps):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        if not bad:
            loss.backward()
            bad += [f"gradient of {n}" for n, p in model.named_parameters()
                    if p.grad is not None and not torch.isfinite(p.grad).all()][:1]
        if bad:
            return f"non-finite at step {step}: {bad[0]}"
        opt.step()
    return "finite"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=int, default=16, help="image side in px (default: 16, the smoke's old crop)")
    p.add_argument("--seeds", type=int, nargs="+", default=[2, 5, 6], help="one process each (default: 2 5 6)")
    p.add_argument("--steps", type=int, default=15, help="training steps a process (default: 15)")
    p.add_argument("--no-onednn", action="store_true", help="torch.backends.mkldnn.enabled = False")
    p.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child is not None:
        print(one(args.size, args.child, args.steps, not args.no_onednn))
        return
    for seed in args.seeds:
        argv = [sys.executable, __file__, "--child", str(seed), "--size", str(args.size), "--steps", str(args.steps)]
        out = subprocess.run(argv + ["--no-onednn"] * args.no_onednn, capture_output=True, text=True, check=False,
                             timeout=600)
        print(f"{args.size} px, seed {seed}: {out.stdout.strip() or out.stderr.strip().splitlines()[-1]}")


if __name__ == "__main__":
    main()
