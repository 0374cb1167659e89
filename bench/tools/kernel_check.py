"""The target's products, kernel alone: each of a layer's four projections and the output layer,
for 1, 2, 4, 8 and 16 input rows, cold and warm, on each native kernel family.

    python -m bench.tools.kernel_check                               # native and native_q8a
    python -m bench.tools.kernel_check --kernels native_q8a --rows 1 2 4 --out kernels.json

Each product is one call into engines.native (Python's Linear around it not timed). Cold is a
decoding step's access: before a timed pass a buffer larger than the caches is read,
then the product runs once for each of the model's layers in turn (each layer's weights read
from memory once), and the time per call is the pass over the layers; the output layer (one
matrix) is timed once after the flush. Warm: the same weights again and again. The families
alternate within each repeat; medians of --repeats. GB/s is the weights' bytes (as the kernel
stores them) over the cold time.
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

from engines import native
from engines.load import load
from groundfloor.clock import Clock

PRODUCTS = ("wqkv", "wo", "wgu", "wd")
FLUSH_MB = 256


def _flush(buf: torch.Tensor) -> None:
    buf.add_(1)  # read and write every byte: the caches hold none of the weights after this


CLOCK = Clock(torch.device("cpu"))


def _ms(calls) -> float:
    CLOCK.reset()
    with CLOCK.phase("other"):
        calls()
    return CLOCK.read()["other"] / 1e6


def _cold(linears, x, buf) -> float:
    _flush(buf)
    return _ms(lambda: [lin(x) for lin in linears]) / len(linears)


def _warm(lin, x, n: int = 20) -> float:
    lin(x)
    return _ms(lambda: [lin(x) for _ in range(n)]) / n


def direct(lin):
    """The product of Linear `lin` as one call into engines.native (no Python around it)."""
    mod, fam = native.kernels()[0], native.family(lin.kernel)
    if native.repacked(lin.kernel):
        return lambda x: mod.packed_linear(x, lin.packed, lin.out_features)
    if lin.fmt == "int4":
        return lambda x: mod.q4_linear(x, lin.nib, lin.scale, lin.offset, fam)
    return lambda x: mod.q8_linear(x, lin.qweight, lin.scales, fam)


class Product:
    """A Linear's weights and their kernel, called directly (nbytes, in_features as the Linear)."""

    def __init__(self, lin):
        self.call, self.in_features, self.nbytes = direct(lin), lin.in_features, lin.nbytes

    def __call__(self, x):
        return self.call(x)


def measure(models: dict, rows, repeats: int) -> list[dict]:
    buf = torch.zeros(FLUSH_MB * 2**20 // 4)
    cells: dict = {}
    width = next(iter(models.values())).model.layers[0].wqkv.in_features
    for _ in range(repeats):
        for m in rows:
            x = torch.randn(m, width)
            for kernel, eng in models.items():  # alternating, repeat by repeat
                layers = eng.model.layers
                for p in PRODUCTS:
                    lins = [Product(getattr(layer, p)) for layer in layers]
                    xin = torch.randn(m, lins[0].in_features)
                    key = (kernel, p, m)
                    cells.setdefault(key, {"cold": [], "warm": [], "bytes": lins[0].nbytes()})
                    cells[key]["cold"].append(_cold(lins, xin, buf))
                    cells[key]["warm"].append(_warm(lins[0], xin))
                out = Product(eng.model.output)
                key = (kernel, "output", m)
                cells.setdefault(key, {"cold": [], "warm": [], "bytes": out.nbytes()})
                cells[key]["cold"].append(_cold([out], x, buf))
                cells[key]["warm"].append(_warm(out, x, 5))
    result = []
    for (kernel, p, m), c in cells.items():
        cold, warm = statistics.median(c["cold"]), statistics.median(c["warm"])
        result.append(
            {
                "kernel": kernel,
                "product": p,
                "rows": m,
                "cold_ms": cold,
                "warm_ms": warm,
                "bytes": c["bytes"],
                "cold_GBps": c["bytes"] / cold / 1e6,
            }
        )
    return result


def report(result: list[dict], rows) -> None:
    kernels = sorted({r["kernel"] for r in result})
    for kernel in kernels:
        print(f"\n{kernel}: ms per call, cold / warm (cold GB/s at 1 row)")
        print(f"{'product':8} {'MB':>6} " + " ".join(f"{m:>13}" for m in rows) + "   GB/s")
        for p in (*PRODUCTS, "output"):
            cells = {r["rows"]: r for r in result if r["kernel"] == kernel and r["product"] == p}
            one = cells[rows[0]]
            print(
                f"{p:8} {one['bytes'] / 1e6:6.2f} "
                + " ".join(f"{cells[m]['cold_ms']:6.3f}/{cells[m]['warm_ms']:6.3f}" for m in rows)
                + f"  {one['cold_GBps']:5.1f}"
            )


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="embedded:smollm2-135m")
    ap.add_argument("--kernels", nargs="+", default=["native", "native_q8a"])
    ap.add_argument("--rows", nargs="+", type=int, default=[1, 2, 4, 8, 16])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    models = {}
    for k in a.kernels:
        eng, _ = load(a.model, "cpu", engine="lean", weights="int4", dtype="float32", kernel=k)
        models[k] = eng
    print(f"threads {torch.get_num_threads()}")
    result = measure(models, a.rows, a.repeats)
    report(result, a.rows)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
