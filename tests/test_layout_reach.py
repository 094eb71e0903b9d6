"""layout_reach (the block pairs a stack of attention layers over a layout joins) against hand counts and a
breadth-first search, and the note `lra run` prints for a block-sparse model."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attention_impls import build_attention
from attention_impls.layouts import build_layout, layout_reach
from attention_impls.registry import layout_notes
from tests.reference import TEST_SEED


def test_reach_of_butterfly_local_and_global_by_hand():
    # butterfly over 8 blocks joins indices that differ in at most one of 3 bits: 4 of 8 partners per row; two
    # layers reach two bits (1 + 3 + 3 = 7 of 8), three layers all of them
    fly = build_layout("butterfly", 8)
    assert [layout_reach(fly, hops) for hops in (1, 2, 3)] == pytest.approx([4 / 8, 7 / 8, 1.0])
    # a band of 3 over 5 blocks: |i - j| <= 1 is 5 + 4 + 4 = 13 of 25 pairs; two layers |i - j| <= 2: 19 of 25
    band = build_layout({"local": {"width": 3}}, 5)
    assert [layout_reach(band, hops) for hops in (1, 2, 4)] == pytest.approx([13 / 25, 19 / 25, 1.0])
    # one global block over 4: row 0 and column 0 (7 of 16); every pair through block 0 in two layers
    hub = build_layout("global", 4)
    assert [layout_reach(hub, hops) for hops in (1, 2)] == pytest.approx([7 / 16, 1.0])


def test_reach_takes_the_union_of_the_heads():
    # head 0 keeps (0, 1) only, head 1 (1, 2) only: one layer joins 2 of 9 pairs, two layers add (0, 2) through the
    # other head's pair, as a layer's output projection mixes the heads
    layout = torch.zeros(2, 3, 3, dtype=torch.bool)
    layout[0, 0, 1] = layout[1, 1, 2] = True
    assert layout_reach(layout, 1) == pytest.approx(2 / 9)
    assert layout_reach(layout, 2) == pytest.approx(3 / 9)


def _reach_by_search(layout: torch.Tensor, hops: int) -> float:
    step = layout.any(0).tolist()
    n, joined = len(step), 0
    for start in range(n):
        seen, frontier = set(), {start}
        for _ in range(hops):
            frontier = {j for i in frontier for j in range(n) if step[i][j]}
            seen |= frontier
        joined += len(seen)
    return joined / n**2


@pytest.mark.parametrize("trial", range(4))
def test_reach_equals_a_breadth_first_search_on_random_layouts(trial):
    g = torch.Generator().manual_seed(TEST_SEED + trial)
    n = int(torch.randint(3, 13, (1,), generator=g))
    layout = torch.rand(2, n, n, generator=g) < 0.15
    for hops in (1, 2, 3):
        assert layout_reach(layout, hops) == pytest.approx(_reach_by_search(layout, hops))


def test_reach_refuses_what_it_cannot_answer():
    with pytest.raises(ValueError, match="square layout .* 3 x 4 blocks"):
        layout_reach(build_layout("dense", 3, 4), 2)
    with pytest.raises(ValueError, match="hops must be >= 1"):
        layout_reach(build_layout("dense", 3), 0)


def test_layout_notes_name_density_and_reach_at_the_models_depth():
    def backend(name: str, **options) -> nn.Module:
        return build_attention(name, heads=2, head_dim=16, seq_len=1024, options=options)

    two_layers = nn.ModuleList([backend("block_sparse_flash"), backend("block_sparse_flash")])
    (note,) = layout_notes(two_layers, 1024)  # 8 blocks of 128: density 4/8, reach 7/8 (hand count above)
    assert "block_sparse_flash layout butterfly: 8 blocks of 128 at 1,024 tokens, 50% of the block pairs kept" in note
    assert "2 attention layers join 88% of them" in note
    three = nn.ModuleList([*two_layers, backend("naive")])  # the layers counted are every attention layer's
    assert "3 attention layers join 100%" in layout_notes(three, 1024)[0]
    assert layout_notes(nn.ModuleList([backend("naive")]), 1024) == []
    glob = nn.ModuleList([backend("block_sparse_flash", layout="butterfly,global")] * 2)
    assert "butterfly + global: 8 blocks" in layout_notes(glob, 1024)[0]
