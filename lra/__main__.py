"""`python -m lra ...` is the `lra` command (torchrun and the sweep start runs this way)."""

from lra.cli.main import main

if __name__ == "__main__":
    code = main()
    from lra.train import distributed

    if distributed.is_worker_process():
        distributed.exit_worker(code)  # a rank leaves without the teardown that can abort it (see exit_worker)
    raise SystemExit(code)
