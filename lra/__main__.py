"""`python -m lra ...` is the `lra` command (torchrun and the sweep start runs this way)."""

from lra.cli.main import run_process

if __name__ == "__main__":
    run_process()
