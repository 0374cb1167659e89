"""The engines on this machine, side by side: decoding speed, roofline and the cost curve.

    python -m bench.tools.engine_check                       # the embedded model, every candidate
    python -m bench.tools.engine_check --configs hf:float32 lean:int4 --tokens 64 --out check.json
    python -m bench.tools.engine_check --configs lean:int4 --task all --per-task 2  # 2 a category
    python -m bench.tools.engine_check --configs lean:int4 lean:int4:native_q8a  # a kernel

One run, one process, every configuration loaded at once and measured interleaved (the order
rotates per prompt and repeat), warm-up outside the clock, medians:
  * AR tokens/s of our decode loop on each engine × weight format × dtype (± compile), and of
    transformers `generate()` on the same prompts (greedy, EOS ignored, same token count);
  * greedy agreement of each configuration with `hf` in the same dtype;
  * the memory read bandwidth measured here and each configuration's roofline: the bytes one
    decoding step reads (its weights, without the embedding table) ÷ bandwidth;
  * the verify cost curve c(q)/c(1), q = 1…64, per configuration (engines.probe), and
    llama.cpp's own on the same GGUF (logits for every row, its cache rewound each time),
    interleaved round by round, with the increments c(q) − c(1);
  * TPOT split into the one-token forward at the decode's mean cache length (timed after 128,
    512 and 1,024 cached tokens: the growth is attention over the cache) and the loop around it;
  * llama.cpp on the same GGUF file and token ids, when `make install-llamacpp` put it in its
    venv (bench/tools/llamacpp_peer.py: a worker process, interleaved like the other sides): its
    tokens/s and time per output token (TPOT: the one-token steps after the first token) beside
    ours.
A configuration is engine:weights[:dtype][:kernel][:compile]; dtype defaults to the weights' own
float type (float32 for int8/int4 activations outside the kernels), kernel to auto (engines.load;
native_q8a: int8 activations, asked for by name).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from bench.decode.loop import generate
from bench.tools import llamacpp_peer
from engines import bf16gguf, probe
from engines.load import KERNELS, gguf_format, load
from groundfloor.clock import Clock, settle_heap
from groundfloor.machine import cpu_name
from groundfloor.models import embedded_gguf, load_tokenizer, resolve_device
from groundfloor.prompting import encode
from groundfloor.sampling import SamplingParams
from methods.registry import Context, build_method
from tasks.loader import _task_cfg, load_prompts

DEFAULT = ["hf:float32", "lean:float32", "lean:int8", "lean:int4"]
CURVE = (1, 2, 4, 8, 16, 32, 64)


def parse(spec: str) -> dict:
    """engine:weights[:dtype][:kernel][:compile], e.g. lean:int4:native_q8a."""
    parts = spec.split(":")
    if parts[0] not in ("hf", "lean") or len(parts) < 2:
        raise SystemExit(
            f"error: --configs {spec!r}: use engine:weights[:dtype][:kernel][:compile], "
            f"engine hf or lean"
        )
    w, rest = parts[1], parts[2:]
    kernel = next((p for p in rest if p in KERNELS), "auto")
    dtypes = [p for p in rest if p not in KERNELS and p != "compile"]
    # hf runs a float format as its dtype; lean chooses its own (float32 activations on our
    # kernels, bfloat16 weights included), resolved at load
    floats = ("float32", "bfloat16", "float16")
    dtype = dtypes[0] if dtypes else (w if parts[0] == "hf" and w in floats else "auto")
    return {
        "engine": parts[0],
        "weights": w,
        "dtype": dtype,
        "kernel": kernel,
        "compile": "compile" in rest,
        "label": spec,
    }


@torch.inference_mode()
def hf_generate(model, ids: list[int], n: int, device) -> tuple[list[int], float]:
    inp = torch.tensor([ids], device=device)
    if device.type == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    out = model.generate(
        inp,
        attention_mask=torch.ones_like(inp),
        do_sample=False,
        max_new_tokens=n,
        min_new_tokens=n,
        pad_token_id=0,
    )
    if device.type == "cuda":
        torch.cuda.synchronize()
    return out[0, len(ids) :].tolist(), time.perf_counter() - t


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="embedded:smollm2-135m")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--configs", nargs="+", default=DEFAULT)
    ap.add_argument("--task", default="core", help="prompts from this task (conf/task/)")
    ap.add_argument("--per-task", type=int, default=None, help="the first N of each task")
    ap.add_argument("--prompts", type=int, default=4, help="without --per-task: the first N")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-curve", action="store_true", help="skip the c(q) curves")
    ap.add_argument("--out", default=None, help="also write the results as JSON here")
    ap.add_argument(
        "--llamacpp",
        choices=("auto", "off"),
        default="auto",
        help="llama.cpp on the same GGUF beside ours (auto: when make install-llamacpp ran)",
    )
    return ap.parse_args(argv)


def main(argv=None) -> dict:
    a = parse_args(argv)
    device = resolve_device(a.device)
    tok = load_tokenizer(a.model)
    configs = [parse(s) for s in a.configs]
    engines = {}
    for c in configs:
        eng, choice = load(
            a.model,
            device,
            engine=c["engine"],
            weights=c["weights"],
            dtype=c["dtype"],
            kernel=c["kernel"],
            compile=c["compile"],
        )
        engines[c["label"]] = (eng, choice)
        c["dtype"] = choice["dtype"]  # as resolved (lean's auto)
    if a.per_task:
        prompts = load_prompts(_task_cfg(a.task), limit=a.per_task)
    else:
        prompts = load_prompts(_task_cfg(a.task), limit=max(1, a.prompts // 4 + 1))[: a.prompts]
    inputs = [encode(tok, [{"role": "user", "content": p.turns[0]}], True) for p in prompts]
    # generate() on the hf engines' own models, one per dtype
    gen_models = {
        c["dtype"]: engines[c["label"]][0].model
        for c in configs
        if c["engine"] == "hf" and not c["compile"]
    }
    peers = start_peers(a.model, a.llamacpp, configs)
    ars = {
        lbl: build_method("ar", Context(e, tok, device, e.dtype, None))
        for lbl, (e, _) in engines.items()
    }
    settle_heap()  # as a run does before its warm-up (groundfloor.clock)
    times, tpot, outs = decode_interleaved(a, device, inputs, ars, gen_models, peers)
    curves, split = {}, {}
    if not a.no_curve:  # ours and llama.cpp's, interleaved round by round; medians of rounds
        curves = measure_curves(engines, peers, a.repeats)
        lens = [len(ids) + a.tokens / 2 for ids in inputs]  # the mean cache length of a TPOT
        for lbl, (eng, _) in engines.items():
            split[lbl] = tpot_split(eng, statistics.median(tpot[("ours", lbl)]), lens)
    for peer in peers.values():
        peer.close()
    bw = probe.read_bandwidth(device)
    n = a.tokens * len(inputs)
    result = {
        "model": a.model,
        "prompt_ids": [p.id for p in prompts],
        "device": device.type,
        "cpu": _cpu(),
        "bandwidth_gbs": bw / 1e9,
        "prompts": len(inputs),
        "tokens": a.tokens,
        "repeats": a.repeats,
        "rows": [],
    }
    gen_tps = {d: n / sum(times[("generate", d)]) for d in gen_models}
    for c in configs:
        row = config_row(c, configs, engines, n, bw, times, tpot, outs, gen_tps)
        if not a.no_curve:
            costs = curves[c["label"]]
            row["c_ms"] = {q: v * 1e3 for q, v in costs.items()}
            row["c_ratio"] = probe.ratios(costs)
            row["tpot_split"] = split[c["label"]]
        result["rows"].append(row)
    result["generate_tokens_per_s"] = gen_tps
    result["llamacpp"] = {
        fmt: peer_summary(fmt, peer, result["rows"], n, times, tpot, outs, curves)
        for fmt, peer in peers.items()
    }
    report(result)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=1)
    return result


def decode_interleaved(a, device, inputs, ars, gen_models, peers) -> tuple[dict, dict, dict]:
    """Every side (our engines' ar, generate() per dtype, llama.cpp) on every prompt, warmed
    up outside the clock, the sides' order rotated from repeat to repeat: per side the median
    time of each prompt, the median TPOT of each prompt, and the last repeat's greedy ids."""
    greedy, clock = SamplingParams(), Clock(device)
    sides = [("ours", lbl) for lbl in ars] + [("generate", d) for d in gen_models]
    sides += [("llamacpp", fmt) for fmt in peers]  # one per GGUF: the file's format
    for kind, key in sides:  # warm-up (and compile) outside the clock
        if kind == "ours":
            generate(ars[key], inputs[0], 8, greedy, set(), clock, device=device)
        elif kind == "llamacpp":
            peers[key].decode(inputs[0], 8)
        else:
            hf_generate(gen_models[key], inputs[0], 8, device)
    times, outs = {s: [] for s in sides}, {s: [] for s in sides}
    tpot = {s: [] for s in sides}  # seconds per output token after the first, per prompt
    for i, ids in enumerate(inputs):
        per, per_tpot, last = {s: [] for s in sides}, {s: [] for s in sides}, {}
        for r in range(a.repeats):
            shift = (i * a.repeats + r) % len(sides)
            for s in sides[shift:] + sides[:shift]:
                if s[0] == "ours":
                    res = generate(ars[s[1]], ids, a.tokens, greedy, set(), clock, device=device)
                    wall = res.times_ns["wall"] / 1e9
                    per[s].append(wall)
                    per_tpot[s].append((wall - res.times_ns["ttft"] / 1e9) / (a.tokens - 1))
                    last[s] = res.output_ids
                elif s[0] == "llamacpp":
                    last[s], t_prefill, t_decode = peers[s[1]].decode(ids, a.tokens)
                    per[s].append(t_prefill + t_decode)
                    per_tpot[s].append(t_decode / (a.tokens - 1))
                else:
                    last[s], dt = hf_generate(gen_models[s[1]], ids, a.tokens, device)
                    per[s].append(dt)
        for s in sides:
            outs[s].append(last[s])
            times[s].append(statistics.median(per[s]))
            if per_tpot[s]:
                tpot[s].append(statistics.median(per_tpot[s]))
    return times, tpot, outs


def config_row(c, configs, engines, n, bw, times, tpot, outs, gen_tps) -> dict:
    """One configuration's line: tokens/s, its roofline share, agreement with hf, TPOT."""
    eng, choice = engines[c["label"]]
    tps = n / sum(times[("ours", c["label"])])
    step_bytes = eng.step_weight_bytes()
    roof = bw / step_bytes
    ref = next(
        (x["label"] for x in configs if x["engine"] == "hf" and x["dtype"] == c["dtype"]), None
    )
    same = (
        None
        if ref is None
        else sum(a_ == b_ for a_, b_ in zip(outs[("ours", c["label"])], outs[("ours", ref)]))
    )
    return {
        "config": c["label"],
        "engine": eng.name,
        "weights": eng.weights,
        "dtype": str(eng.dtype).removeprefix("torch."),
        "kernels": choice.get("kernels"),
        "step_mb": step_bytes / 1e6,
        "tokens_per_s": tps,
        "vs_generate": tps / gen_tps[c["dtype"]] if c["dtype"] in gen_tps else None,
        "roofline_tokens_per_s": roof,
        "of_roofline": tps / roof,
        "same_greedy_as_hf": same,
        "compile_s": choice.get("compile_s"),
        "tpot_ms": 1e3 * statistics.median(tpot[("ours", c["label"])]),
    }


def peer_summary(fmt, peer, rows, n, times, tpot, outs, curves) -> dict:
    """llama.cpp's line on one GGUF: its tokens/s, TPOT, c(q) and greedy agreement with our
    float32 engine."""
    side = ("llamacpp", fmt)
    ref = next((r for r in rows if r["weights"] == "float32"), None)
    return {
        "version": peer.version,
        "gguf": str(peer.gguf),
        "tokens_per_s": n / sum(times[side]),
        "tpot_ms": 1e3 * statistics.median(tpot[side]),
        "c_ms": {q: v * 1e3 for q, v in curves.get(f"llamacpp:{fmt}", {}).items()},
        # greedy agreement with our float32 engine (the GGUF's values exactly); llama.cpp
        # quantizes activations per block, so near-ties may go either way
        "same_greedy_as": ref
        and {ref["config"]: sum(x == y for x, y in zip(outs[side], outs[("ours", ref["config"])]))},
    }


def measure_curves(engines: dict, peers: dict, rounds: int) -> dict:
    """{label: {q: seconds}} for each engine and each peer ("llamacpp:FORMAT"): c(q) after 128
    cached tokens, logits for every row, each side timed in turn within a round, `rounds` rounds
    with the order rotating; medians over the rounds."""
    sides = list(engines) + [f"llamacpp:{fmt}" for fmt in peers]
    got = {s: {} for s in sides}
    for r in range(max(1, rounds)):
        for s in sides[r % len(sides) :] + sides[: r % len(sides)]:
            if s.startswith("llamacpp:"):
                costs = peers[s.split(":", 1)[1]].curve(CURVE, context=128, repeats=3)
            else:
                costs = probe.step_costs(engines[s][0], CURVE, repeats=3)
            for q, t in costs.items():
                got[s].setdefault(q, []).append(t)
    return {s: {q: statistics.median(v) for q, v in c.items()} for s, c in got.items()}


SPLIT_CONTEXTS = (128, 512, 1024)


def tpot_split(eng, tpot_s: float, lens: list[float]) -> dict:
    """Where a TPOT goes: the one-token forward timed after 128, 512 and 1,024 cached tokens
    (their growth is attention over the cache), the forward at the prompts' mean cache length
    during decoding (interpolated), and the rest: the decode loop around the forward."""
    c1 = {n: probe.step_costs(eng, (1,), context=n, repeats=5)[1] for n in SPLIT_CONTEXTS}
    mean = statistics.mean(lens)
    lo = max((n for n in SPLIT_CONTEXTS if n <= mean), default=SPLIT_CONTEXTS[0])
    hi = min((n for n in SPLIT_CONTEXTS if n >= mean), default=SPLIT_CONTEXTS[-1])
    f = c1[lo] if hi == lo else c1[lo] + (c1[hi] - c1[lo]) * (mean - lo) / (hi - lo)
    return {
        "tpot_ms": tpot_s * 1e3,
        "mean_cache": mean,
        "forward_ms_at": {n: t * 1e3 for n, t in c1.items()},
        "forward_ms": f * 1e3,
        "loop_ms": (tpot_s - f) * 1e3,
    }


def start_peers(model: str, mode: str, configs: list[dict]) -> dict:
    """llama.cpp's workers by GGUF format: on the model's own GGUF, and where a config runs
    the 16-bit copy (weights bfloat16), on a BF16 GGUF of the same weights (engines.bf16gguf);
    {} when off, not installed or without a GGUF. A worker that dies starting is one line."""
    gguf = embedded_gguf(model)
    python = llamacpp_peer.venv_python()
    if mode == "off" or gguf is None or not python.exists():
        if mode != "off":
            why = "the model has no GGUF file" if gguf is None else f"{python} is missing"
            print(f"llama.cpp not measured: {why} (make install-llamacpp)")
        return {}
    files = {gguf_format(gguf): gguf}
    if any(c["weights"] == "bfloat16" and c["engine"] == "lean" for c in configs):
        files["BF16"] = bf16gguf.written(gguf)
    peers = {}
    for fmt, path in files.items():
        try:
            peers[fmt] = llamacpp_peer.Peer(path, python)
        except RuntimeError as e:  # the worker died starting (its own error, in one line)
            print(f"llama.cpp not measured on {fmt}: {e}")
    return peers


def _cpu() -> str:
    return cpu_name()


def report(r: dict) -> None:
    print(
        f"model {r['model']} · {r['device']} · {r['cpu']} · {r['prompts']} prompts × "
        f"{r['tokens']} new tokens × {r['repeats']} repeats (medians, prefill included)"
    )
    print(f"memory read bandwidth here: {r['bandwidth_gbs']:.1f} GB/s")
    for d, t in r["generate_tokens_per_s"].items():
        print(f"  transformers generate()  {d:9s} {t:7.2f} tokens/s")
    print(
        f"  {'config':24s} {'step MB':>8s} {'tok/s':>7s} {'÷gen':>6s} {'roofline':>9s} "
        f"{'of roof':>7s} {'same':>5s}"
    )
    for row in r["rows"]:
        vs = f"{row['vs_generate']:.2f}×" if row["vs_generate"] else "–"
        same = (
            "–"
            if row["same_greedy_as_hf"] is None
            else f"{row['same_greedy_as_hf']}/{r['prompts']}"
        )
        print(
            f"  {row['config']:24s} {row['step_mb']:8.0f} {row['tokens_per_s']:7.2f} "
            f"{vs:>6s} {row['roofline_tokens_per_s']:9.1f} {row['of_roofline']:7.0%} "
            f"{same:>5s}"
        )
    peers = r.get("llamacpp") or {}
    for fmt, lc in peers.items():
        same = lc["same_greedy_as"] or {}
        agree = " ".join(f"same greedy as {k}: {v}/{r['prompts']}" for k, v in same.items())
        print(
            f"  llama.cpp {lc['version']} on the {fmt} GGUF: {lc['tokens_per_s']:.2f} tokens/s, "
            f"TPOT {lc['tpot_ms']:.1f} ms; {agree}"
        )
    for row in r["rows"]:  # each config against llama.cpp on the same weights
        fmt = "BF16" if row["weights"] == "bfloat16" else next(iter(peers), None)
        if fmt in peers and (row["weights"] != "bfloat16" or fmt == "BF16"):
            print(
                f"  {row['config']:24s} TPOT {row['tpot_ms']:6.1f} ms = "
                f"{row['tpot_ms'] / peers[fmt]['tpot_ms']:.2f}× llama.cpp's on {fmt}"
            )
    if r["rows"] and "c_ratio" in r["rows"][0]:
        report_curves(r["rows"], peers)


def report_curves(rows: list[dict], peers: dict) -> None:
    """c(q)/c(1) and c(q) − c(1) of each configuration (and llama.cpp's), then the TPOT split."""
    qs = list(rows[0]["c_ratio"])
    print(
        f"  verify cost c(q)/c(1) ({'c(1) ms':>7s}) "
        + " ".join(f"q={q:<4}" for q in qs)
        + "   (after 128 cached tokens, logits for every row, interleaved)"
    )
    curves = [(row["config"], row["c_ms"]) for row in rows]
    curves += [(f"llama.cpp {fmt}", lc["c_ms"]) for fmt, lc in peers.items() if lc.get("c_ms")]
    for name, c in curves:
        print(f"  {name:24s} {c[1]:7.2f}  " + " ".join(f"{c[q] / c[1]:6.2f}" for q in qs if q in c))
    print(f"  c(q) − c(1), ms{'':17s}" + " ".join(f"q={q:<4}" for q in qs[1:]))
    for name, c in curves:
        print(f"  {name:24s} {'':7s}  " + " ".join(f"{c[q] - c[1]:6.2f}" for q in qs[1:] if q in c))
    for row in rows:
        sp = row["tpot_split"]
        at = " ".join(f"{t:.2f} ms @{n}" for n, t in sp["forward_ms_at"].items())
        print(
            f"  {row['config']:24s} TPOT {sp['tpot_ms']:.2f} ms = forward "
            f"{sp['forward_ms']:.2f} (at a mean cache of {sp['mean_cache']:.0f}; "
            f"one-token forward {at}) + loop "
            f"{sp['loop_ms']:.2f}"
        )


if __name__ == "__main__":
    main()
