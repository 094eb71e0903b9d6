"""The encoder's pooling modes against each other on the same weights: `mean` averages the real tokens, `mean_all`
averages every position with padding as zeros (Nystromformer's LRA code), so it is `mean` times the share of real
tokens, example by example."""

from __future__ import annotations

import pytest
import torch

from lra.model import Encoder
from lra.train.config import load_config
from tests.reference import TEST_SEED
from tests.toy_task import toy_config_path


def _encoder(tmp_path, pool: str) -> Encoder:
    config = load_config(toy_config_path(tmp_path), overrides=[f"model.pool={pool}", "model.dim=32", "model.heads=2"])
    torch.manual_seed(TEST_SEED)
    return Encoder(config.model, "naive", vocab_size=50, seq_len=12, attn_options={}).eval()


def test_mean_all_is_mean_scaled_by_the_share_of_real_tokens(tmp_path):
    g = torch.Generator().manual_seed(TEST_SEED)
    tokens = torch.randint(1, 50, (3, 12), generator=g)
    lengths = torch.tensor([12, 7, 2])
    tokens[torch.arange(12)[None, :] >= lengths[:, None]] = 0
    with torch.no_grad():
        mean, mean_all = _encoder(tmp_path, "mean")(tokens), _encoder(tmp_path, "mean_all")(tokens)
    assert mean.abs().min() > 0  # a non-trivial comparison
    torch.testing.assert_close(mean_all, mean * (lengths[:, None] / 12), rtol=1e-6, atol=1e-7)
    assert torch.equal(mean_all[0], mean[0])  # no padding: the same vector


@pytest.mark.parametrize("pool", ["mean", "mean_all"])
def test_pooling_ignores_what_the_padded_positions_hold(tmp_path, pool):
    """Padded positions are keys nobody attends and rows the pooling zeroes: their token ids do not matter."""
    encoder = _encoder(tmp_path, pool)
    tokens = torch.tensor([[5, 9, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0]])
    with torch.no_grad():
        base = encoder(tokens)
        assert torch.isfinite(base).all()
        encoder.embed.weight[0] = 100.0  # what a padding token would embed to, were it not masked
        torch.testing.assert_close(encoder(tokens), base)
