"""One device-machine session for the flash kernels: GPU tests, a tile sweep, and the benchmark tables.

Usage (repository root on the GPU machine): PYTHONPATH=. python3 notes/flash_gpu_session.py PHASE... with phases
`tests`, `sweep`, `dense`, `small`, `sparse`, `flex` (adds flex to dense/small). Writes logs and JSON under $OUT and
prints a short table last. Stops starting new work once $BUDGET_S seconds (default 400) have passed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

import torch

OUT = os.environ.get("OUT", "/tmp/flash_out")
BUDGET = float(os.environ.get("BUDGET_S", "400"))
T0 = time.time()
os.makedirs(OUT, exist_ok=True)
RESULTS: dict = {"meta": {}, "tests": None, "sweep": [], "best": {}, "bench": []}


def elapsed() -> float:
    return time.time() - T0


def save() -> None:
    with open(os.path.join(OUT, "results.json.tmp"), "w") as f:
        json.dump(RESULTS, f, indent=1, default=str)
    os.replace(os.path.join(OUT, "results.json.tmp"), os.path.join(OUT, "results.json"))


def log(msg: str) -> None:
    print(f"[{elapsed():6.1f}s] {msg}", flush=True)


# ---- sweep -----------------------------------------------------------------------------------------------------------
SHAPES = {  # head dim -> (batch, heads, seq): the shapes the targets are set at (or a shorter proxy)
    8: (512, 4, 1024),
    16: (64, 2, 4096),
    32: (32, 16, 4096),
    64: (16, 8, 8192),
    128: (32, 4, 4096),
}
FWD = {
    "small": [(128, 64, 4, 3), (128, 128, 8, 3), (64, 64, 4, 3), (128, 32, 4, 3), (64, 128, 4, 3), (128, 64, 8, 2)],
    64: [(128, 64, 4, 3), (128, 128, 8, 3), (128, 64, 8, 3), (128, 128, 4, 3), (64, 64, 4, 3), (128, 32, 4, 4)],
    128: [(128, 64, 8, 3), (128, 128, 8, 2), (64, 64, 4, 3), (128, 32, 8, 3), (128, 64, 4, 2), (64, 128, 4, 2)],
}
BWD = [(32, 128, 4, 3), (64, 128, 8, 2), (32, 64, 4, 3), (64, 64, 4, 2), (16, 128, 4, 3), (32, 128, 8, 2)]


def _fwd_cfgs(d):
    return FWD.get(d, FWD["small"])


def _tiles(f, b):
    from attention_impls.kernels.tiles import Tiles

    return Tiles(f[0], f[1], f[2], f[3], b[0], b[1], b[2], b[3])


def _warm(task):
    """Compile (into Triton's on-disk cache) the kernels of one tile configuration on a tiny input of the same
    specialisation (same heads, lengths multiples of 16), so the timing process only loads them."""
    d, h, f, b = task
    from attention_impls.kernels.function import attention_backward, attention_forward

    try:
        q, k, v = (torch.randn(2, h, 256, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        t = _tiles(f, b)
        out, lse = attention_forward(q, k, v, None, d**-0.5, 0.0, 0, True, t, None)
        attention_backward(torch.randn_like(out), q, k, v, out, lse, None, d**-0.5, 0.0, 0, True, t, None)
        torch.cuda.synchronize()
        return None
    except Exception as e:  # noqa: BLE001
        return f"{task}: {type(e).__name__}: {e}"[:300]


def sweep(dims):
    tasks = []
    for d in dims:
        h = SHAPES[d][1]
        fw = _fwd_cfgs(d)
        for i in range(max(len(fw), len(BWD))):
            tasks.append((d, h, fw[i % len(fw)], BWD[i % len(BWD)]))
    log(f"sweep: warming {len(tasks)} configurations in parallel")
    with ProcessPoolExecutor(max_workers=min(14, len(tasks)), mp_context=get_context("spawn")) as ex:
        errs = [e for e in ex.map(_warm, tasks) if e]
    for e in errs:
        log(f"warm error {e}")
    log("sweep: timing")
    for d in dims:
        if elapsed() > BUDGET * 0.6:
            log("sweep: budget reached, stopping")
            break
        _sweep_dim(d)
        save()
        torch.cuda.empty_cache()


def _sweep_dim(d):
    import triton.testing

    from attention_impls.kernels.function import attention_backward, attention_forward

    bsz, h, n = SHAPES[d]
    q, k, v = (torch.randn(bsz, h, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    do = torch.randn_like(q)
    fl = 4.0 * bsz * h * n * n * d
    best_f, best_b = None, None
    for f in _fwd_cfgs(d):
        t = _tiles(f, BWD[0])
        try:
            ms = triton.testing.do_bench(
                lambda t=t: attention_forward(q, k, v, None, d**-0.5, 0.0, 0, True, t, None), warmup=10, rep=40
            )
        except Exception as e:  # noqa: BLE001
            RESULTS["sweep"].append({"d": d, "kind": "fwd", "cfg": f, "error": str(e)[:200]})
            continue
        row = {"d": d, "kind": "fwd", "cfg": f, "ms": ms, "tflops": fl / ms / 1e9}
        RESULTS["sweep"].append(row)
        if best_f is None or ms < best_f["ms"]:
            best_f = row
    if best_f is None:
        return
    out, lse = attention_forward(q, k, v, None, d**-0.5, 0.0, 0, True, _tiles(best_f["cfg"], BWD[0]), None)
    for b in BWD:
        t = _tiles(best_f["cfg"], b)
        try:
            ms = triton.testing.do_bench(
                lambda t=t: attention_backward(do, q, k, v, out, lse, None, d**-0.5, 0.0, 0, True, t, None),
                warmup=10,
                rep=40,
            )
        except Exception as e:  # noqa: BLE001
            RESULTS["sweep"].append({"d": d, "kind": "bwd", "cfg": b, "error": str(e)[:200]})
            continue
        row = {"d": d, "kind": "bwd", "cfg": b, "ms": ms, "tflops": 2.5 * fl / ms / 1e9}
        RESULTS["sweep"].append(row)
        if best_b is None or ms < best_b["ms"]:
            best_b = row
    RESULTS["best"][d] = {"fwd": best_f, "bwd": best_b}
    log(f"D={d}: best fwd {best_f['cfg']} {best_f['tflops']:.0f} TF/s; best bwd "
        f"{best_b['cfg'] if best_b else None} {best_b['tflops'] if best_b else 0:.0f} TF/s")  # fmt: skip


def _warm_sparse(task):
    """Compile the list-mode kernels for one (N, mode) at batch 1 (same heads, tiles and list width as the timing)."""
    n, mode, layout = task
    os.environ["LRA_FLASH_LIST_MODE"] = str(mode)
    from attention_impls.kernels import LayoutLists, default_tiles
    from attention_impls.kernels.function import attention_backward, attention_forward
    from attention_impls.layouts import build_layout

    try:
        q, k, v = (torch.randn(1, 8, n, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        t = default_tiles(64, torch.bfloat16, "cuda")
        lists = None if layout is None else LayoutLists(build_layout(layout, n // 128), 128)
        out, lse = attention_forward(q, k, v, None, 0.125, 0.0, 0, True, t, lists)
        attention_backward(torch.randn_like(out), q, k, v, out, lse, None, 0.125, 0.0, 0, True, t, lists)
        torch.cuda.synchronize()
        return None
    except Exception as e:  # noqa: BLE001
        return f"{task}: {type(e).__name__}: {e}"[:300]


def diag():
    """Block-sparse list modes against each other and against the dense range loop (butterfly, D=64, B*N=131072)."""
    from attention_impls.kernels import default_tiles

    seqs = [4096, 16384, 65536]
    tasks = [(n, m, "butterfly") for n in seqs for m in (0, 1, 2)] + [(4096, 0, None)]
    tasks += [(16384, m, "dense") for m in (0, 1, 2)]
    log(f"diag: warming {len(tasks)} configurations")
    with ProcessPoolExecutor(max_workers=len(tasks), mp_context=get_context("spawn")) as ex:
        for e in ex.map(_warm_sparse, tasks):
            if e:
                log(f"warm error {e}")
    t = default_tiles(64, torch.bfloat16, "cuda")
    rows = []
    for n in seqs:
        rows += _diag_seq(n, t)
        torch.cuda.empty_cache()
    RESULTS["diag"] = rows
    done = {m: [r for r in rows if r["case"] == f"mode{m}"] for m in (0, 1, 2)}
    totals = {m: sum(r["fwd_ms"] + r["bwd_ms"] for r in rs) for m, rs in done.items() if len(rs) == len(seqs)}
    best = min(totals, key=totals.get) if totals else 1
    os.environ["LRA_FLASH_LIST_MODE"] = str(best)
    RESULTS["list_mode"] = best
    log(f"diag: list mode totals {totals}; using mode {best}")
    save()


def _diag_seq(n, t):
    import triton.testing

    from attention_impls.kernels import LayoutLists
    from attention_impls.kernels.function import attention_backward, attention_forward
    from attention_impls.layouts import build_layout

    rows = []
    b = 131072 // n
    q, k, v, do = (torch.randn(b, 8, n, 64, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    lay = build_layout("butterfly", n // 128)
    cases = [("range", None, 0)] + [(f"mode{m}", LayoutLists(lay, 128), m) for m in (0, 1, 2)]
    if n == 16384:
        cases += [(f"ones_mode{m}", LayoutLists(build_layout("dense", n // 128), 128), m) for m in (0, 1, 2)]
    for name, lists, m in cases:
        os.environ["LRA_FLASH_LIST_MODE"] = str(m)
        try:
            f_ms = triton.testing.do_bench(
                lambda lists=lists: attention_forward(q, k, v, None, 0.125, 0.0, 0, True, t, lists), warmup=10, rep=40
            )
            out, lse = attention_forward(q, k, v, None, 0.125, 0.0, 0, True, t, lists)
            b_ms = triton.testing.do_bench(
                lambda lists=lists, out=out, lse=lse: attention_backward(
                    do, q, k, v, out, lse, None, 0.125, 0.0, 0, True, t, lists
                ),
                warmup=10,
                rep=40,
            )
        except Exception as e:  # noqa: BLE001
            log(f"diag {n} {name}: {type(e).__name__}: {str(e)[:200]}")
            continue
        dens = 1.0 if lists is None else float(lists.layout.float().mean())
        rows.append({"seq": n, "case": name, "density": dens, "fwd_ms": f_ms, "bwd_ms": b_ms})
        log(f"diag N={n} {name:<10} density {dens:.4f} fwd {f_ms:8.3f} ms bwd {b_ms:8.3f} ms")
    return rows


SP_FWD = [(128, 64, 8, 3), (128, 128, 8, 3), (128, 64, 4, 3), (64, 64, 4, 3), (128, 64, 8, 4), (64, 128, 4, 3)]
SP_BWD = [(64, 64, 4, 2), (64, 128, 8, 2), (32, 128, 4, 3), (64, 128, 4, 2), (128, 128, 8, 2), (128, 64, 8, 2)]


def _warm_sp(task):
    n, f, b = task
    from attention_impls.kernels import LayoutLists
    from attention_impls.kernels.function import attention_backward, attention_forward
    from attention_impls.layouts import build_layout

    try:
        q, k, v = (torch.randn(1, 8, n, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        lists = LayoutLists(build_layout("butterfly", n // 128), 128)
        out, lse = attention_forward(q, k, v, None, 0.125, 0.0, 0, True, _tiles(f, b), lists)
        attention_backward(torch.randn_like(out), q, k, v, out, lse, None, 0.125, 0.0, 0, True, _tiles(f, b), lists)
        torch.cuda.synchronize()
        return None
    except Exception as e:  # noqa: BLE001
        return f"{task}: {type(e).__name__}: {e}"[:300]


def sptiles():
    """Tiles for block-sparse (butterfly, D=64, B*N=131072) at 16K and 64K; ratio to density x dense time."""
    seqs = [16384, 65536]
    tasks = [(n, SP_FWD[i], SP_BWD[i]) for n in seqs for i in range(len(SP_FWD))]
    log(f"sptiles: warming {len(tasks)} configurations")
    with ProcessPoolExecutor(max_workers=len(tasks), mp_context=get_context("spawn")) as ex:
        for e in ex.map(_warm_sp, tasks):
            if e:
                log(f"warm error {e}")
    rows = []
    for n in seqs:
        rows += _sptiles_seq(n)
        torch.cuda.empty_cache()
    RESULTS["sptiles"] = rows
    save()


def _sptiles_seq(n):
    import triton.testing

    from attention_impls.kernels import LayoutLists, default_tiles
    from attention_impls.kernels.function import attention_backward, attention_forward
    from attention_impls.layouts import build_layout

    b = 131072 // n
    q, k, v, do = (torch.randn(b, 8, n, 64, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    lists = LayoutLists(build_layout("butterfly", n // 128), 128)
    dens = float(lists.layout.float().mean())
    t0 = default_tiles(64, torch.bfloat16, "cuda")
    fwd = lambda t, ls: attention_forward(q, k, v, None, 0.125, 0.0, 0, True, t, ls)  # noqa: E731
    dense_f = triton.testing.do_bench(lambda: fwd(t0, None), warmup=10, rep=40)
    out, lse = fwd(t0, None)
    bwd = lambda t, ls: attention_backward(do, q, k, v, out, lse, None, 0.125, 0.0, 0, True, t, ls)  # noqa: E731
    dense_b = triton.testing.do_bench(lambda: bwd(t0, None), warmup=10, rep=40)
    rows = [{"seq": n, "kind": "dense", "fwd_ms": dense_f, "bwd_ms": dense_b}]
    for f in SP_FWD:
        try:
            ms = triton.testing.do_bench(lambda f=f: fwd(_tiles(f, SP_BWD[0]), lists), warmup=10, rep=40)
        except Exception as e:  # noqa: BLE001
            log(f"sptiles fwd {f}: {e}"[:200])
            continue
        rows.append({"seq": n, "kind": "fwd", "cfg": f, "ms": ms, "ratio": ms / (dens * dense_f)})
        log(f"sptiles N={n} fwd {f} {ms:.3f} ms = {ms / (dens * dense_f):.3f} x ideal")
    for bc in SP_BWD:
        try:
            ms = triton.testing.do_bench(lambda bc=bc: bwd(_tiles(SP_FWD[0], bc), lists), warmup=10, rep=40)
        except Exception as e:  # noqa: BLE001
            log(f"sptiles bwd {bc}: {e}"[:200])
            continue
        rows.append({"seq": n, "kind": "bwd", "cfg": bc, "ms": ms, "ratio": ms / (dens * dense_b)})
        log(f"sptiles N={n} bwd {bc} {ms:.3f} ms = {ms / (dens * dense_b):.3f} x ideal")
    return rows


def flash_options(d):
    best = RESULTS["best"].get(d) or RESULTS["best"].get(str(d))
    if not best:
        return {}
    f, b = best["fwd"]["cfg"], best["bwd"]["cfg"]
    keys = ("block_m", "block_n", "num_warps", "num_stages", "bwd_block_m", "bwd_block_n", "bwd_num_warps",
            "bwd_num_stages")  # fmt: skip
    return dict(zip(keys, [*f, *b]))


def bench(label, backends, seqs, dims, **kw):
    from lra.bench.attention import bench_attention

    if elapsed() > BUDGET:
        log(f"bench {label}: skipped (budget)")
        return
    opts = {}
    for d in dims:
        o = flash_options(d)
        if o:
            opts = {"flash": o, "block_sparse_flash": {k: v for k, v in o.items()}}
    log(f"bench {label}: {backends} N={seqs} D={dims} {kw} flash opts {opts.get('flash')}")
    rows = bench_attention(backends, seqs, dims, "bf16", options=opts, warmup_ms=10, rep_ms=50, **kw)
    for r in rows:
        r["set"] = label
    RESULTS["bench"].extend(rows)
    save()


def main(phases):
    RESULTS["meta"] = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": __import__("triton").__version__,
        "phases": phases,
    }
    log(str(RESULTS["meta"]))
    if "diag" in phases:
        diag()
    if "sptiles" in phases:
        sptiles()
    if "tests" in phases:
        import importlib.util

        par = ["-n", "4"] if importlib.util.find_spec("xdist") else []
        files = ["tests/test_block_sparse_gpu.py"] if "sparse_tests_only" in phases else [
            "tests/test_flash_gpu.py", "tests/test_block_sparse_gpu.py"]  # fmt: skip
        cmd = [sys.executable, "-m", "pytest", "-q", *par, "-p", "no:cacheprovider", "-m", "gpu", *files]
        with open(os.path.join(OUT, "pytest.log"), "w") as f:
            rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=max(60, BUDGET * 0.45)).returncode
        with open(os.path.join(OUT, "pytest.log")) as f:
            tail = f.read().splitlines()[-25:]
        RESULTS["tests"] = {"rc": rc, "tail": tail}
        log(f"tests rc={rc}")
        print("\n".join(tail[-12:]))
        save()
    if "sweep" in phases:
        sweep([64, 8, 16, 128, 32])
    if "nosweep" in phases:  # bench with the tuned defaults in kernels/tiles.py, not the sweep's winners
        RESULTS["best"] = {}
    peers = ["flash", "sdpa_flash", "sdpa_cudnn"] + (["flex"] if "flex" in phases else [])
    if "sparse" in phases:
        sparse = ["block_sparse_flash", "flash"] + (["flex_block_sparse"] if "flex" in phases else [])
        bench("butterfly", sparse, [4096, 16384, 65536], [64], layout="butterfly")
    if "small" in phases:
        bench("pathfinder", [p for p in peers if p != "flex"], [1024], [8], heads=4, batch=512)
        bench("path-x", peers, [16384], [16], heads=2, batch=64)
        bench("path-256", [p for p in peers if p != "flex"], [65536], [8], heads=4, batch=8)
    if "dense" in phases:
        for n in [1024, 4096, 16384, 65536]:
            bench("d64", peers, [n], [64])
    log("done")
    for r in RESULTS["bench"]:
        head = f"{r['set']:<10} {r['backend']:<18} N={r['seq']:<6} D={r['head_dim']:<3} {r['mode']:<7} "
        ok = r["status"] == "ok"
        print(head + (f"{r['ms']:9.3f} ms {r['tflops']:7.1f} TF/s d={r['density']:.3f}" if ok else r["status"][:70]))


if __name__ == "__main__":
    main(sys.argv[1:])
