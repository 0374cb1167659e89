"""One run lifecycle for every backend: which prompts, which cell, what to skip or refuse.

    prompts = pick_prompts(cfg)                             # task, limit, limit_per_category
    prompts, skipped = fit_prompts(cfg, prompts, tok, ctx)  # each conversation fits the context
    h, state, skip = open_cell(cfg, out)                    # validate; resume, skip or refuse

The in-process runner (bench.run.runner) and the server backend (bench.serve.cell) both start
here, so a knob means the same whichever produced the tokens; each then writes records through
bench.outputs.records and cell.json through bench.run.cells.
"""

from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import OmegaConf

from bench.outputs import records
from bench.run import cells
from bench.run.config import validate
from bench.run.interference import Rules, interfered
from engines.load import load
from groundfloor import provenance
from groundfloor.errors import UserError
from groundfloor.load import MIN_WINDOW_S, LoadProbe
from groundfloor.paths import writable_dir
from tasks.fit import fit_context
from tasks.loader import load_prompts
from tasks.prompt import Prompt


def pick_prompts(cfg) -> list[Prompt]:
    """The task's prompts: the first `limit` per task and/or `limit_per_category` per category."""
    task_cfg = OmegaConf.to_container(cfg.task, resolve=True)
    prompts = load_prompts(task_cfg, cfg.limit, cfg.get("limit_per_category"))
    if not prompts:
        raise UserError(f"task={cfg.task.name!r} selected no prompts")
    return prompts


def max_new(cfg, prompt: Prompt) -> int:
    return int(cfg.max_new_tokens or prompt.max_new_tokens)


def fit_prompts(cfg, prompts: list[Prompt], tokenizer, context: int | None):
    """(prompts that fit, ids left out): fit_context with the run's knobs; none left is an error."""
    kept, skipped = fit_context(
        prompts,
        tokenizer,
        lambda p: max_new(cfg, p),
        context,
        cfg.task.get("truncate"),
        bool(cfg.model.chat_template),
    )
    if not kept:
        raise UserError(
            f"every prompt of task={cfg.task.name!r} is longer than the model's "
            f"context; set task.truncate=left or right"
        )
    return kept, skipped


def open_cell(cfg, out: Path) -> tuple[str, dict | None, bool]:
    """Validate the config and `out`, then (cell hash, its state in `out`, skip?), before
    anything loads. With resume=true a complete cell of the same hash and code is skipped and
    an unfinished one continues (a last records line that a kill cut short is dropped). `out`
    that cannot be written, holding another cell, this cell measured by other code, this cell
    with resume=false, or records with a corrupt line, is refused in one line, left as it is."""
    validate(cfg)
    writable_dir(out)
    h, state = cells.cell_hash(cfg), cells.read(out)
    if not state:
        return h, None, False
    if state["hash"] != h:
        changes = cells.config_changes(out, cfg)
        raise UserError(
            f"out={str(out)!r} holds the results of another configuration (cell "
            f"{state['hash']}, this one is {h}"
            f"{'; ' + cells.shown(changes) if changes else ''}); choose another out= or remove it"
        )
    if not cfg.resume:
        raise UserError(
            f"out={str(out)!r} already holds this cell's results; resume=true "
            f"continues it, or choose another out="
        )
    refuse_other_code(out, state)
    if state["status"] == "complete" and (out / "summary.csv").exists():
        print(f"complete, skipped: {out}", file=sys.stderr)
        return h, state, True
    records.drop_cut_line(out / "records.jsonl")
    return h, state, False


def refuse_other_code(out: Path, state: dict) -> None:
    """A cell is resumed only by the code that measured it: another commit, or the tree
    modified otherwise, would mix two programs' results (or skip a cell the new code never
    ran)."""
    then = cells.recorded_code(out, state)
    change = then and cells.code_change(then, provenance.code_state())
    if change:
        raise UserError(
            f"out={str(out)!r} was measured at {change}; its results are left as they "
            "are: measure this code into another out= (a sweep: hydra.sweep.dir=), or remove it"
        )


def load_watched(spec: str, device, asked: dict, rules: Rules, tries: int = 2):
    """`load` with the choice it times on the machine (model.kernel=auto between torch's and
    oneDNN's products for float32 weights) watched for other work, as
    turns are: a load that timed a choice while others took more than `rules.others` of the
    machine is done again, up to `tries` times. The choice records what the last load saw
    (`probe_load`), how many loads it took and, when the last one was still disturbed,
    `probes_disturbed` (a warning line says so: a quiet machine may choose otherwise). A load
    that timed something is watched for groundfloor.load.MIN_WINDOW_S at least."""
    watch = LoadProbe(device=device)
    for attempt in range(1, tries + 1):
        watch.start()
        target, choice = load(spec, device, **asked)
        timed = "seconds" in choice["kernel_probe"]
        seen = watch.stop(at_least=MIN_WINDOW_S if timed else 0.0)
        disturbed = timed and interfered(seen, rules)
        if not disturbed:
            break
    choice.update(probe_load=seen, probe_loads=attempt, probes_disturbed=disturbed)
    if disturbed:
        print(
            f"warning: other work took {seen.get('others_cpu')} of the machine (steal "
            f"{seen.get('steal')}) while model.kernel=auto timed its choice, "
            f"{attempt} times; dtype={choice['dtype']} kernel={choice['kernel']} may not be what "
            "a quiet machine picks (set them explicitly to pin them)",
            file=sys.stderr,
        )
    return target, choice


def load_target(cfg, device, shared: dict | None = None) -> tuple[object, dict]:
    """The target engine the cell asks for → (engine, engine_choice). `shared` holds engines
    loaded by earlier cells of this process (a sweep), keyed by what was asked for: what belongs
    to the engine and the machine (weights, kernel choice, cost curve) is loaded once."""
    engine = str(cfg.engine)
    needs = cfg.method.get("engine")  # hf_pld, hf_assisted: transformers' model itself
    if needs and engine == "auto":
        engine = str(needs)
    asked = dict(
        engine=engine,
        weights=str(cfg.model.get("weights", "auto")),
        dtype=str(cfg.model.get("dtype", "auto")),
        kernel=str(cfg.model.get("kernel", "auto")),
        compile=bool(cfg.model.get("compile", False)),
        kv_dtype=str(cfg.model.get("kv_dtype", "auto")),
    )
    key = (str(cfg.model.target), str(device), *asked.values())
    if shared is not None and key in shared:
        target, choice = shared[key]
        choice = {**choice, "shared_from_earlier_cell": True}
    else:
        rules = Rules(float(cfg.disturb_ratio), float(cfg.disturb_others))
        target, choice = load_watched(str(cfg.model.target), device, asked, rules)
        if shared is not None:
            shared[key] = (target, dict(choice))
    if needs and cfg.engine == "auto":
        choice["engine_reason"] = f"auto: method={cfg.method.name} runs on engine={needs}"
    return target, choice
