"""One benchmark run: load, warm up, then per prompt interleave baseline and method.

For every prompt, `repeats` times, the baseline (`ar`) and the method each generate the whole
conversation (turn 2 follows each side's own turn-1 answer), alternating which goes first.
Every turn becomes one line of records.jsonl, written and flushed as soon as the prompt is done,
so an interrupted run keeps what it measured. Then the greedy verdicts, summary.csv and a table.
"""

from __future__ import annotations

from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from bench import records as rec
from bench.interference import Band, LoadProbe, Rules, decode_per_token, judge, quiet_pairs
from bench.loop import generate
from bench.memory import PeakMemory
from bench.verdict import compare
from engines import probe
from engines.load import load as load_engine
from groundfloor.clock import Clock
from groundfloor.errors import UserError
from groundfloor.models import load_generation_config, load_tokenizer, resolve_device
from groundfloor.prompting import encode, eos_ids, seed_for
from groundfloor.sampling import SamplingParams
from methods.registry import Context, build_method
from tasks.loader import load_prompts
from tasks.prompt import Prompt


def context_limit(config) -> int | None:
    return getattr(config, "max_position_embeddings", None)


def fit_context(
    prompts: list[Prompt], tokenizer, max_new, limit: int | None, truncate, use_template: bool
) -> tuple[list[Prompt], list[str]]:
    """Prompts whose whole conversation (every user turn, templated, plus max_new tokens per
    turn) fits the model's context. Without `truncate` a prompt that does not fit is left out
    with one line on stderr (and counted as skipped); with truncate=left|right its longest turn
    is shortened from that side, in tokens, until it fits."""
    import sys

    if not limit:
        return prompts, []
    kept, skipped = [], []

    def need(p: Prompt) -> int:
        msgs = [{"role": "user", "content": t} for t in p.turns]
        return len(encode(tokenizer, msgs, use_template)) + max_new(p) * len(p.turns)

    for p in prompts:
        n = need(p)
        if n <= limit:
            kept.append(p)
            continue
        if not truncate:
            print(
                f"warning: prompt {p.id} needs {n} positions (its turns and {max_new(p)} new "
                f"tokens per turn), more than the model's {limit}; left out (task.truncate="
                f"left|right would shorten it)",
                file=sys.stderr,
            )
            skipped.append(p.id)
            continue
        turns = list(p.turns)
        while n > limit:
            i = max(range(len(turns)), key=lambda j: len(turns[j]))
            ids = tokenizer(turns[i], add_special_tokens=False)["input_ids"]
            cut = min(len(ids) - 1, n - limit + 8)
            if cut <= 0:
                break
            ids = ids[cut:] if truncate == "left" else ids[: len(ids) - cut]
            turns[i] = tokenizer.decode(ids)
            p = Prompt(p.id, p.task, p.category, turns, p.subcategory, p.max_new_tokens, p.meta)
            n = need(p)
        (kept if n <= limit else skipped).append(p if n <= limit else p.id)
    return kept, skipped


class Runner:
    def __init__(self, cfg: DictConfig, out_dir: Path):
        self.cfg, self.out = cfg, out_dir
        self.device = resolve_device(cfg.device.name)
        if self.device.type == "cpu" and cfg.device.get("threads"):
            torch.set_num_threads(int(cfg.device.threads))
        self.sampling = SamplingParams(float(cfg.temperature), int(cfg.top_k), float(cfg.top_p))
        task_cfg = OmegaConf.to_container(cfg.task, resolve=True)
        self.prompts = load_prompts(task_cfg, cfg.limit, cfg.get("limit_per_category"))
        if not self.prompts:
            raise UserError(f"task={cfg.task.name!r} selected no prompts")
        engine = str(cfg.engine)
        needs = cfg.method.get("engine")  # hf_pld, hf_assisted: transformers' model itself
        if needs and engine == "auto":
            engine = str(needs)
        self.target, self.choice = load_engine(
            str(cfg.model.target),
            self.device,
            engine=engine,
            weights=str(cfg.model.get("weights", "auto")),
            dtype=str(cfg.model.get("dtype", "auto")),
            kernel=str(cfg.model.get("kernel", "auto")),
            compile=bool(cfg.model.get("compile", False)),
        )
        self.tokenizer = load_tokenizer(str(cfg.model.target))
        if self.tokenizer is None:
            raise UserError(f"model.target={cfg.model.target!r} has no tokenizer")
        if needs and cfg.engine == "auto":
            self.choice["engine_reason"] = f"auto: method={cfg.method.name} runs on engine={needs}"
        self.dtype = self.target.dtype
        self.eos = eos_ids(
            self.tokenizer, self.target.config, load_generation_config(str(cfg.model.target))
        )
        self.ctx = Context(
            self.target,
            self.tokenizer,
            self.device,
            self.dtype,
            cfg.model,
            cfg.k,
            frozenset(self.eos),
        )
        self.baseline = build_method("ar", self.ctx)
        self.method = build_method(cfg.method, self.ctx)
        self.prompts, self.skipped = fit_context(
            self.prompts,
            self.tokenizer,
            self.max_new,
            context_limit(self.target.config),
            task_cfg.get("truncate"),
            bool(cfg.model.chat_template),
        )
        if not self.prompts:
            raise UserError(
                f"every prompt of task={cfg.task.name!r} is longer than the model's "
                f"context; set task.truncate=left or right"
            )
        self.clock = Clock(self.device)
        self.mem = PeakMemory(self.device)
        self.load = LoadProbe()
        self.rules = Rules(float(cfg.disturb_ratio), float(cfg.disturb_others))
        self.band = Band()
        self.done: set[tuple[str, str]] = set()  # (task, prompt id) already in records.jsonl
        self.k = self.ctx.k(cfg.method)

    # --- one conversation ---
    def conversation(self, method, prompt: Prompt, max_new: int) -> list[tuple]:
        """Every turn of `prompt` with `method`: [(prompt ids, TurnResult, peak bytes, load)]."""
        messages, turns = [], []
        for t, text in enumerate(prompt.turns):
            messages.append({"role": "user", "content": text})
            ids = encode(self.tokenizer, messages, bool(self.cfg.model.chat_template))
            gen = None
            if not self.sampling.greedy:
                gen = torch.Generator(device=self.device)
                gen.manual_seed(seed_for(self.cfg.seed, prompt.id, t))
            self.mem.start()
            self.load.start()
            res = generate(
                method, ids, max_new, self.sampling, self.eos, self.clock, gen, self.device
            )
            load = self.load.stop()
            peak = self.mem.peak_delta()
            turns.append((ids, res, peak, load))
            answer = self.tokenizer.decode(res.output_ids, skip_special_tokens=True)
            messages.append({"role": "assistant", "content": answer})
        return turns

    def max_new(self, prompt: Prompt) -> int:
        return int(self.cfg.max_new_tokens or prompt.max_new_tokens)

    def warmup(self) -> None:
        """Untimed generations of both sides; with model.compile, the graphs are built here and
        the time it took is reported as compile_s, apart from every measurement."""
        import time

        p = self.prompts[0]
        short = Prompt(p.id, p.task, p.category, p.turns[:1], max_new_tokens=16)
        t0 = time.perf_counter()
        rounds = max(int(self.cfg.warmup), 1 if getattr(self.target, "compiled", False) else 0)
        for _ in range(rounds):
            for m in (self.baseline, self.method):
                self.conversation(m, short, min(16, self.max_new(p)))
        if getattr(self.target, "compiled", False):
            self.choice["compile_s"] = round(time.perf_counter() - t0, 1)
            self.graphs = self.target.graphs()

    def check_no_recompile(self, where: str) -> None:
        """A compiled engine must not compile inside the clock: that time would be counted."""
        if getattr(self.target, "compiled", False) and self.target.graphs() != self.graphs:
            raise RuntimeError(
                f"model.compile: torch.compile built new graphs during {where} "
                f"(a timed turn); raise warmup= so that warm-up covers every "
                f"shape, or run without model.compile"
            )

    def run(self, progress=None) -> Path:
        cfg = self.cfg
        writer = rec.RecordWriter(self.out)
        self.warmup()
        self.cost_curve = probe.curve(self.target)  # c(q): step time vs verify width, untimed
        writer.write_env(
            rec.env_info(
                self.device,
                str(cfg.model.target),
                self.choice,
                self.target,
                self.method,
                self.cost_curve,
            ),
            cfg,
        )
        if cfg.check == "distribution":  # T > 0: does the method sample the baseline's law?
            from bench import distcheck

            p = self.prompts[0]
            ids = encode(
                self.tokenizer,
                [{"role": "user", "content": p.turns[0]}],
                bool(cfg.model.chat_template),
            )
            self.dist_pvalue = distcheck.run(
                self.baseline,
                self.method,
                ids,
                p.id,
                self.out,
                samples=int(cfg.dist_samples),
                positions=int(cfg.dist_positions),
                seed=int(cfg.seed),
                sampling=self.sampling,
                eos=self.eos,
                clock=self.clock,
                device=self.device,
            )
        task_id = (
            progress.add_task(f"{cfg.method.name} k={self.k}", total=len(self.prompts))
            if progress
            else None
        )
        try:
            for prompt in self.prompts:
                if (prompt.task, prompt.id) not in self.done:
                    runs = self.measure(prompt)
                    writer.write_unit(list(self.unit_records(prompt, runs, self.verdicts(runs))))
                    self.done.add((prompt.task, prompt.id))
                if progress:
                    progress.advance(task_id)
        finally:
            writer.close()
        return writer.path

    def pair(self, prompt: Prompt, runs: dict, r: int) -> None:
        """One interleaved pair of conversations; the side going first alternates with r."""
        order = [("baseline", self.baseline), ("method", self.method)]
        for role, m in order if r % 2 == 0 else order[::-1]:
            runs[role].append(self.conversation(m, prompt, self.max_new(prompt)))
            self.check_no_recompile(f"prompt {prompt.id} ({role})")

    def measure(self, prompt: Prompt) -> dict:
        """`repeats` pairs, then up to `remeasure` more pairs while a turn lacks enough quiet
        pairs (bench.interference). → {role: [conversation per repeat], "judged": per turn}."""
        runs = {"baseline": [], "method": []}
        for r in range(int(self.cfg.repeats)):
            self.pair(prompt, runs, r)
        units = self.judge(runs)
        first = [u["disturbed"] for u in units]
        extra = 0
        while any(not u["clean"] for u in units) and extra < int(self.cfg.remeasure):
            self.pair(prompt, runs, len(runs["baseline"]))
            extra += 1
            units = self.judge(runs)
        for u, was in zip(units, first):
            u.update(disturbed=was, remeasured=extra)
            for role in ("baseline", "method"):
                for (res, _), ok in zip(u["reps"][role], u["quiet"][role]):
                    if ok:
                        self.band.add(role, decode_per_token(res))
        runs["judged"] = units
        return runs

    def judge(self, runs: dict) -> list[dict]:
        """Per turn: disturbed?, quiet repeats per side, clean (enough quiet pairs)."""
        out = []
        need = min(2, int(self.cfg.repeats))
        for t in range(len(runs["baseline"][0])):
            reps = {
                role: [(conv[t][1], conv[t][3]) for conv in runs[role]]
                for role in ("baseline", "method")
            }
            disturbed, quiet = judge(reps, self.rules, self.band)
            out.append(
                {
                    "disturbed": disturbed,
                    "quiet": quiet,
                    "reps": reps,
                    "clean": len(quiet_pairs(quiet)) >= need,
                }
            )
        return out

    def unit_records(self, prompt: Prompt, runs: dict, verdicts: list[dict]):
        info = self.run_info()
        for role in ("baseline", "method"):
            m = self.baseline if role == "baseline" else self.method
            for r, conv in enumerate(runs[role]):
                for t, (ids, res, peak, load) in enumerate(conv):
                    u = runs["judged"][t]
                    v = verdicts[t] if role == "method" else {}
                    unit = {
                        "quiet": u["quiet"][role][r],
                        "unit_disturbed": u["disturbed"],
                        "unit_clean": u["clean"],
                        "remeasured": u["remeasured"],
                        "extra_round": r >= int(self.cfg.repeats),
                        **load,
                    }
                    yield rec.record(info, prompt, m.name, role, r, t, ids, res, peak, v, unit)

    def run_info(self) -> dict:
        """The fields every record of this run shares."""
        cfg = self.cfg
        return {
            "method": self.method.name,
            "k": self.k,
            "temperature": float(cfg.temperature),
            "top_k": int(cfg.top_k),
            "top_p": float(cfg.top_p),
            "device": self.device.type,
            "dtype": self.choice["dtype"],
            "engine": self.choice["engine"],
            "weights": self.choice["weights"],
            "model": str(cfg.model.name),
        }

    def verdicts(self, runs) -> list[dict]:
        """Greedy: compare the method's repeat-0 turns with the baseline's."""
        out = []
        for (b_ids, b_res, *_), (m_ids, m_res, *_) in zip(runs["baseline"][0], runs["method"][0]):
            if not self.sampling.greedy:
                out.append({"verdict": None, "dist_pvalue": getattr(self, "dist_pvalue", None)})
                continue
            if m_ids != b_ids:  # an earlier turn diverged: this turn's prompt differs
                out.append(
                    {
                        "verdict": "after-divergence",
                        "first_divergence": None,
                        "logit_gap": None,
                        "method_gap": None,
                    }
                )
                continue
            out.append(
                compare(
                    self.target,
                    b_ids,
                    b_res.output_ids,
                    m_res.output_ids,
                    float(self.cfg.tie_tolerance),
                    self.device,
                )
            )
        return out


def execute(cfg: DictConfig, out: Path, progress=None):
    """Validate, run (or resume, bench.cells), write summary.csv and answers/; returns
    (summary, records path, runner). An interrupted run (Ctrl-C) still summarises the prompts
    it finished, marked partial, and says how to resume; runner is None for a skipped cell."""
    import sys

    import pandas as pd

    from bench import cells
    from bench.answers import write_answers
    from bench.config import validate
    from bench.metrics import summarize

    validate(cfg)
    h, state = cells.cell_hash(cfg), cells.read(out)
    if state and state["hash"] != h:
        raise UserError(
            f"out={str(out)!r} holds the results of another configuration (cell "
            f"{state['hash']}, this one is {h}); choose another out= or remove it"
        )
    resume = bool(cfg.get("resume", True))
    if state and resume and state["status"] == "complete" and (out / "summary.csv").exists():
        print(f"complete, skipped: {out}", file=sys.stderr)
        return pd.read_csv(out / "summary.csv"), out / "records.jsonl", None
    if state and not resume:
        raise UserError(
            f"out={str(out)!r} already holds this cell's results; resume=true "
            f"continues it, or choose another out="
        )
    runner = Runner(cfg, out)
    runner.done = cells.finished(out) if state else set()
    total = len(runner.prompts)
    cells.write(out, h, "running", len(runner.done), total)
    status = "complete"
    try:
        path = runner.run(progress)
    except KeyboardInterrupt:
        status, path = "partial", out / "records.jsonl"
        runner.done |= cells.finished(out)  # a prompt written just before the signal counts
    finished = len(runner.done)
    if not finished:
        cells.write(out, h, "partial", 0, total)
        raise KeyboardInterrupt
    summary = summarize(rec.load(path), getattr(runner, "cost_curve", None), len(runner.skipped))
    summary["partial"] = status == "partial"
    summary.to_csv(out / "summary.csv", index=False)
    write_answers(out, path, runner.tokenizer, str(cfg.model.name))  # Spec-Bench's answer format
    cells.write(out, h, status, finished, total)
    if status == "partial":
        print(
            f"interrupted: {finished} of {total} prompts measured; summary.csv is marked "
            f"partial. Run the same command (with out={out}) to resume.",
            file=sys.stderr,
        )
    runner.status = status
    return summary, path, runner
