"""Diagnostic: nystrom's skip convolution as banded matrix products (`sequence_conv`) against cuDNN's depthwise
conv2d, forward and backward in bf16 at the fa-paper shapes of Image, ListOps and Retrieval. On a CUDA machine:

    PYTHONPATH=. python3 scripts/nystrom_conv_bench.py

Prints the median milliseconds per forward+backward (`lra bench`'s `time_ms`) and the largest difference of the two
outputs; writes no record (speed claims come from `lra bench train`; docs/baselines.md has the figures of 2026-12-07,
taken with an earlier loop of its own: the mean of 20 calls).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attention_impls.nystrom import sequence_conv
from lra.bench.attention import time_ms

SHAPES = {"image": (256, 1024), "listops": (32, 2000), "retrieval": (64, 4000)}  # batch, tokens; 2 heads of 32
TAPS = 35


def cudnn(v: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return F.conv2d(v, w[:, None, :, None].to(v.dtype), padding=(TAPS // 2, 0), groups=w.shape[0])


def fwd_bwd_ms(fn, v: torch.Tensor, w: torch.Tensor) -> float:
    return time_ms(lambda: fn(v, w).float().sum().backward(), v.device.type, warmup_ms=25, rep_ms=100, grads=[v, w])


def main() -> None:
    for name, (batch, tokens) in SHAPES.items():
        v = torch.randn(batch, 2, tokens, 32, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        w = torch.randn(2, TAPS, device="cuda", requires_grad=True)
        ms = {label: fwd_bwd_ms(fn, v, w) for label, fn in (("banded", sequence_conv), ("cudnn", cudnn))}
        err = (sequence_conv(v, w).float() - cudnn(v, w).float()).abs().max().item()
        print(f"{name}: band {ms['banded']:.3f} ms, conv2d {ms['cudnn']:.3f} ms fwd+bwd, max diff {err:.2e}")


if __name__ == "__main__":
    main()
