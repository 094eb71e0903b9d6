"""The Image task against the code the FlashAttention paper's recipe came from (docs/image_fidelity.md).

`data.black_padding` feeds raw grey levels, as LRA's input pipeline and Xiong et al.'s Nystromformer code did, so
black pixels are padding. With `model.pool: mean_all` our classifier then computes what that code's model computes;
the reference here is that model's forward written out by hand in fp64 on our weights. The setting is opt-in and
leaves the hashes of existing Image records as they are.
"""

from __future__ import annotations

import json
import math
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from lra.cli.main import main
from lra.core.errors import RunSetupError
from lra.model import build_model
from lra.results.aggregate import is_canonical
from lra.train.config import config_hash, load_config
from lra.train.gate import gate
from tasks import image as I
from tasks.registry import build_task
from tests.reference import TEST_SEED
from tests.test_image import grey_reference

RECORDS = Path(__file__).resolve().parents[1] / "leaderboard" / "results"
N_IMAGES = 6  # per batch file; image i of a batch has i + 1 black pixels at the start of its first row


def write_batches(folder: Path) -> np.ndarray:
    """A cifar-10-batches-py, RGB in 40..255 but for the black pixels; returns every image (N, 32, 32, 3)."""
    rng = np.random.default_rng(TEST_SEED)
    folder.mkdir(parents=True)
    images = []
    for name in (*I.TRAIN_BATCHES, I.TEST_BATCH):
        rgb = rng.integers(40, 256, size=(N_IMAGES, 32, 32, 3)).astype(np.uint8)
        for i in range(N_IMAGES):
            rgb[i, 0, : i + 1] = 0
        batch = {b"labels": list(range(N_IMAGES)), b"data": rgb.transpose(0, 3, 1, 2).reshape(N_IMAGES, 3072)}
        (folder / name).write_bytes(pickle.dumps(batch, protocol=2))
        images.append(rgb)
    return np.concatenate(images)


def test_black_padding_gives_the_raw_grey_levels_from_the_same_cache(tmp_path):
    images = write_batches(tmp_path / "src")
    shifted = build_task("image", data_dir=tmp_path / "cache", source=str(tmp_path / "src"), num_val=6)
    raw = build_task("image", data_dir=tmp_path / "cache", num_val=6, black_padding=True)  # no source: reads the cache
    assert raw.cache().path == shifted.cache().path and raw.vocab_size == shifted.vocab_size == 257
    expected = {grey_reference(img).reshape(-1).tobytes(): img for img in images}
    seen = 0
    for split in ("train", "val", "test"):
        plain, black = shifted.load(split).tokens, raw.load(split).tokens
        np.testing.assert_array_equal(black, plain.astype(np.int64) - 1)
        for row, label in zip(black, raw.load(split).labels):
            zeros = np.flatnonzero(row == 0)
            assert zeros.tolist() == list(range(label + 1))  # exactly the black pixels are padding
            assert row.astype(np.int64).tobytes() in expected  # the rest: LRA's grey level, unshifted
            seen += 1
    assert seen == len(images)


def test_black_padding_leaves_the_stored_image_hashes_alone():
    """The curated fa-paper Image runs were stored before the setting: today's preset still hashes as they do."""
    checked = 0
    for path in sorted(RECORDS.glob("run__image__*__fa-paper__s*.json")):
        record = json.loads(path.read_text())
        assert config_hash(record["config"]) == record["config_hash"], path.name
        if is_canonical(record):  # the preset as it stands, any seed
            seed = record["config"]["train"]["seed"]
            assert config_hash(load_config("image", "fa-paper", [f"train.seed={seed}"])) == record["config_hash"]
            checked += 1
    assert checked >= 3
    plain = load_config("image", "fa-paper")
    assert config_hash(load_config("image", "fa-paper", ["data.black_padding=false"])) == config_hash(plain)
    assert config_hash(load_config("image", "fa-paper", ["data.black_padding=true"])) != config_hash(plain)


def test_backends_for_right_padded_masks_are_refused_up_front(tmp_path, capsys):
    config = load_config("image", "fa-paper", ["data.black_padding=true"])
    cpu = torch.device("cpu")
    gate(config, "naive", cpu), gate(config, "sdpa_math", cpu)  # these pass
    with pytest.raises(RunSetupError) as refused:
        gate(config, "linformer", cpu)
    refusal = str(refused.value)
    assert "right-padded key masks only" in refusal and "naive" in refusal and "sdpa_flash" in refusal
    gate(load_config("image", "fa-paper"), "linformer", cpu)  # right-padded data: it passes
    args = ["run", "image", "--preset", "fa-paper", "--attn", "linformer", "--device", "cpu", "--no-record"]
    assert main([*args, "--set", "data.black_padding=true", "--out", str(tmp_path / "run")]) == 2
    assert "right-padded key masks only" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
    with pytest.raises(ValueError, match="black_padding must be true or false"):
        build_task("image", data_dir=tmp_path, black_padding="yes")


def _layer_norm(x: torch.Tensor, ln: torch.nn.LayerNorm) -> torch.Tensor:
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + ln.eps) * ln.weight + ln.bias


def _linear(x: torch.Tensor, layer: torch.nn.Linear, rows: slice = slice(None)) -> torch.Tensor:
    return x @ layer.weight[rows].T + layer.bias[rows]


def reference_forward(model, tokens: torch.Tensor, heads: int) -> torch.Tensor:
    """Xiong et al.'s LRA model (LRA/code/model.py, attention.py, model_wrapper.py), written out on our weights:
    mask = ids != 0; embeddings + positions; per layer X = Attn(LN1 X) + X with keys masked by -1e6, then
    X = MLP(LN2 X) + X; LN(X) * mask; the mean over all positions; Linear, ReLU, Linear."""
    enc = model.encoder
    mask = (tokens != 0).double()
    b, n = tokens.shape
    x = enc.embed.weight[tokens] + enc.pos[:, :n]
    for block in enc.blocks:
        h = _layer_norm(x, block.ln1)
        width = block.attn.out.in_features  # heads x head_dim; our qkv holds W_q, W_k, W_v one after the other
        q, k, v = (
            _linear(h, block.attn.qkv, slice(i * width, (i + 1) * width)).view(b, n, heads, -1).transpose(1, 2)
            for i in range(3)
        )
        dot = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) - 1e6 * (1 - mask[:, None, None, :])
        out = (torch.softmax(dot, dim=-1) @ v).transpose(1, 2).reshape(b, n, width)
        x = _linear(out, block.attn.out) + x
        fc1, fc2 = block.mlp[0], block.mlp[3]
        x = _linear(torch.nn.functional.gelu(_linear(_layer_norm(x, block.ln2), fc1)), fc2) + x
    pooled = (_layer_norm(x, enc.norm) * mask[:, :, None]).mean(dim=1)
    return _linear(torch.relu(_linear(pooled, model.head[0])), model.head[2])


@pytest.mark.parametrize("backend", ["naive", "sdpa_math"])
def test_black_padding_with_mean_all_is_the_reference_models_forward(backend):
    sets = ["data.black_padding=true", "model.pool=mean_all", "model.dim=16", "model.mlp_dim=24"]
    config = load_config("image", "fa-paper", sets)
    torch.manual_seed(TEST_SEED)
    model = build_model(config, backend, vocab_size=257, seq_len=64, num_classes=10, pair=False).double().eval()
    g = torch.Generator().manual_seed(TEST_SEED)
    tokens = torch.randint(1, 256, (3, 64), generator=g)
    tokens[0, ::5] = 0  # black pixels scattered through the image
    tokens[1, 10:40] = 0  # a black band
    with torch.no_grad():
        ours, ref = model(tokens), reference_forward(model, tokens, heads=config.model.heads)
    assert ref.abs().max() > 1e-3
    torch.testing.assert_close(ours, ref, rtol=1e-9, atol=1e-11)
