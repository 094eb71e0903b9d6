"""The README's two commands exist, and CI runs exactly the README's test command."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


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
