"""The GPU path in one command: every method, on models built here, through the suite's own run.

    python -m bench.tools.gpu_check                    # cuda when there is one, else the CPU
    python -m bench.tools.gpu_check --device cpu --shapes tiny --tokens 16 --out DIR
    make gpu-check                               # the same; README: on a GPU machine offline

Nothing is downloaded and no model is read from a hub. The models are built in this process:
  smollm2  SmolLM2-135M's shape (30 layers, 576 wide, 49,152 tokens) with random weights and its
           output layer scaled by --peak, so greedy choices are far from ties; run in float32
           and in bfloat16, with the shipped drafters (artifacts/smollm2-135m/) for their code
           paths (they accept little on random weights);
  tiny     the tests' shape (2 layers, 32 wide, 128 tokens) with drafters that accept: the
           target's weights perturbed by 10% as the draft model, random Medusa and EAGLE heads.
Each (model, dtype, method) is one cell of `bench.run.runner.execute` on the core tasks (one prompt
per category), with its interleaved `ar` (or `hf_ar`) baseline, and is checked for:
  exact      greedy ids equal to the baseline's on every turn; a divergence is classified by
             bench.outputs.verdict (a near-tie passes, in bfloat16 where the kernels round
             differently; a mismatch fails);
  clock      on CUDA, every turn's event time within 10% of the host's wall time for it
             (records' wall_s against host_wall_s); on the CPU both are one clock;
  memory     a peak-memory delta measured for every turn (reset per turn) on CUDA;
  accepted   on the tiny target, the methods with accepting drafters accept drafted tokens;
  sampling   check=distribution at T = 1 for one chain (draft) and one tree (eagle) method on
             the tiny target: Bonferroni p ≥ 0.001.
Writes gpu_check.md (the table) and summary.csv into --out, and each cell under --out/cells/<time>/
(check.json: the code and settings that measured them); exit status 1 when a check fails, 2 on
bad input. Every check measures afresh; --resume (make gpu-check resume=true) continues the last
check's cells instead, and is refused when the code (commit, or the tree's modifications) or the
settings differ from their record.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from pathlib import Path

import pandas as pd
import torch

from bench.outputs.records import load
from bench.run.cells import code_change
from bench.run.config import compose, method_defaults
from bench.run.runner import execute
from drafters import eagle, medusa
from groundfloor import provenance
from groundfloor.errors import UserError
from groundfloor.machine import cpu_name
from groundfloor.models import resolve_device
from groundfloor.paths import ROOT, group_options, writable_dir
from methods.registry import method_tests
from tasks.loader import _task_cfg, load_prompts

# every method of conf/method/ but the plain baselines (k: 0, what the others interleave): a new
# method's YAML puts it here
METHODS = [m for m in group_options("method") if method_defaults(m).get("k") != 0]
ACCEPTING = ("draft", "oracle", "ngram")  # on the tiny target these must accept drafted tokens
SHAPES = {
    "smollm2": dict(vocab=49152, hidden=576, inter=1536, layers=30, heads=9, kv=3),
    "tiny": dict(vocab=128, hidden=32, inter=64, layers=2, heads=4, kv=2),
}
CLOCK_TOLERANCE = 0.10
MIN_PVALUE = 1e-3
SPECIALS = ["<unk>", "<|im_start|>", "<|im_end|>", "<pad>"]
CHAT = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }} {{ m['content'] }}<|im_end|> "
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant {% endif %}"
)


@functools.cache
def tokenizer(vocab: int):
    """A word-level tokenizer of `vocab` ids over the benchmark prompts' most frequent words."""
    import re
    from collections import Counter

    words = Counter(
        w
        for p in load_prompts(_task_cfg("core"), limit=5)
        for t in p.turns
        for w in re.findall(r"\w+|[^\w\s]", t)
    )
    return word_tokenizer(["user", "assistant"] + [w for w, _ in words.most_common()], vocab)


def word_tokenizer(words: list[str], vocab: int):
    """A word-level tokenizer of `vocab` ids: the chat specials, `words` in order (as many as
    fit), then filler words w0, w1, ...; whitespace and punctuation split; a ChatML template."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    table: dict[str, int] = {}
    for w in SPECIALS + words:
        if len(table) < vocab and w not in table:
            table[w] = len(table)
    for i in range(vocab - len(table)):
        table[f"w{i}"] = len(table)
    tk = Tokenizer(models.WordLevel(vocab=table, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()]
    )
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk,
        unk_token="<unk>",
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<pad>",
    )
    tok.chat_template = CHAT
    return tok


def model(shape: str, seed: int, peak: float):
    """A Llama of `shape` with random weights; its output layer scaled by `peak`."""
    from transformers import LlamaConfig, LlamaForCausalLM

    s = SHAPES[shape]
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=s["vocab"],
        hidden_size=s["hidden"],
        intermediate_size=s["inter"],
        num_hidden_layers=s["layers"],
        num_attention_heads=s["heads"],
        num_key_value_heads=s["kv"],
        max_position_embeddings=2048,
        rope_theta=100000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=3,
    )
    m = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        m.lm_head.weight.mul_(peak)
    return m


def perturbed(m, scale: float, seed: int):
    """A copy of `m` with each weight moved by `scale` × its standard deviation: a draft model
    that agrees with `m` on most greedy tokens."""
    import copy

    d = copy.deepcopy(m)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in d.parameters():
            p.add_(torch.randn(p.shape, generator=g) * scale * p.std())
    return d


def random_drafter(name: str, target, path: Path, seed: int = 0) -> Path:
    """A randomly initialised drafter `name` for `target` (a transformers model) at `path`,
    written by the function its conf/drafter/<name>.yaml names in `_test.random` (a drafter
    added by docs/recipes.md's recipe: the tests and the tiny check find it there)."""
    from hydra.utils import get_method
    from omegaconf import OmegaConf

    node = OmegaConf.load(ROOT / "conf" / "drafter" / f"{name}.yaml").get("_test") or {}
    if not node.get("random"):
        raise UserError(
            f"conf/drafter/{name}.yaml names no `_test.random` (the function writing a random "
            f"{name} drafter for a tiny target: docs/recipes.md)"
        )
    return get_method(str(node.random))(target, Path(path), seed)


def tiny_drafters(target, folder: Path) -> dict:
    """Random Medusa, EAGLE and EAGLE-3 heads for the tiny target, and its perturbed copy; any
    other drafter of conf/drafter/ from its own `_test.random` (random_drafter)."""
    out = {}
    d = folder / "draft"
    save_model(perturbed(target, 0.1, 5), d)
    out["draft"] = d
    torch.manual_seed(1)
    heads = medusa.MedusaHeads(target.config.hidden_size, 4, 1)
    medusa.save(heads, folder / "medusa", "gpu-check", dtype=torch.float32)
    out["medusa"] = folder / "medusa"
    for kind in ("eagle", "eagle3"):
        torch.manual_seed(2)
        d2t = torch.arange(target.config.vocab_size) if kind == "eagle3" else None
        layers = eagle.default_layers(kind, target.config.num_hidden_layers)
        head = eagle.EagleHead(eagle.head_config(target.config, kind), kind, layers, d2t)
        eagle.save(head.attach(target), folder / kind, "gpu-check", dtype=torch.float32)
        out[kind] = folder / kind
    # the four above are built here as the check was tuned on (a perturbed copy that accepts);
    # every other drafter of conf/drafter/ is found and built with no edit here
    for name in group_options("drafter"):
        if name not in out:
            out[name] = random_drafter(name, target, folder / name)
    return out


def shipped_drafters() -> dict:
    """The embedded model's drafters (conf/drafter/), where conf/model/smollm2-135m.yaml names
    their folders."""
    model = compose(["model=smollm2-135m"], "gpu_check").model
    paths = {k: ROOT / str(model[k]) for k in group_options("drafter") if model.get(k)}
    return {k: p for k, p in paths.items() if p.is_dir()}


def save_model(m, path: Path) -> Path:
    m.save_pretrained(path)
    tokenizer(m.config.vocab_size).save_pretrained(path)
    return path


def tiny_knobs(method: str) -> list[str]:
    """The method's knobs on tiny random models, from its YAML's `_test.tiny` (Medusa's random
    heads carry neither the frequency list that restricts their vocabulary nor the rank
    accuracies an auto tree is sized from: a static tree over the full vocabulary)."""
    tiny = method_tests(method).get("tiny") or {}
    return [f"method.{k}={'null' if v is None else v}" for k, v in tiny.items()]


def cell(target: Path, dtype: str, method: str, drafters: dict, extra: dict, device: str, out, a):
    """One run of the suite: its summary row and records. extra: overrides per method."""
    overrides = [
        "model=hf",
        f"model.target={target}",
        f"model.dtype={dtype}",
        f"device={device}",
        f"method={method}",
        "task=core",
        "limit=1",
        f"max_new_tokens={a.tokens}",
        "repeats=1",
        "warmup=1",
        "remeasure=0",
        f"out={out}",
        # ++: also a drafter conf/model/hf.yaml has no key for (a new one: docs/recipes.md)
        *(f"++model.{k}={v}" for k, v in drafters.items()),
        *(["engine=hf"] if method.startswith("hf_") else []),
        *extra.get(method, []),
    ]
    if a.sampling:
        overrides += ["temperature=1", "check=distribution", f"dist_samples={a.dist_samples}"]
    summary, path, _ = execute(compose(overrides, "gpu_check"), out, None, a.shared)
    row = summary[summary.task == "all"] if (summary.task == "all").any() else summary
    return row.iloc[0], load(path)


def judge(model_name: str, dtype: str, method: str, row, recs: pd.DataFrame, cuda: bool, a) -> dict:
    """The checks of one cell, as one row of the report."""
    mine = recs[recs.role == "method"]
    verdicts = mine.verdict.value_counts().to_dict() if "verdict" in mine else {}
    rel = ((recs.wall_s - recs.host_wall_s).abs() / recs.host_wall_s.clip(lower=1e-9)).max()
    peaks = recs.peak_mem_delta_mb
    out = {
        "model": model_name,
        "dtype": dtype,
        "method": method,
        "temperature": 1.0 if a.sampling else 0.0,
        "turns": len(mine),
        "exact": int(verdicts.get("exact", 0)),
        "near_ties": int(verdicts.get("near-tie", 0)),
        "mismatches": int(verdicts.get("mismatch", 0)),
        "tokens_per_s": round(float(row.tokens_per_s), 1),
        "speedup": round(float(row.speedup), 3),
        "tau": round(float(row.tau), 3) if pd.notna(row.tau) else None,
        "accepted_tokens": int(mine.accepted_tokens.sum()),
        "clock_gap": round(float(rel), 4),
        "peak_mem_mb": round(float(peaks.max()), 1) if peaks.notna().any() else None,
        "dist_pvalue": float(row.dist_pvalue) if pd.notna(row.get("dist_pvalue")) else None,
    }
    problems = []
    if out["mismatches"]:
        problems.append(f"{out['mismatches']} greedy mismatches")
    if not a.sampling and out["exact"] + out["near_ties"] < out["turns"] - verdicts.get(
        "after-divergence", 0
    ):
        problems.append("turns without a verdict")
    if cuda and rel > CLOCK_TOLERANCE:
        problems.append(f"event time {rel:.0%} off the host's")
    if cuda and peaks.isna().any():
        problems.append("a turn without a peak-memory reading")
    if (
        model_name == "tiny"
        and method in ACCEPTING
        and not a.sampling
        and not out["accepted_tokens"]
    ):
        problems.append("no drafted token accepted")
    if a.sampling and (out["dist_pvalue"] is None or out["dist_pvalue"] < MIN_PVALUE):
        problems.append(f"check=distribution p = {out['dist_pvalue']}")
    out["ok"] = not problems
    out["problems"] = "; ".join(problems)
    return out


def markdown(rows: list[dict], head: str) -> str:
    cols = [
        "model",
        "dtype",
        "method",
        "temperature",
        "turns",
        "exact",
        "near_ties",
        "mismatches",
        "tokens_per_s",
        "speedup",
        "tau",
        "clock_gap",
        "peak_mem_mb",
        "dist_pvalue",
        "ok",
        "problems",
    ]
    lines = [head, "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        lines.append("| " + " | ".join("" if r[c] is None else str(r[c]) for c in cols) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="auto", help="auto | cuda | cpu")
    ap.add_argument(
        "--shapes", default=None, help="smollm2,tiny (default: both on CUDA, tiny on a CPU)"
    )
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--dtypes", default="float32,bfloat16", help="for the smollm2 shape")
    ap.add_argument("--tokens", type=int, default=32, help="new tokens per turn")
    ap.add_argument("--peak", type=float, default=10.0, help="output-layer scale of smollm2")
    ap.add_argument("--dist-samples", type=int, default=200)
    ap.add_argument("--out", default="results/gpu_check")
    ap.add_argument(
        "--resume",
        action="store_true",
        help="continue the last check's cells (make gpu-check resume=true) instead of measuring "
        "afresh; refused when the code or the settings differ from theirs",
    )
    try:
        return check(ap.parse_args(argv))
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def check(a) -> int:
    """Every cell, judged; the report written into --out; 0 when every check passes, else 1."""
    device = resolve_device(a.device)
    cuda = device.type == "cuda"
    shapes = (a.shapes or ("smollm2,tiny" if cuda else "tiny")).split(",")
    methods = a.methods.split(",")
    for name, allowed, what in (
        ("--shapes", SHAPES, shapes),
        ("--methods", METHODS, methods),
        ("--dtypes", ("float32", "bfloat16", "float16"), a.dtypes.split(",")),
    ):
        bad = [w for w in what if w not in allowed]
        if bad:
            raise UserError(f"{name} {bad[0]!r} is not valid; choose from {', '.join(allowed)}")
    out = writable_dir(a.out, "--out")
    cells = cells_dir(out, a, device)
    t0 = time.time()
    rows: list[dict] = []
    a.shared, a.sampling = {}, False
    for shape in shapes:
        target_model = model(shape, 0, a.peak if shape == "smollm2" else 1.0)
        target = save_model(target_model, out / "models" / shape)
        if shape == "tiny":
            drafters = tiny_drafters(target_model, out / "models" / "tiny-drafters")
            # a 32-wide model on a CPU: a second thread only waits for the first
            one = ["device.threads=1"] if device.type == "cpu" else []
            extra = {m: tiny_knobs(m) + one for m in METHODS}
            dtypes = ["float32"]
        else:
            drafters, dtypes, extra = shipped_drafters(), a.dtypes.split(","), {}
        del target_model
        for dtype in dtypes:
            for method in methods:
                where = cells / f"{shape}-{dtype}-{method}"
                row, recs = cell(target, dtype, method, drafters, extra, device.type, where, a)
                rows.append(judge(shape, dtype, method, row, recs, cuda, a))
                print(_line(rows[-1]), file=sys.stderr, flush=True)
        if shape == "tiny":
            a.sampling = True
            for method in ("draft", "eagle"):
                where = cells / f"tiny-float32-{method}-T1"
                row, recs = cell(target, "float32", method, drafters, extra, device.type, where, a)
                rows.append(judge(shape, "float32", method, row, recs, cuda, a))
                print(_line(rows[-1]), file=sys.stderr, flush=True)
            a.sampling = False
        a.shared.clear()
    wall = time.time() - t0
    where = torch.cuda.get_device_name(device) if cuda else cpu_name()
    head = (
        f"# GPU-path check on {device.type} ({where}): {len(rows)} cells, "
        f"{sum(r['ok'] for r in rows)} pass, {wall:.0f} s; torch {torch.__version__}; "
        f"cells in {cells}{' (resumed)' if a.resume else ''}"
    )
    pd.DataFrame(rows).to_csv(out / "summary.csv", index=False)
    (out / "gpu_check.md").write_text(markdown(rows, head))
    (out / "gpu_check.json").write_text(
        json.dumps({"wall_s": round(wall, 1), "cells": str(cells), "rows": rows}, indent=1)
    )
    print(markdown(rows, head))
    return 0 if all(r["ok"] for r in rows) else 1


def settings(a, device) -> dict:
    """What shapes a cell's numbers beyond its run config: the models' output-layer scale is
    not in the cell's hash (bench.run.cells), so the check keeps these itself."""
    return {
        "--device": device.type,
        "--tokens": a.tokens,
        "--peak": a.peak,
        "--dist-samples": a.dist_samples,
    }


def cells_dir(out: Path, a, device) -> Path:
    """The folder of this check's cells: a new one under out/cells/ (measured afresh), or with
    --resume the last one there, once its record (check.json) shows this code and these
    settings; another is refused in one line, its cells left as they are."""
    now = {"code": provenance.code_state(), "settings": settings(a, device)}
    earlier = sorted((out / "cells").glob("*/check.json"))
    if a.resume and earlier:
        refuse_other(earlier[-1].parent, json.loads(earlier[-1].read_text()), now)
        print(f"resuming the cells in {earlier[-1].parent}", file=sys.stderr)
        return earlier[-1].parent
    if a.resume:
        print(f"no earlier cells in {out / 'cells'}: measuring afresh", file=sys.stderr)
    stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
    folder, n = out / "cells" / stamp, 1
    while folder.exists():  # two checks within a second
        n += 1
        folder = out / "cells" / f"{stamp}-{n}"
    folder.mkdir(parents=True)
    (folder / "check.json").write_text(json.dumps(now, indent=1))
    return folder


def refuse_other(folder: Path, then: dict, now: dict) -> None:
    """UserError naming what differs between the cells' record and this check, if anything."""
    why = []
    if change := code_change(then.get("code") or {}, now["code"]):
        why.append(f"were measured at {change}")
    old = then.get("settings", {})
    moved = [f"{k} {old.get(k)} → {v}" for k, v in now["settings"].items() if old.get(k) != v]
    if moved:
        why.append(f"were measured with other settings ({', '.join(moved)})")
    if why:
        raise UserError(
            f"cells in {folder} {'; and '.join(why)}; they are left as they are: run without "
            "resume=true (--resume) to measure afresh"
        )


def _line(r: dict) -> str:
    state = "ok" if r["ok"] else f"FAIL ({r['problems']})"
    return (
        f"{r['model']} {r['dtype']} {r['method']} T={r['temperature']:g}: {state}; "
        f"{r['exact']}/{r['turns']} exact, {r['tokens_per_s']} tok/s, {r['speedup']}×"
    )


if __name__ == "__main__":
    sys.exit(main())
