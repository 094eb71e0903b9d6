"""`nystrom`: Nystrom-approximated softmax attention (Xiong et al. 2021, "Nystromformer").

What it approximates: softmax attention S V, S = softmax(Q K^T * scale), by the Nystrom method with m landmarks.
Landmark queries Q~ and keys K~ are segment means of the queries and keys; then

    S V  ~  softmax(Q K~^T) . pinv(softmax(Q~ K~^T)) . (softmax(Q~ K^T) V)
            (N x m)            (m x m)                  (m x N)(N x d)

with the Moore-Penrose pseudo-inverse computed by the paper's iteration (Razavi et al. 2014, 6 iterations in the
authors' code): Z <- Z (13 I - A Z (15 I - A Z (7 I - A Z))) / 4 from Z0 = A^T / (||A||_1 ||A||_inf). Cost O(N m d)
time and O(N m) memory per head (plus O(m^3) per iteration), instead of O(N^2). With as many landmarks as tokens the
three kernels are all S, and the result is S pinv(S) S V = S V (up to the iteration's convergence).

Options: `num_landmarks` m (clamped to N), `pinv_iterations`, `conv_kernel_size` (None = off): a depthwise
convolution over the sequence of V per head, added to the output as a skip connection (odd sizes only, so it stays
centred). Defaults are the authors' LRA code (github.com/mlpen/Nystromformer, LRA/code/): num_landmarks 64 and
conv_kernel_size 35 from lra_config.py's "nystrom-64" entry of every task (the README's model for its LRA runs);
pinv_iterations 6 from attention_nystrom.py, iterative_inv(n_iter=6). Z0 there is A^T / max column sum over the
batch (init_option "original"); here A^T / (||A||_1 ||A||_inf) per matrix, the same for row-stochastic A up to the
max taken per matrix.

Padding and landmarks: segments split each row's real tokens into m near-equal contiguous runs (token of rank r out
of L real ones goes to segment floor(r m / L)), so landmarks are means of real tokens only and any N works, odd or
not divisible by m. The authors' code instead cuts the padded sequence into equal segments and lets the zeroed
padding dilute the means; here a row with fewer real tokens than m gets L one-token landmarks, and its empty ones are
removed exactly (masked out of both softmaxes over landmarks, identity rows in the m x m matrix). Padded keys get -inf
in softmax(Q~ K^T) and the convolution sees zeroed padded values, so padded keys get no weight. Padded query rows and
rows with no real key are zero; padded positions are replaced by zeros on entry (a selection, so a NaN there stays
out of the landmark means). The whole computation runs in fp32 (fp64 for fp64 inputs) with autocast off: the
pseudo-inverse iteration is fragile in low precision. There is no N x N matrix to drop, so there is no attention
dropout, and the authors' code applies none (attention_nystrom.py, NystromAttention.forward): a run asking for it
trains without it and says so (capabilities.dropout_reference; the record's attention_dropout_applied: false).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from attention_impls.base import AttentionBackend, Capabilities
from attention_impls.masking import (
    masked_softmax,
    safe_key_mask,
    score_dtype,
    zero_padded_inputs,
    zero_padded_outputs,
)
from attention_impls.registry import register_backend
from lra.core.numbers import ceil_div


def iterative_pinv(mat: torch.Tensor, iterations: int = 6) -> torch.Tensor:
    """Moore-Penrose pseudo-inverse of a batch of square matrices by the Nystromformer paper's iteration."""
    eye = torch.eye(mat.shape[-1], dtype=mat.dtype, device=mat.device)
    col = mat.abs().sum(dim=-2).amax(dim=-1, keepdim=True)[..., None]  # ||A||_1
    row = mat.abs().sum(dim=-1).amax(dim=-1, keepdim=True)[..., None]  # ||A||_inf
    z = mat.transpose(-2, -1) / (col * row)
    for _ in range(iterations):
        az = torch.matmul(mat, z)
        z = 0.25 * torch.matmul(z, 13 * eye - torch.matmul(az, 15 * eye - torch.matmul(az, 7 * eye - az)))
    return z


def segment_means_matrix(real: torch.Tensor, num_segments: int, dtype: torch.dtype) -> torch.Tensor:
    """(B, m, N) weights: row s averages the real tokens of segment s (the s-th of m near-equal runs of each row's
    real tokens, in order); an empty segment's row is all zero."""
    counts_real = real.sum(dim=1, keepdim=True).clamp(min=1)  # (B, 1)
    rank = real.long().cumsum(dim=1) - 1  # rank of each real token among its row's real tokens
    seg = torch.div(rank * num_segments, counts_real, rounding_mode="floor")
    onehot = (seg[:, None, :] == torch.arange(num_segments, device=real.device)[None, :, None]) & real[:, None, :]
    weights = onehot.to(dtype)
    return weights / weights.sum(dim=-1, keepdim=True).clamp(min=1)


def sequence_conv(v: torch.Tensor, taps: torch.Tensor, block: int = 64) -> torch.Tensor:
    """out[b, h, i] = sum_t taps[h, t] v[b, h, i + t - k // 2] (zeros outside 0..N-1): the depthwise k x 1
    convolution over the sequence that nn.Conv2d(groups=heads) computes, as matrix products instead.

    Each block of `block` outputs reads a window of block + k - 1 inputs through one banded (block x window) matrix
    per head, shared by all blocks, so the work runs on the matrix units. At k = 35, bf16, forward and backward, on
    an H100: 1.42 ms against cuDNN's depthwise conv2d's 6.75 at Image's shape (256 x 2 heads x 1,024 x 32), the
    same (1.51 / 1.56) at ListOps' (docs/baselines.md)."""
    b, h, n, d = v.shape
    k = taps.shape[-1]
    half, blocks = k // 2, ceil_div(n, block)
    padded = F.pad(v, (0, 0, half, half + blocks * block - n))
    windows = padded.unfold(2, block + k - 1, block)  # (B, H, blocks, d, window)
    offset = torch.arange(block + k - 1, device=v.device)[None, :] - torch.arange(block, device=v.device)[:, None]
    band = taps[:, offset.clamp(0, k - 1)] * ((offset >= 0) & (offset < k)).to(taps.dtype)  # (H, block, window)
    out = torch.matmul(band[None, :, None].to(v.dtype), windows.transpose(-2, -1))  # (B, H, blocks, block, d)
    return out.reshape(b, h, blocks * block, d)[:, :, :n]


@register_backend("nystrom")
class NystromAttention(AttentionBackend):
    """Nystromformer attention. Options: num_landmarks=64, pinv_iterations=6, conv_kernel_size=35 (None: off)."""

    capabilities = Capabilities(
        exact=False,
        dropout=False,
        dropout_reference="mlpen/Nystromformer LRA/code/attention_nystrom.py has none",
        notes="Xiong et al. 2021; O(N m d)",
    )

    def __init__(
        self, *args, num_landmarks: int = 64, pinv_iterations: int = 6, conv_kernel_size: int | None = 35, **kwargs
    ):
        super().__init__(*args, **kwargs)
        if num_landmarks < 1:
            raise ValueError(f"nystrom num_landmarks must be >= 1, got {num_landmarks}")
        if pinv_iterations < 0:
            raise ValueError(f"nystrom pinv_iterations must be >= 0, got {pinv_iterations}")
        if conv_kernel_size is not None and (conv_kernel_size < 1 or conv_kernel_size % 2 == 0):
            raise ValueError(
                f"nystrom conv_kernel_size must be a positive odd number (the authors' LRA runs used 35) or null "
                f"for no convolution, got {conv_kernel_size}"
            )
        self.num_landmarks = int(num_landmarks)
        self.pinv_iterations = int(pinv_iterations)
        self.conv_kernel_size = conv_kernel_size
        if conv_kernel_size is not None:
            bound = conv_kernel_size**-0.5  # nn.Conv2d's default init for a depthwise (k x 1) kernel
            self.conv_weight = nn.Parameter(torch.empty(self.heads, 1, conv_kernel_size, 1).uniform_(-bound, bound))

    def forward(self, q, k, v, key_padding_mask=None):
        b, _, n, _ = q.shape
        q, k, v = zero_padded_inputs(q, k, v, key_padding_mask)
        m = min(self.num_landmarks, n)
        keys = safe_key_mask(key_padding_mask) if key_padding_mask is not None else None
        real = keys if keys is not None else torch.ones(b, n, dtype=torch.bool, device=q.device)
        compute = score_dtype(q.dtype)
        with torch.autocast(device_type=q.device.type, enabled=False):
            root = self.scale**0.5
            qc, kc, vc = q.to(compute) * root, k.to(compute) * root, v.to(compute)
            means = segment_means_matrix(real, m, compute)[:, None]  # (B, 1, m, N), shared by the heads
            q_land, k_land = torch.matmul(means, qc), torch.matmul(means, kc)  # (B, H, m, d)
            landmark = (means.sum(dim=-1) > 0)[:, :, None, :]  # (B, 1, 1, m): non-empty landmarks

            kernel_1 = masked_softmax(torch.matmul(qc, k_land.transpose(-2, -1)), landmark)
            kernel_2 = masked_softmax(torch.matmul(q_land, k_land.transpose(-2, -1)), landmark)
            eye = torch.eye(m, dtype=compute, device=q.device)
            kernel_2 = torch.where(landmark.transpose(-2, -1), kernel_2, eye)  # empty landmarks: identity rows
            kernel_3 = masked_softmax(torch.matmul(q_land, kc.transpose(-2, -1)), real[:, None, None, :])
            reduced = torch.matmul(kernel_3, vc)  # (B, H, m, d_v)
            out = torch.matmul(kernel_1, torch.matmul(iterative_pinv(kernel_2, self.pinv_iterations), reduced))
        out = out.to(v.dtype)
        if self.conv_kernel_size is not None:  # v's padded rows are zero already
            out = out + sequence_conv(v, self.conv_weight[:, 0, :, 0])
        return zero_padded_outputs(out, key_padding_mask)

    def extra_repr(self) -> str:
        return (
            super().extra_repr() + f", num_landmarks={self.num_landmarks}, pinv_iterations={self.pinv_iterations}, "
            f"conv_kernel_size={self.conv_kernel_size}"
        )
