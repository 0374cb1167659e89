"""One benchmark run: load, warm up, then per prompt interleave baseline and method.

For every prompt, `repeats` times, the baseline (`ar`) and the method each generate the whole
conversation (turn 2 follows each side's own turn-1 answer), alternating which goes first.
Every turn becomes one line of records.jsonl, written and flushed as soon as the prompt is done,
so an interrupted run keeps what it measured. Then the greedy verdicts, summary.csv and a table.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
from omegaconf import DictConfig

from bench.decode import turn
from bench.decode.loop import generate
from bench.outputs import records as rec
from bench.outputs.answers import answer_text, recount, write_answers
from bench.outputs.verdict import turn_verdicts
from bench.run import cells, distcheck, forced, lifecycle
from bench.run.batched import Batched
from bench.run.interference import Band, Rules, measure
from engines import probe
from groundfloor.clock import Clock, settle_heap
from groundfloor.errors import UserError
from groundfloor.load import LoadProbe
from groundfloor.memory import PeakMemory
from groundfloor.models import load_generation_config, load_tokenizer, resolve_device
from groundfloor.prompting import encode, eos_ids, seed_for, turn_ids
from groundfloor.sampling import SamplingParams
from methods.registry import Context, build_method
from tasks.fit import context_limit
from tasks.prompt import Prompt


class Runner:
    def __init__(self, cfg: DictConfig, out_dir: Path, shared: dict | None = None):
        """`shared`: engines already loaded by earlier cells of this process (a sweep), keyed by
        what was asked for (bench.run.lifecycle.load_target)."""
        t0 = time.perf_counter()
        self.setup_s: dict[str, float] = {}
        self.cfg, self.out = cfg, out_dir
        self.device = resolve_device(cfg.device.name)
        if self.device.type == "cpu" and cfg.device.get("threads"):
            torch.set_num_threads(int(cfg.device.threads))
        self.sampling = SamplingParams(float(cfg.temperature), int(cfg.top_k), float(cfg.top_p))
        self.prompts = lifecycle.pick_prompts(cfg)
        self.target, self.choice = lifecycle.load_target(cfg, self.device, shared)
        self.setup_s["engine_load"] = round(time.perf_counter() - t0, 2)
        t1 = time.perf_counter()
        self.tokenizer = load_tokenizer(str(cfg.model.target))
        if self.tokenizer is None:
            raise UserError(f"model.target={cfg.model.target!r} has no tokenizer")
        self.dtype = self.target.dtype
        gen_cfg = load_generation_config(str(cfg.model.target))
        self.eos = eos_ids(self.tokenizer, self.target.config, gen_cfg)
        self.ctx = Context(
            self.target,
            self.tokenizer,
            self.device,
            self.dtype,
            cfg.model,
            cfg.k,
            frozenset(self.eos),
            str(cfg.drafter_weights),
        )
        self.method = build_method(cfg.method, self.ctx)
        self.forced = forced.build(cfg.method, self.ctx)  # alpha1_forced's (None: no drafter)
        self.baseline = build_method(self.method.baseline, self.ctx)  # ar; hf_ar for hf_*
        self.setup_s["methods_and_prompts"] = round(time.perf_counter() - t1, 2)
        self.prompts, self.skipped = lifecycle.fit_prompts(
            cfg, self.prompts, self.tokenizer, context_limit(self.target.config)
        )
        self.clock = Clock(self.device)
        self.mem = PeakMemory(self.device)
        self.load = LoadProbe(device=self.device)
        self.rules = Rules(float(cfg.disturb_ratio), float(cfg.disturb_others))
        self.band = Band()
        self.done: set[tuple[str, str]] = set()  # (task, prompt id) already in records.jsonl
        self.k = self.ctx.k(cfg.method)
        self.dist = None  # check=distribution's result (distcheck.DistCheck)
        self.verdict_method = None  # greedy re-decodes after a divergence (redecode)
        self.calibration = None  # (curve, drafting) k=auto was calibrated with (prepare)

    # --- one conversation ---
    def conversation(self, method, prompt: Prompt, max_new: int) -> list[tuple]:
        """Every turn of `prompt` with `method`: [(prompt ids, TurnResult, peak bytes, load)]."""
        turns, answers = [], []
        for t in range(len(prompt.turns)):
            ids = turn_ids(
                self.tokenizer, prompt.turns, answers, bool(self.cfg.model.chat_template)
            )
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
            text = answer_text(self.tokenizer, res.output_ids)  # as the answer file holds it
            res.recount_tokens = recount(self.tokenizer, text)  # speed.py's count of it
            answers.append(res.output_ids)
        return turns

    def max_new(self, prompt: Prompt) -> int:
        return lifecycle.max_new(self.cfg, prompt)

    def warm_pass(self, turns: dict, tokens: int = 16) -> None:
        """One untimed short conversation of each side (the first prompt's first turn, `tokens`
        at most), its TurnResults appended to turns[role]."""
        p = self.prompts[0]
        short = Prompt(p.id, p.task, p.category, p.turns[:1], max_new_tokens=tokens)
        for role, m in (("baseline", self.baseline), ("method", self.method)):
            conv = self.conversation(m, short, min(tokens, self.max_new(p)))
            turns[role] += [res for _, res, _, _ in conv]

    def warmup(self) -> dict:
        """Untimed generations of both sides; with model.compile, the graphs are built here and
        the time it took is reported as compile_s, apart from every measurement. → the warm-up
        TurnResults {role: [...]} (k=auto reads its costs from them)."""
        t0 = time.perf_counter()
        rounds = max(int(self.cfg.warmup), 1 if getattr(self.target, "compiled", False) else 0)
        turns = {"baseline": [], "method": []}
        for _ in range(rounds):
            self.warm_pass(turns)
        if getattr(self.target, "compiled", False):
            self.choice["compile_s"] = round(time.perf_counter() - t0, 1)
            self.graphs = self.target.graphs()
        return turns

    def drafting_cost(self, warm: dict) -> tuple[dict, tuple[float, float, float]]:
        """What the method's policy is calibrated with (Policy.priced; a fixed k needs none):
        for k=auto (the cost curve anchored to the baseline's warm step (engines.probe.anchored),
        the drafter's (seconds per step, seconds per round) and the loop's per-round overhead
        beyond c(1)), measured on one untimed pass of each side after the warm-up (whose
        first calls pay one-off costs: allocations, a first native call, caches grown; read
        from them, a drafter step measured ~4× its steady cost and k=auto never drafted),
        every round of the method's pass drafting (a learned drafter's rounds after plain ones
        pay a catch-up: read as steps, EAGLE-2's measured 2.9-3.5 ms against 0.8): never
        assumed."""
        return self.method.policy.priced(lambda: self.measure_drafting(warm), self.cost_curve)

    def measure_drafting(self, warm: dict) -> tuple[dict, tuple[float, float, float]]:
        """drafting_cost's untimed pass of each side, every round of the method's drafting."""
        if not warm["method"]:  # warmup=0: a pass of each side that absorbs the first calls
            self.warm_pass(warm)
        measured = {"baseline": [], "method": []}
        self.method.force_drafting(True)  # steady rounds to read a step's cost from
        try:
            self.warm_pass(measured, tokens=32)
        finally:
            self.method.force_drafting(False)
        step_s, round_s = turn.draft_costs(measured["method"])
        s_b = turn.base_step(measured["baseline"])
        curve = probe.anchored(self.cost_curve, s_b)
        return curve, (step_s, round_s, turn.step_overhead(s_b, curve))

    def check_no_recompile(self, where: str) -> None:
        """A compiled engine must not compile inside the clock: that time would be counted."""
        if getattr(self.target, "compiled", False) and self.target.graphs() != self.graphs:
            now = self.target.graphs()
            grew = ", ".join(
                f"{k} {self.graphs[k]} → {now[k]}" for k in now if now[k] != self.graphs[k]
            )
            raise RuntimeError(
                f"model.compile: new graphs were built during {where} (a timed turn: {grew}); "
                f"raise warmup= so that warm-up covers every shape, or run without model.compile"
            )

    def decode_context(self) -> int:
        """The cache length the cost curve is timed at: the median over the run's prompts of
        the first turn's tokens plus half its new tokens. A verify's cost grows with the
        context (attention), so a curve timed at a fixed short one under-prices the rounds of
        long prompts, and k=auto would draft more than pays."""
        use_template = bool(self.cfg.model.chat_template)
        lens = sorted(
            len(encode(self.tokenizer, [{"role": "user", "content": p.turns[0]}], use_template))
            + self.max_new(p) // 2
            for p in self.prompts
        )
        limit = context_limit(self.target.config) or 1 << 30
        return max(16, min(lens[len(lens) // 2], limit - max(probe.SIZES)))

    def prepare(self) -> None:
        """Everything before the first measured turn, untimed: warm-up, the cost curve and
        k=auto's calibration on it (the gate's workers call this too, bench/gate/worker.py)."""
        settle_heap()  # the models built so far leave the collector's scans (before warm-up)
        t0 = time.perf_counter()
        warm = self.warmup()
        t1 = time.perf_counter()
        self.curve_context = self.decode_context()
        # c(q) after warm-up, untimed, at the cache length the run's rounds typically see
        self.cost_curve = probe.curve(self.target, warm=True, context=self.curve_context)
        curve, drafting = self.drafting_cost(warm)
        self.calibration = (curve, drafting)  # batch=B: each slot's method calibrated alike
        changed = self.method.calibrate(curve, drafting)
        if changed and getattr(self.target, "compiled", False):
            self.warmup()  # the new draft size's shapes are compiled outside the clock too
        self.setup_s.update(warmup=round(t1 - t0, 2), cost_curve=round(time.perf_counter() - t1, 2))
        self.choice["setup_s"] = dict(self.setup_s)  # time outside the measured turns, by part

    def run(self, progress=None) -> Path:
        cfg = self.cfg
        writer = rec.RecordWriter(self.out)
        self.prepare()
        env = rec.env_info(
            self.device,
            str(cfg.model.target),
            self.choice,
            self.target,
            self.method,
            self.cost_curve,
            self.curve_context,
        )
        writer.write_env(env, cfg)
        if cfg.check == "distribution":  # T > 0: does the method sample the baseline's law?
            self.dist = self.check_distribution()
        task_id = (
            progress.add_task(f"{cfg.method.name} k={self.k}", total=len(self.prompts))
            if progress
            else None
        )
        try:
            if int(cfg.batch) > 1:  # the conversations B at a time (bench.run.batched)
                self.run_batched(writer, progress, task_id)
                return writer.path
            for prompt in self.prompts:
                if (prompt.task, prompt.id) not in self.done:
                    runs = self.measure(prompt)
                    writer.write_unit(self.unit_records(prompt, runs))
                    self.done.add((prompt.task, prompt.id))
                    if not sys.stderr.isatty():  # a log file or CI: one plain line per prompt
                        print(self.progress_line(prompt, runs), file=sys.stderr, flush=True)
                if progress:
                    progress.advance(task_id)
        finally:
            writer.close()
            self.record_policy_end(writer, env)
        return writer.path

    def check_distribution(self) -> distcheck.DistCheck:
        """check=distribution on this cell (bench.run.distcheck.for_run), untimed, after
        prepare(); its evidence goes to distcheck.json in the run's folder."""
        return distcheck.for_run(
            self.cfg,
            self.prompts,
            self.tokenizer,
            self.baseline,
            self.method,
            self.out,
            sampling=self.sampling,
            eos=self.eos,
            clock=self.clock,
            device=self.device,
        )

    def record_policy_end(self, writer, env: dict) -> None:
        """env.json again, with the draft-size policy as the measured turns left it (k=auto's
        refits; a fixed k's sizes)."""
        env["method_info"]["policy_end"] = self.method.policy.summary()
        writer.write_env(env, self.cfg)

    def run_batched(self, writer, progress=None, task_id=None) -> None:
        """batch=B: every prompt not yet measured, decoded B at a time, each side's batch runs
        interleaved (bench.run.batched); one prompt's records written at a time, as always."""
        todo = [p for p in self.prompts if (p.task, p.id) not in self.done]
        if not todo:
            return
        repeats, B = int(self.cfg.repeats), int(self.cfg.batch)
        batched = Batched(self)
        batched.warm(todo)
        got = batched.measure(todo, repeats)
        ref = batched.batch1(todo)  # the baseline's batch-1 tokens, untimed (greedy only)
        for prompt in todo:
            per = got["prompts"][prompt.id]
            writer.write_unit(batched.unit_records(prompt, per, repeats, ref.get(prompt.id)))
            self.done.add((prompt.task, prompt.id))
            if progress:
                progress.advance(task_id)
        walls = {role: sum(run.wall_s for _, rl, run, _, _ in got["batches"] if rl == role)
                 for role in ("baseline", "method")}  # fmt: skip
        if not sys.stderr.isatty():
            print(
                f"{self.method.name} k={self.k} batch={B}: {len(todo)} prompts, "
                f"{repeats} batch runs a side (ar {walls['baseline']:.2f} s, "
                f"{self.method.name} {walls['method']:.2f} s)",
                file=sys.stderr,
                flush=True,
            )

    def progress_line(self, prompt: Prompt, runs: dict) -> str:
        wall = {
            role: sum(res.times_ns.get("wall", 0) for _, res, *_ in runs[role][0]) / 1e9
            for role in ("baseline", "method")
        }
        return (
            f"{self.method.name} k={self.k}: {len(self.done)}/{len(self.prompts)} "
            f"{prompt.task}/{prompt.id} done (repeat 0: ar {wall['baseline']:.2f} s, "
            f"{self.method.name} {wall['method']:.2f} s)"
        )

    def pair(self, prompt: Prompt, runs: dict, r: int) -> None:
        """One interleaved pair of conversations; the side going first alternates with r."""
        order = [("baseline", self.baseline), ("method", self.method)]
        for role, m in order if r % 2 == 0 else order[::-1]:
            runs[role].append(self.conversation(m, prompt, self.max_new(prompt)))
            self.check_no_recompile(f"prompt {prompt.id} ({role})")

    def measure(self, prompt: Prompt) -> dict:
        """Interleaved pairs of conversations, re-measured while disturbed
        (bench.run.interference)."""
        pair = lambda runs, r: self.pair(prompt, runs, r)  # noqa: E731
        cfg = self.cfg
        return measure(pair, int(cfg.repeats), int(cfg.remeasure), self.rules, self.band)

    def redecode(self, prompt: Prompt):
        """For the greedy verdict of a turn after a divergence: → ids ↦ the method's output on
        those prompt ids (the baseline's history), decoded outside every measurement by a
        method of its own (built once, calibrated as the measured one), so that the measured
        method's cross-turn state (k=auto's rates, suffix's and recycling's tables) never sees
        it. A compiled engine's new shapes are taken as known after it (untimed)."""

        def run(ids: list[int]) -> list[int]:
            if self.verdict_method is None:
                self.verdict_method = build_method(self.cfg.method, self.ctx)
                if self.calibration is not None:
                    self.verdict_method.calibrate(*self.calibration)
            res = generate(
                self.verdict_method,
                ids,
                self.max_new(prompt),
                self.sampling,
                self.eos,
                Clock(self.device),
                None,
                self.device,
            )
            if getattr(self.target, "compiled", False):
                self.graphs = self.target.graphs()
            return res.output_ids

        return run

    def unit_records(self, prompt: Prompt, runs: dict) -> list[dict]:
        cfg = self.cfg
        info = rec.run_info(
            cfg,
            self.method.name,
            self.k,
            self.device,
            self.choice,
            getattr(self.method, "info", {}),
        )
        names = {"baseline": self.baseline.name, "method": self.method.name}
        verdicts = turn_verdicts(
            self.target,
            runs,
            self.sampling.greedy,
            float(cfg.tie_tolerance),
            self.device,
            dist=self.dist.stamp(prompt.task, prompt.id) if self.dist else None,
            batch_invariant=bool(self.choice.get("batch_invariant", False)),
            redecode=self.redecode(prompt) if self.sampling.greedy else None,
        )
        rows = list(rec.unit_records(info, prompt, names, runs, verdicts, int(cfg.repeats)))
        if self.forced is None:
            return rows
        return rec.stamp_first_turn(rows, forced.first_tokens(self, self.forced, prompt))


def execute(cfg: DictConfig, out: Path, progress=None, shared: dict | None = None):
    """Validate, run (or resume, bench.run.cells), write summary.csv and answers/; returns
    (summary, records path, runner). An interrupted run (Ctrl-C) still summarises the prompts
    it finished, marked partial, and says how to resume; runner is None for a skipped cell.
    `shared`: engines loaded by earlier cells of the process (Runner)."""
    import pandas as pd

    from bench.outputs.metrics import summarize  # cost: pandas (~260 ms), not for the gate's Runner

    h, state, skip = lifecycle.open_cell(cfg, out)
    if skip:
        return pd.read_csv(out / "summary.csv"), out / "records.jsonl", None
    runner = Runner(cfg, out, shared)
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
