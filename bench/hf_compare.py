"""Is our baseline honest? Our `ar` loop against transformers `generate()` on the same prompts.

    python -m bench.hf_compare [--dtype float32] [--prompts 6] [--tokens 64] [--repeats 3]

Same model object, same prompts, same number of new tokens (EOS ignored on both sides), greedy,
interleaved per prompt, warm-up outside the clock, medians. Also measures this machine's memory
read bandwidth in the same process and prints the memory-bandwidth roofline of plain decoding
(weight bytes ÷ bandwidth) and each side's fraction of it. A slow baseline would inflate every
speedup the suite reports; this makes the baseline's speed a printed, checkable number.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from bench.clock import Clock
from bench.loop import generate
from bench.models import load_model, resolve_device, resolve_dtype, weight_bytes
from bench.runner import AR_CFG, Context, build_method, encode
from bench.sampling import SamplingParams
from tasks.loader import _task_cfg, load_prompts


def read_bandwidth(device: torch.device, mb: int = 1024, reps: int = 5) -> float:
    """Bytes/s of a streaming read (a sum over a buffer far larger than the caches)."""
    x = torch.ones(mb * 2**20 // 4, dtype=torch.float32, device=device)
    x.sum()
    best = float("inf")
    for _ in range(reps):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        x.sum()
        if device.type == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t)
    return x.numel() * 4 / best


@torch.inference_mode()
def hf_generate(model, ids: list[int], n: int, device) -> tuple[list[int], float]:
    inp = torch.tensor([ids], device=device)
    if device.type == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    out = model.generate(inp, attention_mask=torch.ones_like(inp), do_sample=False,
                         max_new_tokens=n, min_new_tokens=n, pad_token_id=0)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return out[0, len(ids):].tolist(), time.perf_counter() - t


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="embedded:smollm2-135m")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--prompts", type=int, default=6)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args(argv)

    device, dtype = resolve_device(a.device), resolve_dtype(a.dtype)
    model, tok = load_model(a.model, device, dtype)
    ctx = Context(model, tok, device, dtype, None)
    ar = build_method(AR_CFG, ctx)
    prompts = load_prompts(_task_cfg("core"), limit=max(1, a.prompts // 4 + 1))[: a.prompts]
    clock, greedy = Clock(device), SamplingParams()
    ours, theirs, same = [], [], 0
    warm = encode(tok, [{"role": "user", "content": prompts[0].turns[0]}], True)
    generate(ar, warm, 8, greedy, set(), clock, device=device)
    hf_generate(model, warm, 8, device)
    for p in prompts:
        ids = encode(tok, [{"role": "user", "content": p.turns[0]}], True)
        t_ours, t_hf = [], []
        for r in range(a.repeats):
            for side in (("ours", "hf") if r % 2 == 0 else ("hf", "ours")):
                if side == "ours":
                    res = generate(ar, ids, a.tokens, greedy, set(), clock, device=device)
                    t_ours.append(res.times_ns["wall"] / 1e9)
                    out_ours = res.output_ids
                else:
                    out_hf, dt = hf_generate(model, ids, a.tokens, device)
                    t_hf.append(dt)
        same += out_ours == out_hf
        ours.append(statistics.median(t_ours))
        theirs.append(statistics.median(t_hf))

    n = a.tokens * len(prompts)
    tps_ours, tps_hf = n / sum(ours), n / sum(theirs)
    bw = read_bandwidth(device)
    wb = weight_bytes(model)
    roof = bw / wb
    print(f"model {a.model} · {device.type} · {a.dtype} · {len(prompts)} prompts × "
          f"{a.tokens} new tokens × {a.repeats} repeats (medians; prefill included)")
    print(f"  ours (ar loop)        {tps_ours:7.2f} tokens/s   {tps_ours / roof:6.1%} of roofline")
    print(f"  transformers generate {tps_hf:7.2f} tokens/s   {tps_hf / roof:6.1%} of roofline")
    print(f"  ratio ours / generate {tps_ours / tps_hf:7.2f}×")
    print(f"  roofline: {wb / 1e6:.0f} MB weights ÷ {bw / 1e9:.1f} GB/s read = {roof:.1f} tokens/s")
    print(f"  identical greedy outputs: {same}/{len(prompts)}")


if __name__ == "__main__":
    main()
