"""batch=B: the cell's conversations decoded B at a time (bench.decode.batch), the baseline at
the same B on the same conversations, the two sides' batch runs interleaved repeat by repeat.

A batch run is the unit of timing here: every conversation of the cell goes through B slots
(continuous batching in prompt order), and its wall time and new tokens give the aggregate
throughput; each turn keeps its own TurnResult (its latency under that load). The records are
the usual ones (one per prompt × turn × role × repeat, the greedy verdict against the baseline's
same repeat), with the batch run's figures added (batch_*), from which summary.csv's batch
metrics come (bench.outputs.metrics). A batch run is judged disturbed when other work or steal
took more than `disturb_others` of the machine during it (groundfloor.load); disturbed runs are
flagged, not re-measured. Every conversation gets its own budget (the runner's max_new, as at
B = 1).

The batch-1 check: a bug in the shared forward hits both sides at B alike, so method@B against
ar@B cannot see it. At T = 0, after the timed runs, the baseline decodes every conversation
once more at B = 1 on the engine itself (untimed), and every record of both sides is compared
with it turn by turn: `batch1_match` (None where the turn's prompt is not the batch-1 one's, an
earlier turn having diverged, or at T > 0) and `batch1_divergence` (the first position that
differs). A method turn that differs from its batch-1 tokens takes the worse of its verdict
and bench.outputs.verdict.compare's against the batch-1 tokens, so exact_match counts it; a
later method turn whose prompt is no longer the batch-1 one is `after-divergence`, as a turn
after a divergence from the baseline at B is.
"""

from __future__ import annotations

from bench.decode.batch import Batch
from bench.outputs.verdict import AFTER_DIVERGENCE, compare, first_divergence
from bench.run.interference import interfered
from engines import probe
from groundfloor.load import LoadProbe
from groundfloor.prompting import seed_for, turn_ids
from methods.registry import Context, build_method


def slot_methods(runner, name_or_cfg):
    """make_method for Batch: the run's method (or its baseline) on a slot's target; k=auto
    calibrated with the run's drafting costs and the cost curve as one sequence among B sees
    it (engines.probe.BatchCurve: a draft pays when it raises the batch's tokens per second,
    its rows priced on top of those the sequences before it in the round chose), planning on
    that model rather than on its rounds' measured time (the batch's)."""

    B = int(runner.cfg.batch)

    def make(target):
        c = runner.ctx
        ctx = Context(target, c.tokenizer, c.device, c.dtype, c.model_cfg, c.k_override, c.eos,
                      c.drafter_weights)  # fmt: skip
        m = build_method(name_or_cfg, ctx)
        m.round_seconds = B == 1  # among others its rounds' time is the batch's
        if runner.calibration is not None:  # k=auto on its share of the batch's forward
            curve, drafting = runner.calibration
            others = getattr(target, "others_rows", None)  # the round's rows so far
            m.calibrate(probe.BatchCurve(curve, B, others) if B > 1 else curve, drafting)
        return m

    return make


class Batched:
    def __init__(self, runner):
        self.runner, B = runner, int(runner.cfg.batch)
        target = runner.target
        self.sides = {
            "baseline": Batch(target, slot_methods(runner, runner.method.baseline), B,
                              runner.device),
            "method": Batch(target, slot_methods(runner, runner.cfg.method), B, runner.device),
        }  # fmt: skip
        self.probe = LoadProbe(device=runner.device)

    def turn_ids(self, prompt, turn: int, outputs: list) -> list[int] | None:
        """A conversation's turn as the runner builds it (None after its last)."""
        if turn >= len(prompt.turns):
            return None
        return turn_ids(self.runner.tokenizer, prompt.turns, outputs[:turn],
                        bool(self.runner.cfg.model.chat_template))  # fmt: skip

    def side(self, role: str, prompts: list, max_new):
        """One batch run of a side over `prompts` (max_new: one budget, or one per prompt) →
        (BatchRun, the load during it)."""
        r = self.runner
        gen = None
        if not r.sampling.greedy:
            import torch

            gen = torch.Generator(device=r.device).manual_seed(seed_for(r.cfg.seed, "batch", 0))
        self.probe.start()
        run = self.sides[role].run(prompts, self.turn_ids, max_new, r.sampling, r.eos, gen)
        return run, self.probe.stop()

    def warm(self, prompts: list) -> None:
        """One untimed short batch run of each side (threads, caches, first calls)."""
        for role in self.sides:
            self.side(role, prompts[: self.sides[role].size], 8)

    def measure(self, prompts: list, repeats: int) -> dict:
        """`repeats` batch runs of each side, alternating which goes first → {prompt id: runs}
        in the shape bench.outputs.records.unit_records takes, and the batch runs' figures."""
        max_new = [self.runner.max_new(p) for p in prompts]  # each its own, as at B = 1
        per = {p.id: {"baseline": [], "method": []} for p in prompts}
        batches = []
        for rep in range(repeats):
            order = ["baseline", "method"] if rep % 2 == 0 else ["method", "baseline"]
            for role in order:
                run, load = self.side(role, prompts, max_new)
                quiet = not interfered(load, self.runner.rules)
                batches.append((rep, role, run, load, quiet))
                for i, p in enumerate(prompts):
                    turns = sorted(t for (j, t) in run.turns if j == i)
                    conv = [(run.ids[(i, t)], run.turns[(i, t)], None, load) for t in turns]
                    per[p.id][role].append((conv, run, quiet, run.slot_of[i]))
        return {"prompts": per, "batches": batches}

    def batch1(self, prompts: list) -> dict:
        """{prompt id: [(turn prompt ids, output ids)]}: the baseline's conversations decoded
        one at a time on the engine itself, untimed, after the timed runs (greedy only: a
        sampled batch draws from one generator, so its tokens are not the batch-1 draws)."""
        r = self.runner
        if not r.sampling.greedy:
            return {}
        return {
            p.id: [(ids, res.output_ids) for ids, res, *_ in
                   r.conversation(r.baseline, p, r.max_new(p))]
            for p in prompts
        }  # fmt: skip

    def unit_records(self, prompt, per: dict, repeats: int, ref: list | None) -> list[dict]:
        """One prompt's records: the runner's, with the batch runs' figures and the batch-1
        check (`ref`: Batched.batch1's entry for the prompt, None at T > 0)."""
        r = self.runner
        records = r.unit_records(prompt, units(per, repeats))
        turns = [
            (batch_fields(int(r.cfg.batch), run, quiet, slot), ids)
            for role in ("baseline", "method")
            for conv, run, quiet, slot in per[role]
            for ids, *_ in conv
        ]  # unit_records' order: role, repeat, turn
        for rec, (fields, ids) in zip(records, turns, strict=True):
            rec.update(fields)
            rec.update(self.against_batch1(rec, ids, ref))
        return records

    def against_batch1(self, rec: dict, ids: list[int], ref: list | None) -> dict:
        """A record's batch-1 fields, and for a method turn that differs, the worse verdict."""
        t = rec["turn"]
        if ref is None or t >= len(ref):
            return {"batch1_match": None, "batch1_divergence": None}
        if ref[t][0] != ids:  # an earlier turn left the batch-1 tokens: another prompt
            out = {"batch1_match": None, "batch1_divergence": None}
            if rec["role"] == "method" and rec.get("verdict") in WORSE[:2]:
                out.update(AFTER_DIVERGENCE)
            return out
        want, got = ref[t][1], rec["output_ids"]
        j = first_divergence(want, got)
        out = {"batch1_match": j is None, "batch1_divergence": j}
        if j is not None and rec["role"] == "method" and rec.get("verdict") in WORSE:
            r = self.runner
            invariant = bool(r.choice.get("batch_invariant", False))
            v = compare(r.target, ids, want, got, float(r.cfg.tie_tolerance), r.device, invariant)
            if WORSE.index(v["verdict"]) > WORSE.index(rec["verdict"]):
                out.update(v)
        return out


WORSE = ("exact", "near-tie", "mismatch")  # greedy verdicts, best first


def batch_fields(B: int, run, quiet: bool, slot: int) -> dict:
    """The batch run's figures every record of it carries."""
    return {
        "batch": B,
        "slot": slot,
        "batch_wall_s": run.wall_s,
        "batch_new_tokens": run.new_tokens,
        "batch_forwards": run.forwards,
        "batch_rows": run.rows,
        "batch_quiet": quiet,
        "batch_static_mb": run.static_bytes / 1e6,
    }


def units(per_role: dict, repeats: int) -> dict:
    """One prompt's batch runs as bench.run.interference.measure's `runs`: conversations per
    repeat, and per turn the quiet flags of the batch runs they were in."""
    runs = {role: [conv for conv, *_ in per_role[role]] for role in ("baseline", "method")}
    n_turns = len(runs["method"][0]) if runs["method"] else 0
    quiet = {role: [q for _, _, q, _ in per_role[role]] for role in ("baseline", "method")}
    clean = all(quiet["baseline"]) and all(quiet["method"])
    runs["judged"] = [
        {"quiet": quiet, "disturbed": not clean, "clean": clean, "remeasured": 0}
        for _ in range(n_turns)
    ]
    return runs
