"""train.objective=masked (self-pretraining): which tokens are hidden, the loss against a hand computation in fp64,
nothing of a hidden token reaching the model, packed and unpacked alike, a run stopped and resumed as an
uninterrupted one, its record kept out of the accuracy tables, a classifier started from it, and the refusals."""

from __future__ import annotations

import math

import pytest
import torch

from lra.campaign.plan import plan_stages
from lra.cli.main import main
from lra.core.errors import ConfigError, RunSetupError
from lra.model import NOT_HIDDEN, build_model, load_init
from lra.results.store import save_record
from lra.train.checkpoint import BEST, LAST, load_checkpoint
from lra.train.config import config_hash, load_config
from lra.train.objective import MaskedLossModel, hidden, majority_token
from lra.train.run import train
from tests.reference import TEST_SEED

SHAPE = dict(vocab_size=40, seq_len=64, num_classes=2, pair=False)


def _holey(rows: int, seed: int, keep: float = 0.4) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(1, 40, (rows, 64), generator=g)
    tokens[torch.rand(rows, 64, generator=g) > keep] = 0
    return tokens


def _model(*sets: str, pack: int = 0):
    config = load_config("pathfinder", "tiny", ["train.objective=masked", "model.dropout=0", *sets])
    if pack:
        config = config.with_settings(["model.pack_tokens=true"])
    torch.manual_seed(TEST_SEED)
    return build_model(config, "naive", pack_length=pack, **SHAPE).double().eval()


def test_only_real_tokens_are_hidden_at_the_rate_asked():
    torch.manual_seed(TEST_SEED)
    tokens = _holey(400, TEST_SEED)
    hide = hidden(tokens, 0.15)
    assert not hide[tokens == 0].any()
    real = int((tokens != 0).sum())
    share = int(hide.sum()) / real
    assert abs(share - 0.15) < 4 * math.sqrt(0.15 * 0.85 / real)  # within 4 standard errors


def test_the_masked_loss_is_the_cross_entropy_of_the_hidden_tokens_as_computed_by_hand():
    model = _model()
    loss_model = MaskedLossModel(model, rate=0.3, device_type="cpu", autocast=None)
    tokens = _holey(3, TEST_SEED + 1)
    torch.manual_seed(7)
    with torch.no_grad():
        loss, right = loss_model(tokens, None, None, "mean")
        losses, shares = loss_model(tokens, None, None, "none")  # another draw: the per-sequence form
    torch.manual_seed(7)
    hide = hidden(tokens, 0.3)
    assert hide.any(1).all()
    with torch.no_grad():
        logits, targets = model.reconstruct(tokens, hide)
    logp = torch.log_softmax(logits, -1)
    picked = [(b, i) for b in range(3) for i in range(64) if hide[b, i]]
    assert [int(targets[b, i]) for b, i in picked] == [int(tokens[b, i]) for b, i in picked]
    assert int((targets != NOT_HIDDEN).sum()) == len(picked)
    want = -sum(float(logp[b, i, tokens[b, i]]) for b, i in picked) / len(picked)
    assert float(loss) == pytest.approx(want, rel=1e-10)
    hits = [[int(logits[b, i].argmax() == tokens[b, i]) for i in range(64) if hide[b, i]] for b in range(3)]
    assert float(right) == pytest.approx(sum(sum(h) / len(h) for h in hits), rel=1e-6)  # a float32 ratio of counts
    assert losses.shape == shares.shape == (3,)


def test_a_hidden_token_does_not_reach_the_model_packed_or_not():
    plain, packed = _model(), _model(pack=40)
    packed.load_state_dict(plain.state_dict())
    tokens = _holey(2, TEST_SEED + 2, keep=0.5)
    torch.manual_seed(3)
    hide = hidden(tokens, 0.25)
    other = torch.where(hide, (tokens % 39) + 1, tokens)  # every hidden token changed, still real
    assert not torch.equal(other, tokens)
    with torch.no_grad():
        want, targets = plain.reconstruct(tokens, hide)
        changed, _ = plain.reconstruct(other, hide)
        torch.testing.assert_close(changed, want, rtol=1e-12, atol=1e-12)
        got, packed_targets = packed.reconstruct(tokens, hide)
    for b in range(2):  # the packed order holds each sequence's real tokens first, in their order
        real = tokens[b] != 0
        n = int(real.sum())
        torch.testing.assert_close(got[b, :n], want[b, real], rtol=1e-10, atol=1e-12)
        assert torch.equal(packed_targets[b, :n], targets[b, real])


def _tiny(*sets: str):
    base = ["data.num_train=48", "data.num_val=16", "data.num_test=16", "train.batch_size=8", "train.steps=6",
            "train.eval_every=3", "train.log_every=3", "train.warmup=1", *sets]  # fmt: skip
    return load_config("pathfinder", "tiny", base)


def test_a_pretraining_run_resumes_exactly_and_a_classifier_starts_from_its_encoder(tmp_path):
    data = tmp_path / "data"
    config = _tiny("train.objective=masked", "train.mask_rate=0.3")
    whole = train(config, "naive", device="cpu", out_dir=tmp_path / "whole", data_dir=data)
    stopped = train(config, "naive", device="cpu", out_dir=tmp_path / "parts", data_dir=data, stop_after=3)
    assert stopped["stopped_at"] == 3
    train(config, "naive", device="cpu", out_dir=tmp_path / "parts", data_dir=data, resume=True)
    a, b = (load_checkpoint(tmp_path / n / LAST)["model"] for n in ("whole", "parts"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert whole["kind"] == "pretrain" and "token_head.weight" in a and not any(k.startswith("head.") for k in a)
    assert 0 < whole["metrics"]["majority_acc"] < 1 and 0 <= whole["metrics"]["test_acc"] <= 1

    fine = _tiny("train.init_from=" + str(tmp_path / "whole"))
    done = train(fine, "naive", device="cpu", out_dir=tmp_path / "fine", data_dir=data)
    assert done["kind"] == "run"
    store, out = tmp_path / "store", tmp_path / "board"
    for record in (whole, done):
        save_record(record, store)
    assert main(["leaderboard", "--results", str(store), "--out", str(out)]) == 0
    tables = (out / "LEADERBOARD.md").read_text().split("| file | kind |")[0]  # the tables, before the list of files
    pathfinder = [line for line in tables.splitlines() if line.startswith("| `naive` |")]
    assert pathfinder and all(f"{100 * whole['metrics']['test_acc']:.1f}" not in line for line in pathfinder)
    assert f"{100 * done['metrics']['test_acc']:.1f} (n=1)" in pathfinder[0]  # the classifier's alone
    torch.manual_seed(0)
    model = build_model(fine, "naive", vocab_size=257, seq_len=1024, num_classes=2, pair=False)
    pretrained = load_checkpoint(tmp_path / "whole" / BEST)["model"]
    assert load_init(model, dict(pretrained)) == []
    state = model.state_dict()
    assert all(torch.equal(state[k], v) for k, v in pretrained.items() if k.startswith("encoder.") and k in state)
    assert "encoder.mask_emb" not in state and "head.0.weight" in state  # the head starts fresh


def test_majority_token_is_the_share_of_the_commonest_real_token():
    tokens = torch.tensor([[0, 3, 3, 5], [3, 0, 0, 7]]).numpy()
    assert majority_token(tokens) == 3 / 5


def test_masked_is_refused_for_two_document_tasks_and_campaigns_and_its_defaults_keep_the_hash():
    with pytest.raises(RunSetupError, match="train.objective=masked pretrains an encoder on one sequence"):
        train(load_config("retrieval", "tiny", ["train.objective=masked"]), "naive", device="cpu")
    with pytest.raises(ConfigError, match="campaign: stage pathfinder has train.objective=masked"):
        plan_stages("path-x", attn="flash", preset="curriculum", seed=0, overrides=["train.objective=masked"])
    plain = load_config("pathfinder", "curriculum")
    same = ["train.objective=classify", "train.mask_rate=0.15"]
    assert config_hash(plain) == config_hash(load_config("pathfinder", "curriculum", same))
    assert config_hash(plain) != config_hash(load_config("pathfinder", "curriculum", ["train.objective=masked"]))
