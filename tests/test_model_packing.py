"""model.pack_tokens: the encoder on each sequence's real tokens only is the same function as the encoder on every
position, for every pooling, in fp64 (outputs and every parameter's gradient), on tokens with padding inside the
sequence (Pathfinder's black pixels); packing itself on a hand-made batch; the pack length from the data; the run
and the compiled step with it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lra.core.errors import RunSetupError
from lra.model import build_model, pack_real
from lra.train.config import config_hash, load_config
from lra.train.feed import PACK_MULTIPLE, longest_real, pack_length_for
from lra.train.gate import gate
from lra.train.run import train
from lra.train.trainer import build_trainer
from tasks import build_task
from tasks.base import Split
from tests.reference import TEST_SEED
from tests.toy_task import toy_config_path

SHAPE = dict(vocab_size=40, seq_len=48, num_classes=4, pair=False)


def _holey_tokens(rows: int, n: int, keep: float, seed: int, vocab: int = 40) -> torch.Tensor:
    """Token ids 1..vocab-1 with about 1 - keep of the positions zero (padding anywhere, as black pixels)."""
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(1, vocab, (rows, n), generator=g)
    tokens[torch.rand(rows, n, generator=g) > keep] = 0
    return tokens


def _models(tmp_path, pool: str, length: int, backend: str = "naive"):
    """The unpacked and the packed classifier with the same weights, fp64, in evaluation mode."""
    sets = [f"model.pool={pool}", "model.dim=16", "model.heads=2", "model.layers=2", "model.dropout=0"]
    cfg = load_config(toy_config_path(tmp_path), overrides=sets)
    torch.manual_seed(TEST_SEED)
    plain = build_model(cfg, backend, **SHAPE).double().eval()
    packed = build_model(cfg.with_settings(["model.pack_tokens=true"]), backend, **SHAPE, pack_length=length)
    packed = packed.double().eval()
    packed.load_state_dict(plain.state_dict())
    with torch.no_grad():  # positions and a padding embedding that would show if padding leaked
        for model in (plain, packed):
            model.encoder.pos.normal_(0, 1, generator=torch.Generator().manual_seed(TEST_SEED + 1))
            model.encoder.embed.weight[0] = 50.0
    return plain, packed


@pytest.mark.parametrize("pool", ["cls", "mean", "mean_all"])
def test_the_packed_encoder_is_the_same_function_with_the_same_gradients(tmp_path, pool):
    tokens = _holey_tokens(4, 48, keep=0.3, seed=TEST_SEED)
    length = int((tokens != 0).sum(1).max()) + 3  # one row leaves 3 slots of padding at least
    assert length < 40
    plain, packed = _models(tmp_path, pool, length)
    want, got = plain(tokens), packed(tokens)
    assert want.abs().min() > 1e-6
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    (want * torch.arange(1.0, 5.0, dtype=torch.float64)).sum().backward()
    (got * torch.arange(1.0, 5.0, dtype=torch.float64)).sum().backward()
    grads = dict(plain.named_parameters())
    for name, p in packed.named_parameters():
        torch.testing.assert_close(p.grad, grads[name].grad, rtol=1e-10, atol=1e-12, msg=name)
    pos_grad = packed.encoder.pos.grad[0]
    assert pos_grad[(tokens == 0).all(0)].abs().max() == 0  # a position padded in every row learns nothing
    assert pos_grad[(tokens != 0).any(0)].abs().min() > 0


def test_flash_on_packed_tokens_is_naive_on_every_position(tmp_path):
    """Our kernel (fp32, the CPU interpreter) takes the packed, right-padded sequences; padding inside the sequence
    never reaches it."""
    tokens = _holey_tokens(3, 48, keep=0.4, seed=TEST_SEED + 2)
    length = int((tokens != 0).sum(1).max())
    plain, _ = _models(tmp_path, "mean_all", length)
    _, packed = _models(tmp_path, "mean_all", length, backend="flash")
    with torch.no_grad():
        got = packed.float()(tokens).double()
        want = plain(tokens)
    torch.testing.assert_close(got, want, rtol=2e-5, atol=2e-5)


def test_packing_gathers_real_tokens_to_the_front_in_order_with_their_positions():
    tokens = torch.tensor([[0, 5, 0, 7, 0, 0], [3, 0, 0, 0, 0, 9], [0, 0, 0, 0, 4, 0]])
    packed, where = pack_real(tokens, 2)
    assert packed.tolist() == [[5, 7], [3, 9], [4, 0]]
    assert where[:, :2].tolist()[:2] == [[1, 3], [0, 5]] and where[2, 0] == 4
    assert tokens.gather(1, where).tolist() == packed.tolist()


def test_a_row_with_more_real_tokens_than_the_pack_is_refused_not_cut():
    with pytest.raises(RuntimeError, match="more real tokens"):
        pack_real(torch.tensor([[1, 2, 3, 0]]), 2)


def test_the_pack_length_is_the_longest_real_count_rounded_up_per_document():
    tokens = np.zeros((3, 2, 200), np.uint8)
    tokens[0, 0, :70] = 1  # 70 real tokens in the first document
    tokens[1, 1, ::2] = 9  # 100 in a second document, spread out
    split = Split(tokens, np.zeros(3, np.int64))
    assert longest_real(split) == 100
    assert pack_length_for([split], 200) == 2 * PACK_MULTIPLE
    empty = Split(np.zeros((2, 200), np.uint8), np.zeros(2, np.int64))
    assert longest_real(empty) == 0 and pack_length_for([empty], 200) == PACK_MULTIPLE
    full = Split(np.ones((2, 100), np.uint8), np.zeros(2, np.int64))
    assert pack_length_for([empty, full], 100) == 100  # never wider than the sequence


def test_pack_tokens_without_a_pack_length_or_wider_than_the_sequence_is_refused(tmp_path):
    cfg = load_config(toy_config_path(tmp_path), overrides=["model.pack_tokens=true"])
    with pytest.raises(RunSetupError, match="pack length"):
        build_model(cfg, "naive", **SHAPE)
    with pytest.raises(RunSetupError, match="49 slots .* 48 tokens"):
        build_model(cfg, "naive", **SHAPE, pack_length=49)


def test_pack_tokens_off_keeps_every_config_hash_and_on_changes_it(tmp_path):
    cfg = load_config("pathfinder", "fa-paper")
    off, on = cfg.with_settings(["model.pack_tokens=false"]), cfg.with_settings(["model.pack_tokens=true"])
    assert config_hash(off) == config_hash(cfg) != config_hash(on)


def test_the_gate_lets_packed_padding_reach_any_backend_and_checks_scores_at_the_pack_length():
    """Black pixels pad inside a sequence: `flash` (right-padded masks) is refused them, but not once packing has
    gathered them out; `naive` at Path-X's 16,384 tokens cannot hold its scores, at a pack of 2,752 it can."""
    holey = load_config("pathfinder", "fa-paper", ["data.black_padding=true"])
    with pytest.raises(RunSetupError, match="right-padded key masks only"):
        gate(holey, "flash", "cpu")
    gate(holey.with_settings(["model.pack_tokens=true"]), "flash", "cpu")
    path_x = load_config("path-x", "curriculum", ["train.batch_size=32"])
    with pytest.raises(RunSetupError, match=r"\(32, 2, 16384, 16384\)"):
        gate(path_x.with_settings(["model.pack_tokens=false"]), "naive", "cpu")
    gate(path_x, "naive", "cpu")  # packed: the length is not known before the data is read
    assert gate(path_x, "naive", "cpu", pack_length=2752).seq_len == 16384
    with pytest.raises(RunSetupError, match=r"\(32, 2, 16000, 16000\)"):
        gate(path_x, "naive", "cpu", pack_length=16000)


def test_a_packed_run_trains_records_its_pack_length_and_resumes(tmp_path):
    """Pathfinder's tiny preset with black pixels as padding: the run says how wide its pack is, stores it, and a run
    stopped and resumed ends where the uninterrupted one does."""
    sets = ["data.black_padding=true", "model.pool=mean_all", "model.pack_tokens=true", "train.steps=6"]
    sets += ["train.eval_every=3", "data.num_train=64", "data.num_val=32", "data.num_test=32"]
    cfg = load_config("pathfinder", "tiny", sets)
    common = dict(device="cpu", data_dir=tmp_path / "data")
    whole = train(cfg, "naive", out_dir=tmp_path / "whole", **common)
    task = build_task(cfg.task, data_dir=tmp_path / "data", **cfg.data)
    want = pack_length_for([task.load(s) for s in ("train", "val", "test")], task.seq_len)
    assert whole["metrics"]["pack_length"] == want < task.seq_len
    stopped = train(cfg, "naive", out_dir=tmp_path / "parts", stop_after=4, **common)
    assert stopped["stopped_at"] == 4
    resumed = train(cfg, "naive", out_dir=tmp_path / "parts", resume=True, **common)
    assert resumed["metrics"]["test_acc"] == whole["metrics"]["test_acc"]
    assert resumed["metrics"]["test_loss"] == pytest.approx(whole["metrics"]["test_loss"], rel=1e-9)


def test_the_compiled_packed_step_matches_eager(tmp_path, monkeypatch):
    """Dropout on; on the CPU the compiler is AOTAutograd (LRA_COMPILER=aot_eager), as in test_compiled_step."""
    monkeypatch.setenv("LRA_COMPILER", "aot_eager")
    sets = ["model.pack_tokens=true", "model.dropout=0.1", "model.attention_dropout=0.1", "model.pool=mean_all"]
    cfg = load_config(toy_config_path(tmp_path), overrides=sets)
    task = build_task(cfg.task, **cfg.data)
    batches = [(_holey_tokens(8, task.seq_len, 0.4, TEST_SEED + i, vocab=16), torch.arange(8) % 4) for i in range(2)]
    length = max(int((tokens != 0).sum(1).max()) for tokens, _ in batches)
    assert length < task.seq_len
    runs = []
    for mode in ("none", "default"):
        trainer = build_trainer(cfg.with_settings([f"train.compile={mode}"]), task, "naive", torch.device("cpu"),
                                pack_length=length)  # fmt: skip
        losses = [trainer.step(tokens, labels).loss for tokens, labels in batches]
        runs.append((trainer, losses, [p.detach().clone() for p in trainer.model.parameters()]))
    (eager, want, want_w), (compiled, got, got_w) = runs
    assert compiled.loss.compiled and compiled.loss.fallback is None
    torch.testing.assert_close(got, want)
    for x, y in zip(got_w, want_w, strict=True):
        torch.testing.assert_close(x, y)
