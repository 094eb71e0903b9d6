"""`flash` and `block_sparse_flash` under torch.compile (CPU, TRITON_INTERPRET=1): a small attention model traces
into one graph with no graph break (the kernels are torch.library custom ops with fake implementations and an
autograd formula) and the compiled model gives the same output and gradients as eager, with attention dropout and
key padding."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attention_impls import build_attention
from tests.reference import TEST_SEED, generator, right_padded_mask

pytest.importorskip("triton")


class TinyAttention(nn.Module):
    """Projection, attention by a backend, output projection: what the model's attention block does."""

    def __init__(self, backend: str, heads=2, head_dim=16, seq_len=40, dropout=0.1, **options) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, head_dim
        self.qkv = nn.Linear(32, 3 * heads * head_dim)
        self.proj = nn.Linear(heads * head_dim, 32)
        self.attn = build_attention(backend, heads=heads, head_dim=head_dim, seq_len=seq_len, dropout=dropout,
                                    options=options)  # fmt: skip

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        b, n, _ = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        out = self.attn(q, k, v, mask).transpose(1, 2).reshape(b, n, -1)
        return self.proj(out).square().mean()


def _step(model, x, mask):
    torch.manual_seed(TEST_SEED)  # the same dropout state draws in both runs
    loss = model(x, mask)
    return loss.detach(), torch.autograd.grad(loss, list(model.parameters()))


@pytest.mark.parametrize(
    "backend,options", [("flash", {}), ("block_sparse_flash", {"layout": "butterfly", "block": 16})]
)
def test_compiled_model_has_no_graph_breaks_and_matches_eager(backend, options):
    torch.manual_seed(TEST_SEED)
    model = TinyAttention(backend, **options).train()
    gen = generator(21)
    x = torch.randn(2, 40, 32, generator=gen)
    mask = right_padded_mask([40, 23], 40)
    model.attn.prepare(torch.float32, x.device)  # what the trainer does before compiling (block lists; flash: none)
    # fullgraph=True: one graph for the whole step, any graph break is an error (stricter than counting them).
    # Compiled first, from cold caches, as a compiled run starts: no eager call has built anything.
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    loss, grads = _step(compiled, x, mask)
    eager_loss, eager_grads = _step(model, x, mask)
    assert torch.equal(loss, eager_loss)
    for got, want in zip(grads, eager_grads):
        assert torch.equal(got, want)
