"""Where one decoding step goes: the lean engine's forward over new tokens, profiled op by op.

    python -m bench.tools.profile_step                          # embedded model, default kernel
    python -m bench.tools.profile_step --weights int8 --context 500 --steps 20 --out profile.json
    python -m bench.tools.profile_step --rows 2              # a verify forward: 2 new tokens
    SPECSWEEP_LAYER_CALL=0 python -m bench.tools.profile_step  # op by op (else one call)

One process, nothing else running: the model is loaded, a context of `--context` random tokens
prefilled, a few warm steps taken outside the measurement, then two measurements of `--steps`
forwards over `--rows` new tokens (1: a decoding step; q > 1: the verify of q − 1 drafted tokens
as a chain, causal), each after the cache is cropped back to the context:
  * plain: wall time per step (the decode step as the runs see it, no profiler attached);
  * profiled: torch.profiler with Python call tracing, every op's self time grouped by what it
    is (matrix products through our kernels or torch's, attention, norms, rotary,
    the MLP's activation, cache writes, tensor views and copies, Python and dispatch: the rest
    of the profiled step). The tracer's own overhead inflates Python and dispatch; the groups
    are reported as shares of the profiled step and scaled to the plain step's wall time.
Per layer figures divide the layers' groups by the number of layers.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

from engines.load import load
from groundfloor.machine import cpu_name

# (group, substrings of the profiler's event names), first match wins
GROUPS = (
    # the whole forward as one native call (engines/kernels/model.h): nothing inside it is
    # visible to the profiler; SPECSWEEP_LAYER_CALL=0 runs it op by op, each op its own call
    ("the one-call forward (our kernels: every layer, attention, output)", ("method forward of",)),
    # one call per layer: its own time is what the ATen ops it calls (attention, views, silu:
    # grouped below) leave, i.e. our kernels inside it (projections, norms, rotary)
    ("layer_ (our kernels inside the one-call layer)", ("layer_",)),
    ("q4_linear (int4 projections)", ("q4_linear",)),
    ("packed_linear (our products on repacked tiles: q8a, bf16)", ("packed_linear",)),
    ("q8_linear (the output layer at int4)", ("q8_linear",)),
    ("torch matrix products", ("_weight_int", "aten::mm", "aten::addmm", "aten::linear")),
    (
        "attention",
        ("method attention of", "scaled_dot_product", "flash_attention", "aten::_softmax", "bmm"),
    ),
    ("norms", ("rms_norm", "add_rms_norm_", "aten::rsqrt", "aten::pow", "aten::mean")),
    ("rotary", ("rope_", "aten::roll")),
    ("MLP activation (silu · up)", ("silu_mul", "aten::silu", "aten::mul")),
    ("cache writes and copies", ("aten::copy_", "aten::add_", "aten::clone", "aten::contiguous")),
    (
        "views, slices, chunks",
        ("aten::select", "aten::slice", "aten::view", "aten::split", "aten::chunk", "aten::as_str")
        + ("aten::transpose", "aten::reshape", "aten::unsqueeze", "aten::expand", "aten::t"),
    ),
    ("allocations", ("aten::empty", "aten::zeros", "aten::ones", "aten::full")),
    ("embedding", ("embedding", "aten::index_select")),
)


def group_of(name: str) -> str | None:
    for group, keys in GROUPS:
        if any(k in name for k in keys):
            return group
    return None


def one_step(engine, cache, tokens, context: int) -> None:
    cache.crop(context)
    engine.forward(tokens, cache)


def timed_steps(engine, context: int, rows: int, steps: int):
    """After a `context`-token prefill and 8 warm steps: the median plain step (no profiler),
    the mean profiled step, and the profiler over those `steps`."""
    vocab = engine.vocab_size
    tokens = ((42 + 31 * torch.arange(rows)) % vocab)[None]
    cache = engine.new_cache(context + rows)
    with torch.inference_mode():
        engine.forward(torch.randint(min(100, vocab - 1), vocab, (1, context)), cache)
        for _ in range(8):  # warm: allocator, kernels' first calls
            one_step(engine, cache, tokens, context)
        walls = []
        for _ in range(steps):
            t = time.perf_counter()
            one_step(engine, cache, tokens, context)
            walls.append(time.perf_counter() - t)
        with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
            t = time.perf_counter()
            for _ in range(steps):
                one_step(engine, cache, tokens, context)
            profiled = (time.perf_counter() - t) / steps
    return statistics.median(walls), profiled, prof


def op_groups(prof, steps: int, step: float, profiled: float) -> list[dict]:
    """The profiler's ops in groups, each group's share of the profiled step scaled to the plain
    step; what no group claims is Python and dispatch."""
    ops = defaultdict(float)
    calls = defaultdict(int)
    for e in prof.key_averages():
        g = group_of(e.key)
        if g is not None:
            ops[g] += e.self_cpu_time_total / 1e6 / steps
            calls[g] += e.count // steps
    known = sum(ops.values())
    ops["Python and dispatch (the rest)"] = max(profiled - known, 0.0)
    return [
        {
            "group": g,
            "share": s / profiled,
            "ms_per_step": 1e3 * step * s / profiled,
            "calls_per_step": calls.get(g),
        }
        for g, s in sorted(ops.items(), key=lambda kv: -kv[1])
    ]


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="embedded:smollm2-135m")
    ap.add_argument("--weights", default="int4")
    ap.add_argument("--kernel", default="auto")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--context", type=int, default=200)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rows", type=int, default=1, help="new tokens per forward (q)")
    ap.add_argument("--out", default=None, help="also write the results as JSON here")
    a = ap.parse_args(argv)
    if a.rows < 1:
        ap.error(f"--rows {a.rows}: use an integer >= 1 (new tokens per forward)")

    engine, choice = load(
        a.model,
        torch.device("cpu"),
        engine="lean",
        weights=a.weights,
        dtype=a.dtype,
        kernel=a.kernel,
    )
    step, profiled, prof = timed_steps(engine, a.context, a.rows, a.steps)
    rows = op_groups(prof, a.steps, step, profiled)
    result = {
        "cpu": cpu_name(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "weights": choice.get("weights"),
        "kernels": choice.get("kernels"),
        "output_layer": choice.get("output_layer"),
        "context": a.context,
        "new_tokens": a.rows,
        "steps": a.steps,
        "step_ms": 1e3 * step,
        "profiled_step_ms": 1e3 * profiled,
        "layers": engine.config.num_hidden_layers,
        "rows": rows,
    }
    report(result)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=1)
    return result


def report(r: dict) -> None:
    print(
        f"{r['cpu']} · {r['threads']} threads · torch {r['torch']} · weights {r['weights']} "
        f"({', '.join(r['kernels'] or [])}; output layer {r['output_layer']})"
    )
    what = (
        "one decoding step"
        if r["new_tokens"] == 1
        else f"one forward over {r['new_tokens']} new tokens"
    )
    print(
        f"{what} with {r['context']} cached tokens: {r['step_ms']:.2f} ms (median of "
        f"{r['steps']}); profiled {r['profiled_step_ms']:.2f} ms"
    )
    print(f"  {'group':48s} {'share':>6s} {'ms/step':>8s} {'per layer':>10s} {'calls':>6s}")
    for row in r["rows"]:
        per_layer = row["ms_per_step"] / r["layers"]
        calls = row["calls_per_step"] if row["calls_per_step"] is not None else "–"
        print(
            f"  {row['group']:48s} {row['share']:6.1%} {row['ms_per_step']:8.2f} "
            f"{per_layer:10.3f} {calls!s:>6s}"
        )


if __name__ == "__main__":
    main()
