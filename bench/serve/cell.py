"""One server cell end to end: passes of the plain and the speculative server, then the outputs.

For each repeat r (baseline first when r is even, as in-process), for each role:
    start the role's server (bench.serve.server) → warm-up requests (untimed, not recorded) →
    scrape /metrics → the pass (bench.serve.load) → scrape again → stop the server;
then the pass's records go to records.jsonl (flushed at once), its totals, counters and their
difference to passes.jsonl. Greedy verdicts compare each speculative turn's text with the
plain server's for the same prompt and turn (repeat 0, first copy of a prompt in the pass):
`exact`, `mismatch` (first_divergence: the first differing token of our tokenizer's encoding),
or `after-divergence` (an earlier turn already differed, so the prompts differ).
Finally summary.csv (bench.serve.summary), answers/ and env.json.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from omegaconf import OmegaConf

from bench.outputs import records as rec
from bench.outputs.answers import write_answers
from bench.outputs.verdict import first_divergence
from bench.run import cells, lifecycle
from bench.serve import client, scrape
from bench.serve.load import run_pass
from bench.serve.server import Server, command, get, server_k
from groundfloor.errors import UserError
from groundfloor.loops import looping
from groundfloor.machine import cpu_name
from groundfloor.models import load_tokenizer, resolve_path
from groundfloor.prompting import encode, seed_for
from groundfloor.provenance import git_sha
from tasks.fit import context_limit
from tasks.prompt import Prompt

ROLES = ("baseline", "method")


class Cell:
    def __init__(self, cfg, out: Path):
        self.cfg, self.out, self.s = cfg, out, cfg.server
        self.prompts = lifecycle.pick_prompts(cfg)
        self.tokenizer = load_tokenizer(str(cfg.model.target))
        if self.tokenizer is None:
            raise UserError(
                f"model.target={cfg.model.target!r} has no tokenizer (the suite "
                f"counts and compares the server's text with it)"
            )
        self.prompts, self.skipped = lifecycle.fit_prompts(
            cfg, self.prompts, self.tokenizer, served_context(str(cfg.model.target))
        )
        self.argv = {role: command(cfg, role) for role in ROLES}  # fails early on a bad config
        self.k = server_k(cfg)  # k=auto: the method's fixed_k (a server drafts a fixed length)
        n = cfg.num_requests
        self.num_requests = int(n) if n is not None else len(self.prompts)
        self.passes: list[dict] = []
        self.server_version: str | None = None

    # --- one request ---
    def send(
        self, prompt: Prompt, turn: int, messages: list[dict], max_tokens: int | None = None
    ) -> client.Reply:
        cfg, s = self.cfg, self.s
        text = None
        if s.api == "completions":  # the client applies the template, as in-process runs do
            ids = encode(self.tokenizer, messages, bool(cfg.model.chat_template))
            text = self.tokenizer.decode(ids)
        payload = client.body(
            str(s.api),
            str(s.served_name),
            messages,
            text,
            max_tokens or int(cfg.max_new_tokens or prompt.max_new_tokens),
            float(cfg.temperature),
            float(cfg.top_p),
            int(cfg.top_k),
            seed_for(int(cfg.seed), prompt.id, turn) & 0x7FFFFFFF,
        )
        return client.stream(
            str(s.host), int(s.port), str(s.api), payload, float(cfg.request_timeout_s)
        )

    def warmup(self) -> None:
        p = self.prompts[0]
        short = Prompt(p.id, p.task, p.category, p.turns[:1])
        for _ in range(int(self.cfg.warmup)):
            r = self.send(short, 0, [{"role": "user", "content": short.turns[0]}], 16)
            if r.error:
                raise RuntimeError(
                    f"server={self.s.name}: the warm-up request failed ({r.error}: {r.detail})"
                )

    def scrape(self, srv: Server) -> dict:
        if str(self.s.metrics) == "none":
            return {}
        status, text = get(srv.url(str(self.s.metrics_path)), timeout=10)
        return scrape.counters(text, str(self.s.metrics)) if status == 200 else {}

    # --- one pass: one server, every conversation ---
    def run_pass(self, role: str, repeat: int):
        cfg = self.cfg
        log = self.out / f"server_{role}_{repeat}.log"
        with Server(cfg, role, log) as srv:
            if self.server_version is None:
                status, body = get(srv.url("/version"))
                self.server_version = body.strip() if status == 200 else None
            self.warmup()
            before = self.scrape(srv)
            t0 = time.time()
            res = run_pass(
                self.prompts,
                self.send,
                int(cfg.concurrency),
                cfg.request_rate,
                self.num_requests,
                float(cfg.max_time_s),
                int(cfg.seed) + repeat,
            )
            after = self.scrape(srv)
            startup = srv.startup_s
        delta = scrape.difference(after, before) if after else {}
        new = sum(self.count(t.reply) for t in res.turns if not t.reply.error)
        errors = [t.reply.error for t in res.turns if t.reply.error]
        self.passes.append(
            {
                "role": role,
                "repeat": repeat,
                "started_at": t0,
                "server_startup_s": startup,
                "conversations": res.started,
                "not_started": res.not_started,
                "requests": len(res.turns),
                "errors": len(errors),
                "error_kinds": {e: errors.count(e) for e in sorted(set(errors))},
                "new_tokens": new,
                "wall_s": res.wall_s,
                "throughput_tok_s": new / res.wall_s if res.wall_s > 0 and new else None,
                "counters_before": before,
                "counters_after": after,
                "counters": delta,
                "speculation": scrape.speculation(delta, new, len(res.turns)) if delta else None,
                "argv": self.argv[role],
            }
        )
        return res

    def count(self, reply: client.Reply) -> int:
        if reply.completion_tokens is not None:
            return int(reply.completion_tokens)
        return len(self.tokenizer(reply.text, add_special_tokens=False)["input_ids"])

    # --- records ---
    def record(self, role: str, repeat: int, tr, verdict: dict, pass_t0: float) -> dict:
        cfg, r = self.cfg, tr.reply
        ids = self.tokenizer(r.text, add_special_tokens=False)["input_ids"] if r.text else []
        new = self.count(r) if not r.error else len(ids)
        wall = r.end - r.sent
        ttft = r.ttft_s
        p = tr.prompt
        return {
            "task": p.task,
            "category": p.category,
            "subcategory": p.subcategory,
            "prompt_id": p.id,
            "turn": tr.turn,
            "repeat": repeat,
            "role": role,
            "method": cfg.method.name,
            "method_run": "ar" if role == "baseline" else cfg.method.name,
            "k": self.k,
            "temperature": float(cfg.temperature),
            "top_k": int(cfg.top_k),
            "top_p": float(cfg.top_p),
            "device": str(self.s.device),
            "dtype": str(self.s.dtype),
            "engine": f"openai/{self.s.name}",
            "weights": str(self.s.dtype),
            "model": cfg.model.name,
            "server": str(self.s.name),
            "api": str(self.s.api),
            "concurrency": int(cfg.concurrency),
            "request_rate": cfg.request_rate,
            "conv": tr.conv,
            "sent_s": r.sent - pass_t0,
            "prompt_tokens": r.prompt_tokens,
            "new_tokens": new,
            # the server's finish_reason in our words (records.RENAMED): stop → eos, length →
            # budget; any other reason as the server gave it
            "stop_reason": {"stop": "eos", "length": "budget"}.get(
                r.finish_reason, r.finish_reason
            ),
            "loop": looping(ids),  # ids: the text re-encoded, so no EOS among them
            "wall_s": wall,
            "ttft_s": ttft,
            "tpot_s": (r.chunk_times[-1] - r.chunk_times[0]) / (new - 1)
            if new > 1 and r.chunk_times
            else None,
            "itl_s": r.itl_s,
            "chunks": len(r.chunk_times),
            "prefill_s": None,
            "draft_s": None,
            "verify_s": None,
            "other_s": None,
            "target_forwards": None,
            "accept_lengths": [],
            "drafted_tokens": None,
            "accepted_tokens": None,
            "drafted_per_pos": [],
            "accepted_per_pos": [],
            "error": r.error,
            "error_detail": r.detail or None,
            "verdict": verdict.get("verdict"),
            "first_divergence": verdict.get("first_divergence"),
            "logit_gap": None,
            "method_gap": None,
            "dist_pvalue": None,
            "output_text": r.text,
            "output_ids": ids,
        }

    def verdicts(self, base: dict, method) -> dict:
        """(prompt_id, turn) → verdict of the speculative text against the plain one; base:
        the plain pass's texts (`texts`), the first copy of each turn judged."""
        if float(self.cfg.temperature) != 0:
            return {}
        m = {key: t.reply for key, t in first_copies(method).items()}
        out = {}
        for key in sorted(m):
            tb, tm = base.get(key), m[key]
            if tb is None or tm.error:
                continue
            earlier = [(key[0], t) for t in range(key[1])]
            if any(base.get(e) != (m[e].text if e in m else None) for e in earlier):
                out[key] = {"verdict": "after-divergence"}  # its prompt already differs
            elif tb == tm.text:
                out[key] = {"verdict": "exact"}
            else:
                ids = lambda t: self.tokenizer(t, add_special_tokens=False)["input_ids"]  # noqa
                out[key] = {
                    "verdict": "mismatch",
                    "first_divergence": first_divergence(ids(tb), ids(tm.text)),
                }
        return out

    def restore(self) -> tuple[set[tuple[str, int]], dict]:
        """Continue an interrupted cell: the passes it finished ((role, repeat): a line in
        passes.jsonl and its rows in records.jsonl) are kept, anything later dropped, and
        self.passes restored → (finished passes, the plain pass's texts if repeat 0's ran)."""
        passes = []
        path = self.out / "passes.jsonl"
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    passes.append(json.loads(line))
                except json.JSONDecodeError:
                    break  # cut by a kill
        rows = rec.read_rows(self.out / "records.jsonl")
        have = {(r["role"], r["repeat"]) for r in rows}
        self.passes = [p for p in passes if (p["role"], p["repeat"]) in have]
        done = {(p["role"], p["repeat"]) for p in self.passes}
        rows = [r for r in rows if (r["role"], r["repeat"]) in done]
        _rewrite(path, self.passes)
        _rewrite(self.out / "records.jsonl", rows)
        first = [r for r in rows if r["role"] == "baseline" and r["repeat"] == 0]
        return done, row_texts(first)

    def run(self, progress=None, resume: bool = False) -> Path:
        done, first_base = self.restore() if resume else (set(), None)
        writer = rec.RecordWriter(self.out)
        task_id = (
            progress.add_task(
                f"{self.s.name} {self.cfg.method.name} c={self.cfg.concurrency}",
                total=2 * int(self.cfg.repeats),
                completed=len(done),
            )
            if progress
            else None
        )
        with open(self.out / "passes.jsonl", "a", encoding="utf-8") as passes_file:
            for r in range(int(self.cfg.repeats)):
                for role in ROLES if r % 2 == 0 else ROLES[::-1]:
                    if (role, r) in done:
                        continue
                    res = self.run_pass(role, r)
                    t0 = min((t.reply.sent for t in res.turns if t.reply.sent), default=0.0)
                    if role == "baseline" and r == 0:
                        first_base = texts(res)
                    v = self.verdicts(first_base, res) if role == "method" else {}  # every repeat
                    judged = first_copies(res)
                    rows = []
                    for tr in res.turns:  # only a prompt's first copy in the pass is judged
                        key = (tr.prompt.id, tr.turn)
                        verdict = v.get(key, {}) if judged[key] is tr else {}
                        rows.append(self.record(role, r, tr, verdict, t0))
                    writer.write_unit(rows)  # a pass's requests land together
                    passes_file.write(json.dumps(self.passes[-1]) + "\n")
                    passes_file.flush()
                    if progress:
                        progress.advance(task_id)
        writer.close()
        return writer.path

    def env(self) -> dict:
        import os
        import platform
        import sys

        return {
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "host": platform.node(),
            "device": str(self.s.device),
            "cpu": cpu_name(),
            "cpu_count": os.cpu_count(),
            "git_sha": git_sha(),
            "model": str(self.cfg.model.target),
            "dtype": str(self.s.dtype),
            "engine": f"openai/{self.s.name}",
            "server": str(self.s.name),
            "server_version": self.server_version,
            "server_argv": self.argv,
            "api": str(self.s.api),
            "engine_choice": {
                "engine": f"openai/{self.s.name}",
                "weights": str(self.s.dtype),
                "dtype": str(self.s.dtype),
                "kernel": "server",
                "batch_invariant": False,  # a server's batching makes no such promise
            },
        }


def texts(res) -> dict:
    """(prompt_id, turn) → the text of that turn's first copy in a pass (None: it failed)."""
    return {k: (None if t.reply.error else t.reply.text) for k, t in first_copies(res).items()}


def row_texts(rows: list[dict]) -> dict:
    """`texts` of a pass from its records (the first copy: the lowest conversation)."""
    out, conv = {}, {}
    for r in sorted(rows, key=lambda r: (r["conv"], r["turn"])):
        key = (r["prompt_id"], r["turn"])
        if conv.setdefault(r["prompt_id"], r["conv"]) == r["conv"]:
            out[key] = None if r.get("error") else r.get("output_text")
    return out


def _rewrite(path: Path, rows: list[dict]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    tmp.rename(path)


def first_copies(res) -> dict:
    """(prompt_id, turn) → that turn of the first conversation in the pass carrying the prompt
    (prompts repeat when num_requests exceeds them; verdicts judge the first copy)."""
    out = {}
    for t in res.turns:  # sorted by (conversation, turn)
        out.setdefault((t.prompt.id, t.turn), t)
    return out


def served_context(target: str) -> int | None:
    """The served model's context length, from its config (as the in-process run reads it)."""
    from transformers import AutoConfig

    try:
        return context_limit(AutoConfig.from_pretrained(resolve_path(target)))
    except (OSError, ValueError):  # a model only the server knows: the server enforces it
        return None


def execute(cfg, out: Path, progress=None):
    """Validate, run the cell, write summary.csv, answers/, env.json and config.yaml. The cell
    lifecycle is the in-process run's (bench.run.lifecycle): a complete cell is skipped, another
    cell's directory refused; an interrupted cell keeps the passes it finished and runs the
    rest (a pass is one server's run over every prompt, so a pass cut short runs again whole)."""
    import sys

    import pandas as pd

    from bench.serve.summary import summarize  # cost: pandas, scipy (~1 s); only execute needs it

    h, state, skip = lifecycle.open_cell(cfg, out)
    if skip:
        return pd.read_csv(out / "summary.csv"), out / "records.jsonl", None
    cell = Cell(cfg, out)
    if state:
        print(f"partial server cell, continued after its finished passes: {out}", file=sys.stderr)
    cells.write(out, h, "running", 0, len(cell.prompts))
    path = cell.run(progress, resume=bool(state))
    (out / "env.json").write_text(json.dumps(cell.env(), indent=2))
    (out / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    records = rec.load(path)
    ident = {
        "method": cfg.method.name,
        "k": cell.k,
        "temperature": float(cfg.temperature),
        "device": str(cell.s.device),
        "engine": f"openai/{cell.s.name}",
        "weights": str(cell.s.dtype),
        "dtype": str(cell.s.dtype),
        "server": str(cell.s.name),
        "concurrency": int(cfg.concurrency),
        "request_rate": cfg.request_rate,
    }
    summary = summarize(records, cell.passes, ident)
    summary.to_csv(out / "summary.csv", index=False)
    write_answers(out, path, cell.tokenizer, str(cfg.model.name))
    cells.write(out, h, "complete", len(cell.prompts), len(cell.prompts))
    return summary, path, cell
