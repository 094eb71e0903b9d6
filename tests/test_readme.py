"""The README's two commands exist, CI runs exactly the README's test command, and the README's tiny run leaves the
git checkout as it was (its data, run directory and record go to the user's folders)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Written by tools (pytest, ruff, `pip install -e`) that other processes may run meanwhile, not by `lra`.
TOOL_OUTPUTS = ("__pycache__", ".pytest_cache", ".ruff_cache", ".egg-info")


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    blocks = text.split("```bash\n")[1:3]
    return [b.split("\n```")[0].strip() for b in blocks]


def test_readme_has_main_job_and_test_command():
    main_job, tests = _readme_commands()
    assert "pip install" in main_job and "lra run listops --attn naive --preset tiny" in main_job
    assert "pip install" in tests and "pytest" in tests


def test_ci_runs_the_readme_test_command():
    _, tests = _readme_commands()
    setup, _, command = tests.partition(". .venv/bin/activate && ")
    ci = (ROOT / ".ci" / "run").read_text()
    assert command.replace("pip install", "pip install -q") in ci


def _checkout_state() -> list[str]:
    """`git status` of the checkout, ignored files included (a run must not write there even where git ignores it)."""
    proc = subprocess.run(
        ["git", "status", "--porcelain", "--ignored"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return [line for line in proc.stdout.splitlines() if not any(c in line for c in TOOL_OUTPUTS)]


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs a git checkout")
def test_readme_tiny_run_leaves_the_checkout_clean(tmp_path):
    main_job, _ = _readme_commands()
    run = shlex.split(main_job.split("&& ")[-1])
    assert run[:2] == ["lra", "run"]
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LRA_", "XDG_"))}
    env.update(HOME=str(home), PYTHONDONTWRITEBYTECODE="1", LRA_QUIET="1")
    shrink = ["--set", "train.steps=6", "--set", "train.eval_every=3", "--set", "data.num_train=256"]
    shrink += ["--set", "data.num_val=64", "--set", "data.num_test=64"]  # the same command, a few steps long
    before = _checkout_state()
    proc = subprocess.run(
        [sys.executable, "-m", "lra", *run[1:], *shrink], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _checkout_state() == before
    records = list((home / ".local" / "share" / "lra" / "results").glob("*.json"))
    assert len(records) == 1 and f"record: {records[0]}" in proc.stderr
    assert list((home / ".cache" / "lra" / "data").iterdir())  # the data cache is the user's too


BACKEND_CHECK = """
import torch
from attention_impls import build_attention
from attention_impls.masking import masked_attention

exec(compile(SNIPPET, "attention_impls/my_attention.py", "exec"), {"__name__": "attention_impls.my_attention"})
torch.manual_seed(0)
q, k, v = (torch.randn(2, 2, 12, 8, dtype=torch.float64) for _ in range(3))
mask = torch.arange(12)[None, :] < torch.tensor([[12], [7]])
allowed = mask[:, None, None, :] & mask[:, None, :, None]
attn = build_attention("my_attention", heads=2, head_dim=8, seq_len=12, options={"temperature": 2.0})
expected = masked_attention(q, k, v, allowed, scale=8**-0.5 / 2.0)
torch.testing.assert_close(attn(q, k, v, mask), expected, rtol=1e-12, atol=1e-12)
print("ok")
"""


def test_readme_backend_example_registers_and_computes_attention_at_its_temperature():
    text = (ROOT / "README.md").read_text()
    snippet = text.split("```python\n# attention_impls/my_attention.py\n")[1].split("\n```")[0]
    code = f"SNIPPET = {snippet!r}\n{BACKEND_CHECK}"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]
