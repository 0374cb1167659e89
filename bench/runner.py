"""One benchmark run: load, warm up, then per prompt interleave baseline and method.

For every prompt, `repeats` times, the baseline (`ar`) and the method each generate the whole
conversation (turn 2 follows each side's own turn-1 answer), alternating which goes first.
Every turn becomes one line of records.jsonl, written and flushed as soon as the prompt is done,
so an interrupted run keeps what it measured. Then the greedy verdicts, summary.csv and a table.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import torch
from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf

from bench import records as rec
from bench.clock import Clock
from bench.errors import UserError
from bench.loop import generate
from bench.memory import PeakMemory
from bench.models import load_generation_config, load_tokenizer, resolve_device
from bench.sampling import SamplingParams
from bench.verdict import compare
from engines import probe
from engines.load import load as load_engine
from tasks.loader import Prompt, load_prompts


AR_CFG = {"_target_": "methods.ar.AR", "name": "ar", "k": 0}


@dataclass
class Context:
    """What a method may use: the target engine, its tokenizer, device, dtype, model config."""
    target: object  # engines.base.Engine
    tokenizer: object
    device: torch.device
    dtype: torch.dtype
    model_cfg: DictConfig
    k_override: int | None = None

    def k(self, method_cfg) -> int | None:
        """The draft length: top-level `k` when given, else the method's own default (which a
        tree method may leave None: its tree's own depth)."""
        k = self.k_override if self.k_override is not None else method_cfg.get("k")
        return None if k is None else int(k)


def build_method(method_cfg, ctx: Context):
    """Instantiate the class a method YAML names in `_target_` with (its config, ctx)."""
    method_cfg = OmegaConf.create(method_cfg) if isinstance(method_cfg, dict) else method_cfg
    try:
        cls = get_class(method_cfg._target_)
    except Exception as e:  # a YAML naming a class that does not import
        raise UserError(f"method {method_cfg.get('name')!r}: cannot import "
                        f"{method_cfg.get('_target_')!r} ({e})")
    return cls(method_cfg, ctx)


def encode(tokenizer, messages: list[dict], use_template: bool) -> list[int]:
    """Prompt ids for a conversation, through the tokenizer's own chat template when it has one."""
    if use_template and getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return tokenizer(text, add_special_tokens=False)["input_ids"]
    text = "".join(f"{m['role'].capitalize()}: {m['content']}\n" for m in messages) + "Assistant:"
    return tokenizer(text)["input_ids"]


def eos_ids(tokenizer, config, generation_config=None) -> set[int]:
    ids = set()
    for src in (generation_config, config):
        e = getattr(src, "eos_token_id", None) if src is not None else None
        ids |= set(e if isinstance(e, list) else [e] if e is not None else [])
    if tokenizer is not None and tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return ids


def seed_for(seed: int, prompt_id: str, turn: int) -> int:
    h = hashlib.sha256(f"{seed}/{prompt_id}/{turn}".encode()).digest()
    return int.from_bytes(h[:8], "little") & ((1 << 63) - 1)


class Runner:
    def __init__(self, cfg: DictConfig, out_dir: Path):
        self.cfg, self.out = cfg, out_dir
        self.device = resolve_device(cfg.device.name)
        if self.device.type == "cpu" and cfg.device.get("threads"):
            torch.set_num_threads(int(cfg.device.threads))
        self.sampling = SamplingParams(float(cfg.temperature), int(cfg.top_k), float(cfg.top_p))
        task_cfg = OmegaConf.to_container(cfg.task, resolve=True)
        self.prompts = load_prompts(task_cfg, cfg.limit)
        if not self.prompts:
            raise UserError(f"task={cfg.task.name!r} selected no prompts")
        engine = str(cfg.engine)
        needs = cfg.method.get("engine")  # hf_pld, hf_assisted: transformers' model itself
        if needs and engine == "auto":
            engine = str(needs)
        self.target, self.choice = load_engine(
            str(cfg.model.target), self.device, engine=engine,
            weights=str(cfg.model.get("weights", "auto")),
            dtype=str(cfg.model.get("dtype", "auto")), kernel=str(cfg.model.get("kernel", "auto")),
            compile=bool(cfg.model.get("compile", False)))
        self.tokenizer = load_tokenizer(str(cfg.model.target))
        if self.tokenizer is None:
            raise UserError(f"model.target={cfg.model.target!r} has no tokenizer")
        if needs and cfg.engine == "auto":
            self.choice["engine_reason"] = f"auto: method={cfg.method.name} runs on engine={needs}"
        self.dtype = self.target.dtype
        self.ctx = Context(self.target, self.tokenizer, self.device, self.dtype, cfg.model, cfg.k)
        self.baseline = build_method(AR_CFG, self.ctx)
        self.method = build_method(cfg.method, self.ctx)
        self.eos = eos_ids(self.tokenizer, self.target.config,
                           load_generation_config(str(cfg.model.target)))
        self.clock = Clock(self.device)
        self.mem = PeakMemory(self.device)
        self.k = self.ctx.k(cfg.method)

    # --- one conversation ---
    def conversation(self, method, prompt: Prompt, max_new: int) -> list[tuple[list[int], object, int | None]]:
        messages, turns = [], []
        for t, text in enumerate(prompt.turns):
            messages.append({"role": "user", "content": text})
            ids = encode(self.tokenizer, messages, bool(self.cfg.model.chat_template))
            gen = None
            if not self.sampling.greedy:
                gen = torch.Generator(device=self.device)
                gen.manual_seed(seed_for(self.cfg.seed, prompt.id, t))
            self.mem.start()
            res = generate(method, ids, max_new, self.sampling, self.eos, self.clock, gen,
                           self.device)
            peak = self.mem.peak_delta()
            turns.append((ids, res, peak))
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
            raise RuntimeError(f"model.compile: torch.compile built new graphs during {where} "
                               f"(a timed turn); raise warmup= so that warm-up covers every "
                               f"shape, or run without model.compile")

    def run(self, progress=None) -> Path:
        cfg = self.cfg
        writer = rec.RecordWriter(self.out)
        self.warmup()
        self.cost_curve = probe.curve(self.target)  # c(q): step time vs verify width, untimed
        writer.write_env(self)
        if cfg.check == "distribution":  # T > 0: does the method sample the baseline's law?
            from bench import distcheck
            self.dist_pvalue = distcheck.run(self)
        task_id = progress.add_task(f"{cfg.method.name} k={self.k}", total=len(self.prompts)) \
            if progress else None
        for i, prompt in enumerate(self.prompts):
            runs = {"baseline": [], "method": []}
            for r in range(int(cfg.repeats)):
                order = [("baseline", self.baseline), ("method", self.method)]
                for role, m in (order if r % 2 == 0 else order[::-1]):
                    runs[role].append(self.conversation(m, prompt, self.max_new(prompt)))
                    self.check_no_recompile(f"prompt {prompt.id} ({role})")
            verdicts = self.verdicts(runs)
            for role in ("baseline", "method"):
                m = self.baseline if role == "baseline" else self.method
                for r, conv in enumerate(runs[role]):
                    for t, (ids, res, peak) in enumerate(conv):
                        v = verdicts[t] if role == "method" else {}
                        writer.write(rec.record(self, prompt, m, role, r, t, ids, res, peak, v))
            if progress:
                progress.advance(task_id)
        writer.close()
        return writer.path

    def verdicts(self, runs) -> list[dict]:
        """Greedy: compare the method's repeat-0 turns with the baseline's."""
        out = []
        for (b_ids, b_res, _), (m_ids, m_res, _) in zip(runs["baseline"][0], runs["method"][0]):
            if not self.sampling.greedy:
                out.append({"verdict": None, "dist_pvalue": getattr(self, "dist_pvalue", None)})
                continue
            if m_ids != b_ids:  # an earlier turn diverged: this turn's prompt differs
                out.append({"verdict": "after-divergence", "first_divergence": None,
                            "logit_gap": None, "method_gap": None})
                continue
            out.append(compare(self.target, b_ids, b_res.output_ids, m_res.output_ids,
                               float(self.cfg.tie_tolerance), self.device))
        return out


def execute(cfg: DictConfig, out: Path, progress=None):
    """Validate, run, write summary.csv and answers/; returns (summary, records path, runner)."""
    from bench.answers import write_answers
    from bench.config import validate
    from bench.metrics import summarize

    validate(cfg)
    runner = Runner(cfg, out)
    path = runner.run(progress)
    summary = summarize(rec.load(path))
    summary.to_csv(out / "summary.csv", index=False)
    write_answers(out, path, runner.tokenizer, str(cfg.model.name))  # Spec-Bench's answer format
    return summary, path, runner
