"""model.pos_emb=rope2d: queries and keys turned by their pixel's row and column. The angles and one rotation
evaluated by hand; a score that depends on the two pixels' offset alone (fp64); the whole classifier unchanged when
an image's content moves on a black canvas (black pixels are padding), packed or not; a model that moves between
image sizes with nothing to resize; the refusals."""

from __future__ import annotations

import math

import pytest
import torch

from lra.core.errors import ConfigError, RunSetupError
from lra.model import build_model, load_init
from lra.positions import grid_rotary_angles, rotate
from lra.train.config import config_hash, load_config
from tests.reference import TEST_SEED

SHAPE = dict(vocab_size=257, num_classes=2, pair=False)


def test_the_angles_are_row_then_column_times_each_frequency_as_hand_evaluated():
    angles = grid_rotary_angles(16, 8)  # a 4 x 4 image, head dim 8: f = 2 frequencies, 1 and 100^(-1/2) = 0.1
    assert angles.shape == (16, 4)
    assert angles[2 * 4 + 3].tolist() == pytest.approx([2.0, 0.2, 3.0, 0.3])  # row 2, column 3
    assert angles[1].tolist() == pytest.approx([0.0, 0.0, 1.0, 0.1])  # row 0, column 1


def test_one_rotation_as_hand_evaluated():
    # a 2 x 2 image, head dim 4: one frequency (1); the pair (x0, x2) turns by the row, (x1, x3) by the column
    angles = grid_rotary_angles(4, 4)
    q = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]], dtype=torch.float64)
    where = torch.tensor([2, 1])  # pixel (1, 0), then pixel (0, 1)
    a = angles[where]
    got = rotate(q, a.cos(), a.sin())
    c, s = math.cos(1.0), math.sin(1.0)
    assert got.tolist() == [pytest.approx([c, 0.0, s, 0.0]), pytest.approx([0.0, c, 0.0, s])]


def test_a_score_depends_on_the_pixels_offset_alone():
    side, d = 8, 16
    angles = grid_rotary_angles(side * side, d)
    g = torch.Generator().manual_seed(TEST_SEED)
    q, k = torch.randn(2, d, generator=g, dtype=torch.float64).unbind(0)

    def score(p, p2):
        a, b = angles[p[0] * side + p[1]], angles[p2[0] * side + p2[1]]
        return float(rotate(q, a.cos(), a.sin()) @ rotate(k, b.cos(), b.sin()))

    base = score((1, 2), (4, 3))
    assert score((3, 5), (6, 6)) == pytest.approx(base, rel=1e-12, abs=1e-12)  # both moved by (2, 3)
    assert score((1, 2), (4, 4)) != pytest.approx(base, rel=1e-6)  # another offset, another score
    assert score((0, 0), (0, 0)) == pytest.approx(float(q @ k), rel=1e-12)  # the same pixel: no turn between them
    a = angles[9]
    assert rotate(q, a.cos(), a.sin()).norm() == pytest.approx(float(q.norm()), rel=1e-12)


def _model(side: int, *sets: str, pack: int = 0, backend: str = "naive"):
    config = load_config("pathfinder", "tiny", ["model.pos_emb=rope2d", "model.dropout=0", *sets])
    if pack:
        config = config.with_settings(["model.pack_tokens=true"])
    model = build_model(config, backend, seq_len=side * side, pack_length=pack, **SHAPE).double().eval()
    angles = grid_rotary_angles(side * side, model.encoder.blocks[0].attn.head_dim)  # the tables in fp64 (fp32 in
    model.encoder.rot_cos, model.encoder.rot_sin = angles.cos(), angles.sin()  # a run: turns exact to ~1e-7)
    return model


@pytest.mark.parametrize("pool", ["mean", "mean_all", "cls"])
def test_the_classifier_is_unchanged_when_the_content_moves_on_its_black_canvas(pool):
    torch.manual_seed(TEST_SEED)
    plain = _model(12, f"model.pool={pool}")
    packed = _model(12, f"model.pool={pool}", pack=40)
    packed.load_state_dict(plain.state_dict())
    assert not any("pos" in name for name in plain.state_dict())  # nothing learned about absolute places
    g = torch.Generator().manual_seed(TEST_SEED)
    content = torch.randint(1, 257, (3, 5, 5), generator=g)
    content[torch.rand(3, 5, 5, generator=g) < 0.3] = 0
    images = torch.zeros(2, 3, 12, 12, dtype=torch.long)
    images[0, :, 1:6, 2:7] = content
    images[1, :, 6:11, 4:9] = content  # the same strokes 5 rows down, 2 columns right
    first, moved = images.reshape(2, 3, 144).unbind(0)
    with torch.no_grad():
        want = plain(first)
        if pool == "cls":  # [CLS] sits at pixel (0, 0)'s angle: its view of the content moves with it
            assert not torch.allclose(plain(moved), want, rtol=1e-6, atol=1e-9)
            return
        torch.testing.assert_close(plain(moved), want, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(packed(moved), want, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(packed(first), want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("backend", ["flash", "block_sparse_flash"])
def test_our_kernels_take_the_turned_queries_and_keys_of_a_packed_model(backend):
    """The Triton kernels (fp32, the CPU interpreter) on rope2d's turned, packed queries and keys give naive's output
    (block_sparse_flash with a layout that keeps every block of this short sequence)."""
    torch.manual_seed(TEST_SEED)
    sets = ("model.pool=mean_all", "model.dim=32", "model.heads=2")
    want_model = _model(12, *sets, pack=48)
    got_model = _model(12, *sets, pack=48, backend=backend).float()
    got_model.load_state_dict(want_model.state_dict())
    g = torch.Generator().manual_seed(TEST_SEED + 3)
    tokens = torch.randint(1, 257, (3, 144), generator=g)
    tokens[torch.rand(3, 144, generator=g) < 0.7] = 0
    with torch.no_grad():
        torch.testing.assert_close(got_model(tokens).double(), want_model(tokens), rtol=2e-5, atol=2e-5)


def test_learned_positions_see_the_move_where_rope2d_does_not():
    torch.manual_seed(TEST_SEED)
    config = load_config("pathfinder", "tiny", ["model.pos_emb=learned", "model.pool=mean", "model.dropout=0"])
    model = build_model(config, "naive", seq_len=144, **SHAPE).double().eval()
    images = torch.zeros(2, 1, 12, 12, dtype=torch.long)
    images[0, 0, 1:4, 1:4] = 9
    images[1, 0, 5:8, 6:9] = 9
    with torch.no_grad():
        first, moved = (model(x.reshape(1, 144)) for x in images.unbind(0))
    assert not torch.allclose(first, moved, rtol=1e-6)


def test_a_rope2d_model_moves_to_a_larger_image_with_nothing_to_resize():
    torch.manual_seed(TEST_SEED)
    small, large = _model(16), _model(32)
    assert load_init(large, dict(small.state_dict())) == []
    tokens = torch.zeros(1, 32, 32, dtype=torch.long)
    tokens[0, 3:9, 4:8] = 7
    with torch.no_grad():  # the same strokes on the corner of a canvas four times as large: the same output
        want = small(tokens[:, :16, :16].reshape(1, 256))
        torch.testing.assert_close(large(tokens.reshape(1, 1024)), want, rtol=1e-10, atol=1e-12)


def test_init_from_learned_positions_into_rope2d_is_refused():
    torch.manual_seed(TEST_SEED)
    learned = build_model(load_config("pathfinder", "tiny", ["model.pos_emb=learned"]), "naive", seq_len=256, **SHAPE)
    with pytest.raises(RunSetupError, match="'encoder.pos' is not in this model; the architectures differ"):
        load_init(_model(16), dict(learned.state_dict()))


def test_rope2d_refuses_a_non_square_sequence_or_a_head_dim_it_cannot_split():
    with pytest.raises(ConfigError, match="rope2d needs a square image and a head dim divisible by 4, got 20 tokens"):
        grid_rotary_angles(20, 8)
    with pytest.raises(ConfigError, match="got 256 tokens and head dim 6"):
        _model(16, "model.dim=24", "model.heads=4")
    config = load_config("listops", "tiny", ["model.pos_emb=rope2d"])
    with pytest.raises(ConfigError, match="square image"):
        build_model(config, "naive", vocab_size=20, seq_len=128, num_classes=10, pair=False)


def test_rope2d_is_a_setting_of_its_own_in_the_config_hash():
    base = load_config("pathfinder", "curriculum")
    assert config_hash(base) != config_hash(load_config("pathfinder", "curriculum", ["model.pos_emb=rope2d"]))
    with pytest.raises(ConfigError, match="model.pos_emb = 'rope3d' is not valid"):
        load_config("pathfinder", "curriculum", ["model.pos_emb=rope3d"])
