"""Run outputs: records.jsonl (one line per prompt × turn × role × repeat), env.json, config.

Records are appended prompt by prompt (one write, flushed to disk), so a run that stops keeps
every finished prompt, and a resumed run (bench.run.cells) continues after them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import sys
from pathlib import Path

import torch

from engines.cpu import FLAGS_THAT_MATTER, cpu_flags, cpu_kind
from engines.load import gguf_format
from groundfloor import provenance
from groundfloor.errors import UserError
from groundfloor.loops import looping
from groundfloor.machine import cpu_name, job_cpus

MB = 1e6


def record(
    info: dict,
    prompt,
    method_run: str,
    role: str,
    repeat: int,
    turn: int,
    prompt_ids: list[int],
    res,
    peak: int | None,
    verdict: dict,
    unit: dict,
) -> dict:
    """One line of records.jsonl. info: the run's shared fields (run_info); res: the turn's
    TurnResult, every field of which is written (turn_fields); unit: the turn's load sample and
    interference flags (bench.run.interference)."""
    t = res.times_ns
    new = len(res.output_ids)
    wall = t["wall"] / 1e9
    ttft = t.get("ttft", 0) / 1e9
    fields = turn_fields(res)
    ids = fields.pop("output_ids")  # last: the longest field
    return {
        "task": prompt.task,
        "category": prompt.category,
        "subcategory": prompt.subcategory,
        "prompt_id": prompt.id,
        "turn": turn,
        "repeat": repeat,
        "role": role,
        **info,
        "method_run": method_run,
        "new_tokens": new,
        "wall_s": wall,
        "host_wall_s": t.get("host_wall", t["wall"]) / 1e9,
        **{f"{phase}_s": t[phase] / 1e9 for phase in PHASES},
        "ttft_s": ttft,
        "tpot_s": (wall - ttft) / (new - 1) if new > 1 else None,
        **fields,
        # the n-gram and periodic-tail rules of groundfloor.loops, a closing EOS left out
        "loop": looping(ids[:-1] if res.stop == "eos" else ids),
        "peak_mem_delta_mb": peak / MB if peak is not None else None,
        **{key: verdict.get(key) for key in VERDICT},
        **unit,
        "output_ids": ids,
    }


PHASES = ("prefill", "draft", "verify", "other")  # the clock's spans of a turn (times_ns)
# alpha1_forced's untimed pass (bench.run.forced), on the method records of a prompt's first
# turn (every repeat: the same figures): rounds that drafted a first token, and that accepted it
ALPHA1 = ("alpha1_drafted", "alpha1_accepted")
VERDICT = ("verdict", "first_divergence", "logit_gap", "method_gap", "redecode_verdict")
VERDICT += ("dist_pvalue", "dist_status")  # check=distribution: on the units it sampled only
# stop → stop_reason: what ended the turn, "eos" or "budget" (max_new_tokens; tasks.fit keeps
# every prompt plus its budget within the model's context, so no turn ends on the context)
RENAMED = {"n_prompt": "prompt_tokens", "stop": "stop_reason"}


def turn_fields(res) -> dict:
    """Every field of a TurnResult under its records.jsonl name, so that a new measurement is
    written with no change here: `*_ns` in seconds as `*_s` (a list element by element),
    `*_bytes` in MB as `*_mb`, n_prompt as prompt_tokens, stop as stop_reason; times_ns is
    spread by `record` (one column per phase, with wall, time to first token and time per
    output token)."""
    out = {}
    for f in dataclasses.fields(res):
        name, value = RENAMED.get(f.name, f.name), getattr(res, f.name)
        if name == "times_ns":
            continue
        if name.endswith("_ns"):
            name = name[: -len("_ns")] + "_s"
            value = [v / 1e9 for v in value] if isinstance(value, list) else value / 1e9
        elif name.endswith("_bytes"):
            name, value = name[: -len("_bytes")] + "_mb", value / MB
        out[name] = value
    return out


def target_format(choice: dict) -> str:
    """The target's weights as a table names them: a GGUF's own blocks by the file's format
    (Q4_1), its 16-bit copy as "bf16 (from Q4_1)", else the resolved format."""
    src = str(choice.get("source", ""))
    if src.startswith("GGUF blocks of"):
        return gguf_format(src)
    if src.startswith("bf16 from the shipped"):
        return f"bf16 (from {src.split()[4]})"
    return str(choice["weights"])


def draft_format(info: dict) -> str:
    """The drafter's weights: a self-draft's kind (self:int4, self:q4_1), a learned drafter's
    drafter_weights (int8, float), "none" for a method without one."""
    own = str(info.get("draft_model", ""))
    if own.startswith("self:"):
        return own.split(":")[0] + ":" + own.split(":")[1]
    return str(info.get("drafter_weights", "none"))


def run_info(cfg, method_name: str, k, device, choice: dict, method_info=None) -> dict:
    """The fields every record of a run shares."""
    return {
        "method": method_name,
        "k": k,
        "temperature": float(cfg.temperature),
        "top_k": int(cfg.top_k),
        "top_p": float(cfg.top_p),
        "device": device.type,
        "dtype": choice["dtype"],
        "engine": choice["engine"],
        "weights": choice["weights"],
        "model": str(cfg.model.name),
        "batch": int(cfg.get("batch", 1)),  # conversations decoded together (bench.run.batched)
        "kv_dtype": choice.get("kv_dtype", choice["dtype"]),  # the KV cache's (model.kv_dtype)
        "target_format": target_format(choice),
        "draft_format": draft_format(method_info or {}),
    }


def unit_records(info: dict, prompt, names: dict, runs: dict, verdicts: list[dict], repeats: int):
    """The records of one measured prompt: runs as bench.run.interference.measure returns them,
    names {role: method name}, verdicts[repeat][turn] (bench.outputs.verdict.turn_verdicts)."""
    for role in ("baseline", "method"):
        for r, conv in enumerate(runs[role]):
            for t, (ids, res, peak, load) in enumerate(conv):
                u = runs["judged"][t]
                unit = {
                    "quiet": u["quiet"][role][r],
                    "unit_disturbed": u["disturbed"],
                    "unit_clean": u["clean"],
                    "remeasured": u["remeasured"],
                    "extra_round": r >= repeats,
                    **load,
                }
                v = verdicts[r][t] if role == "method" else {}
                yield record(info, prompt, names[role], role, r, t, ids, res, peak, v, unit)


def stamp_first_turn(rows: list[dict], fields: dict) -> list[dict]:
    """`fields` (alpha1_forced's counts) on the method records of the prompt's first turn."""
    for r in rows:
        if r["role"] == "method" and r["turn"] == 0:
            r.update(fields)
    return rows


def env_info(
    device, target_spec: str, choice: dict, target, method, cost_curve: dict, curve_context=128
) -> dict:
    """env.json: versions, the machine, what ran (engine choice), sizes and the cost curve."""
    import transformers

    return {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "platform": platform.platform(),
        "host": platform.node(),
        "device": device.type,
        "cpu": cpu_name(),
        "cpu_kind": cpu_kind(),
        "cpu_count": os.cpu_count(),
        "job_cpus": job_cpus()[1],  # the affinity set, capped by a cgroup quota
        "cpu_flags": sorted(cpu_flags_of_interest()),
        "torch_threads": torch.get_num_threads(),
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "git_sha": provenance.git_sha(),
        "model": target_spec,
        "dtype": choice["dtype"],
        "engine_choice": choice,
        "target_weight_mb": target.weight_bytes() / MB,
        "method_static_mb": method.static_bytes() / MB,
        "method_info": getattr(method, "info", {}),
        "cost_curve_ms": {q: round(c * 1e3, 3) for q, c in cost_curve.items()},
        "cost_curve_context": curve_context,  # cached tokens before each timed forward
    }


def cpu_flags_of_interest() -> set[str]:
    return set(cpu_flags() & set(FLAGS_THAT_MATTER))


class RecordWriter:
    def __init__(self, out: Path):
        out.mkdir(parents=True, exist_ok=True)
        self.dir = out
        self.path = out / "records.jsonl"
        self.f = open(self.path, "a", encoding="utf-8")

    def write_env(self, env: dict, cfg) -> None:
        """env.json, and config.yaml: the composed config plus what `auto` resolved to."""
        from omegaconf import OmegaConf

        (self.dir / "env.json").write_text(json.dumps(env, indent=2))
        choice = env["engine_choice"]
        resolved = {k: choice[k] for k in ("engine", "weights", "dtype", "kernel")}
        (self.dir / "config.yaml").write_text(
            OmegaConf.to_yaml(cfg)
            + "# resolved on this machine (env.json says why)\n"
            + OmegaConf.to_yaml({"resolved": resolved})
        )

    def write_unit(self, rows: list[dict]) -> None:
        """A prompt's lines in one write, flushed to disk: a killed run keeps whole prompts."""
        self.f.write("".join(json.dumps(r) + "\n" for r in rows))
        self.f.flush()
        os.fsync(self.f.fileno())

    def close(self) -> None:
        self.f.close()


def read_rows(path: Path) -> list[dict]:
    """records.jsonl's rows; a last line a kill cut short is left out (drop_cut_line removes
    it before a resumed run appends). Any other line that is not a record is a UserError
    naming the file and the line: the rows after it would otherwise be lost silently."""
    return parse_rows(path)[0]


def parse_rows(path: Path) -> tuple[list[dict], int | None]:
    """(the rows of records.jsonl, the byte offset where a cut last line starts, or None)."""
    path = Path(path)
    if not path.exists():
        return [], None
    data = path.read_bytes()
    *lines, tail = data.split(b"\n")  # tail: b"" after a whole last line, else a cut one
    rows = []
    for number, line in enumerate(lines, 1):
        try:
            row = json.loads(line)
        except ValueError as e:  # JSONDecodeError and UnicodeDecodeError
            raise UserError(corrupt(path, number, str(e).splitlines()[0]))
        if not isinstance(row, dict):
            raise UserError(corrupt(path, number, f"a JSON {type(row).__name__}, not a record"))
        rows.append(row)
    return rows, (len(data) - len(tail) if tail else None)


def corrupt(path: Path, number: int, why: str) -> str:
    return (
        f"{path}:{number}: not a record ({why}); the file is left as it is: repair or remove "
        "that line, or measure into another out="
    )


def drop_cut_line(path: Path) -> None:
    """Before a resumed run appends to records.jsonl: a last line that a kill cut short is
    removed, with one warning line, so that the next prompt's records start on a line of their
    own; a corrupt line elsewhere raises (parse_rows) and leaves the file as it is."""
    rows, cut = parse_rows(path)
    if cut is None:
        return
    size = Path(path).stat().st_size
    print(
        f"warning: {path}: its last line was cut short ({size - cut} bytes, a write that was "
        f"killed); dropped, resuming after its {len(rows)} whole records",
        file=sys.stderr,
    )
    os.truncate(path, cut)


def load(path: Path):
    import pandas as pd

    return pd.DataFrame(read_rows(path))
