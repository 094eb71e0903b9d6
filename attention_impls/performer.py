"""`performer`: FAVOR+ attention (Choromanski et al. 2020, "Rethinking Attention with Performers").

What it approximates: softmax attention. exp(q.k * scale) equals E_w[phi(q) . phi(k)] for the positive random features

    phi(x) = exp(W x' - |x'|^2 / 2) / sqrt(m),   x' = x * scale^(1/2),   W: m Gaussian rows (m = nb_features)

so out_i = phi(q_i)^T (sum_j phi(k_j) v_j^T) / (phi(q_i)^T sum_j phi(k_j)) is an unbiased-kernel, renormalised
estimate of softmax attention that never forms the N x N matrix: cost O(N m d) time and O(m d) extra memory per head.
The rows of W are orthogonal within blocks of d (`ortho`, the "+" of FAVOR+) and scaled by the norms of independent
Gaussian vectors, so each row keeps the N(0, I) length distribution; the error falls as m grows. The QR factor is
sign-corrected (Q diag(sign R)) so its rows are uniform on the sphere; the authors' code omits this, and with
torch's Householder QR the uncorrected estimate is biased (measured at d=8: its error stalls near 8% from m=16K to
64K, against 1% with the fix).

Numerical stabiliser (as in the authors' code): the query features subtract each row's max of W x', the key features
the max over all real keys and features of that (batch, head); both constants cancel in the ratio. A small eps is
added to every feature before the 1/sqrt(m) (performer_pytorch's softmax_kernel: ratio * (exp(...) + eps)), so
denominators stay positive. Features and sums run in fp32 (fp64 for fp64 inputs) with autocast off.

Options: `nb_features` m; `ortho`; `pad_keys` ('excluded': padded keys get no weight; 'zeroed': as the reference code;
'kept': as HazyResearch/fly's; see below); `redraw_every` n: draw fresh features at the start of every n-th
training forward call, counting from the first (0 = never: keep the features drawn at construction); `kernel`:
'softmax' (FAVOR+) or 'relu' (the "generalized attention" phi(x) = relu(W x) + 1e-3); `eps`. Features come from
torch's global CPU RNG and live in a buffer (saved in checkpoints), so runs repeat under torch.manual_seed and eval is
deterministic.

Defaults are the FlashAttention recipe's reference code (github.com/mlpen/Nystromformer, LRA/code/):
- nb_features 256: lra_config.py, every task's "performer-256" entry, rp_dim 256.
- kernel 'softmax': attention_performer.py line 15 builds performer_pytorch's FastAttention with kernel_fn=nn.ReLU()
  but leaves generalized_attention at its default False, so FastAttention.forward runs softmax_kernel (FAVOR+) and
  ignores kernel_fn (performer_pytorch 0.14 to 1.1, performer_pytorch.py, class FastAttention); the config's
  kernel_type "relu" never takes effect.
- ortho True with Gaussian row norms: FastAttention's gaussian_orthogonal_random_matrix, ortho_scaling=0.
- redraw_every 0: FastAttention draws its projection once in __init__ (a buffer); only performer_pytorch's Performer
  wrapper redraws (feature_redraw_interval), and the reference calls FastAttention directly. (LRA's own
  make_fast_softmax_attention redraws on every call: redraw_every=1.)
- eps 1e-4: softmax_kernel(eps=1e-4). (LRA's numerical_stabilizer is 1e-6.)
Deviations kept: the reference divides q and k by d^(1/4) before softmax_kernel divides them by d^(1/4) again, so it
estimates exp(q.k / d), not exp(q.k / sqrt(d)) (a constant factor the learned projections absorb; here `scale`,
default 1/sqrt(d)); the key stabiliser there is the max over the whole batch (a constant that cancels); and padded keys
there are zeroed before the feature map, so each keeps the features of a zero key, phi(0) (estimating exp(q.0) = 1),
in the denominator, where here they get none. `pad_keys='zeroed'` with `scale=1/d` reproduces both (the default
`pad_keys='excluded'` keeps the softmax-over-real-keys semantics of every exact backend). The FlashAttention authors'
own baseline code (HazyResearch/fly, src/models/attention/performer_attention.py, which `--preset fly` follows) zeroes
only the padded values ("performer-pytorch chooses to zero out the value instead of the key"): each padded key keeps
its own content's features in the denominator and in the key stabiliser. `pad_keys='kept'` computes that; fly pads a
batch to its longest sequence, this suite to the task's length, so the padded keys counted can differ.

Padding (the default, excluded): padded keys get phi(k) = 0 and are left out of the key stabiliser, so they get no
weight at all. Padded query rows and rows with no real key are zero. There is no attention matrix, so there is no
attention dropout: the reference code applies none (attention_performer.py lines 19-23; nor does LRA's
performer_attention.py, which takes dropout_rate and never uses it), so a run asking for it trains without it and says
so (capabilities.dropout_reference; the record's attention_dropout_applied: false).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from attention_impls.base import AttentionBackend, Capabilities
from attention_impls.masking import safe_key_mask, score_dtype, zero_padded_inputs, zero_padded_outputs
from attention_impls.registry import register_backend

_KERNELS = ("softmax", "relu")
_PAD_KEYS = ("excluded", "zeroed", "kept")


def gaussian_features(
    nb_features: int, dim: int, ortho: bool, generator: torch.Generator | None = None
) -> torch.Tensor:
    """A (nb_features, dim) fp32 projection: orthogonal blocks of `dim` rows (or iid rows) with N(0, I) row norms."""
    if not ortho:
        return torch.randn(nb_features, dim, generator=generator)
    blocks = []
    for _ in range(math.ceil(nb_features / dim)):
        q, r = torch.linalg.qr(torch.randn(dim, dim, generator=generator))
        q = q * torch.sign(torch.diagonal(r))  # the sign fix makes q Haar-distributed: each row uniform on the sphere
        blocks.append(q.T)
    rows = torch.cat(blocks)[:nb_features]
    norms = torch.randn(nb_features, dim, generator=generator).norm(dim=1)
    return rows * norms[:, None]


@register_backend("performer")
class PerformerAttention(AttentionBackend):
    """FAVOR+ random-feature attention. Options: nb_features=256, ortho=True, redraw_every=0, kernel='softmax',
    eps=None (1e-4 for softmax, 1e-3 for relu), pad_keys='excluded' ('zeroed': the reference code's padded keys, 'kept':
    fly's)."""

    capabilities = Capabilities(
        exact=False,
        dropout=False,
        dropout_reference="mlpen/Nystromformer LRA/code/attention_performer.py: performer_pytorch FastAttention",
        notes="Choromanski et al. 2020; O(N m d)",
    )

    def __init__(
        self,
        *args,
        nb_features: int = 256,
        ortho: bool = True,
        redraw_every: int = 0,
        kernel: str = "softmax",
        eps: float | None = None,
        pad_keys: str = "excluded",
        **kwargs,
    ):
        super().__init__(*args, **kwargs)
        if nb_features < 1:
            raise ValueError(f"performer nb_features must be >= 1, got {nb_features}")
        if redraw_every < 0:
            raise ValueError(f"performer redraw_every must be >= 0 (0 = never redraw), got {redraw_every}")
        if kernel not in _KERNELS:
            raise ValueError(f"performer kernel must be one of {', '.join(_KERNELS)}, got {kernel!r}")
        self.nb_features = int(nb_features)
        self.ortho = bool(ortho)
        self.redraw_every = int(redraw_every)
        if pad_keys not in _PAD_KEYS:
            raise ValueError(f"performer pad_keys must be one of {', '.join(_PAD_KEYS)}, got {pad_keys!r}")
        self.kernel = kernel
        self.pad_keys = pad_keys
        self.eps = float(eps) if eps is not None else (1e-4 if kernel == "softmax" else 1e-3)
        if not self.eps > 0:
            raise ValueError(f"performer eps must be positive (it keeps denominators positive), got {eps}")
        self.training_calls = 0  # saved through get_extra_state
        self.register_buffer("features", gaussian_features(self.nb_features, self.head_dim, self.ortho))

    @torch.no_grad()
    def redraw_features(self) -> None:
        """Draw a fresh projection from the global CPU RNG (device-independent, so CPU and GPU runs agree)."""
        self.features.copy_(gaussian_features(self.nb_features, self.head_dim, self.ortho))

    def forward(self, q, k, v, key_padding_mask=None):
        if self.training and self.redraw_every > 0:
            if self.training_calls % self.redraw_every == 0:
                self.redraw_features()
            self.training_calls += 1
        content = k
        q, k, v = zero_padded_inputs(q, k, v, key_padding_mask)
        keys = safe_key_mask(key_padding_mask) if key_padding_mask is not None else None
        if self.pad_keys == "zeroed":
            keys = None  # padded keys are zero vectors now (values too): each keeps phi(0) in the denominator
        elif self.pad_keys == "kept":
            k, keys = content, None  # only the values are zeroed: padded keys keep their features in the denominator
        compute = score_dtype(q.dtype)
        with torch.autocast(device_type=q.device.type, enabled=False):
            w = self.features.to(compute)
            phi_q = self._phi(q.to(compute), w, None, is_query=True)
            phi_k = self._phi(k.to(compute), w, keys, is_query=False)
            kv = torch.matmul(phi_k.transpose(-2, -1), v.to(compute))  # (B, H, m, d_v)
            denom = torch.matmul(phi_q, phi_k.sum(dim=2).unsqueeze(-1))  # (B, H, N, 1), > 0 by the eps
            out = torch.matmul(phi_q, kv) / denom
        return zero_padded_outputs(out.to(v.dtype), key_padding_mask)

    def _phi(self, x: torch.Tensor, w: torch.Tensor, keys: torch.Tensor | None, is_query: bool) -> torch.Tensor:
        """Features (B, H, N, m) of queries or keys; padded keys (keys False) get all-zero features."""
        real = None if keys is None else keys[:, None, :, None]
        if self.kernel == "relu":
            phi = torch.relu(torch.matmul(x, w.T)) + self.eps
        else:
            x = x * self.scale**0.5
            proj = torch.matmul(x, w.T)  # (B, H, N, m)
            half_sq_norm = 0.5 * (x * x).sum(dim=-1, keepdim=True)
            if is_query:
                stab = proj.amax(dim=-1, keepdim=True)
            else:
                masked = proj if real is None else proj.masked_fill(~real, float("-inf"))
                stab = masked.amax(dim=(-2, -1), keepdim=True)
            phi = (torch.exp(proj - half_sq_norm - stab.detach()) + self.eps) / math.sqrt(self.nb_features)
        return phi if real is None else torch.where(real, phi, phi.new_zeros(()))

    def get_extra_state(self) -> dict[str, Any]:
        return {"training_calls": self.training_calls}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self.training_calls = int(state.get("training_calls", 0))

    def extra_repr(self) -> str:
        return (
            super().extra_repr() + f", nb_features={self.nb_features}, ortho={self.ortho}, "
            f"redraw_every={self.redraw_every}, kernel={self.kernel}, eps={self.eps}, pad_keys={self.pad_keys}"
        )
