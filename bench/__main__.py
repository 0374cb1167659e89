"""Run a benchmark: `python -m bench [group=option ...] [key=value ...]` (Hydra; -m to sweep).

    python -m bench method=ngram task=code limit=2 max_new_tokens=32
    python -m bench -m method=ngram,draft k=2,4,8 temperature=0,1 model.draft=DIR
    python -m bench backend=server server=vllm method=ngram concurrency=1,4   (a sweep: -m implied)

Writes records.jsonl, summary.csv, config.yaml and env.json into the run directory and prints
the summary table. Bad input: one line on stderr, exit status 2.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from bench.run.config import (
    ALIAS_NOTE,
    backend,
    check_overrides,
    method_knob_overrides,
    register,
)
from groundfloor.errors import UserError
from groundfloor.paths import CONF, writable_dir
from groundfloor.progress import progress_bar

SHARED: dict = {}  # engines loaded by earlier cells of this process: a sweep loads each once
OUTSIDE: dict = {}  # seconds outside the measured turns, by part, summed over this process's cells


def fail(msg: str) -> None:
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(2)


def run(cfg: DictConfig) -> None:
    from rich.console import Console

    from bench.outputs.table import print_summary  # cost: pandas, rich, torch; --help stays fast
    from bench.run.runner import execute  # cost: torch, scipy (~2.3 s); --help stays fast

    out = Path(HydraConfig.get().runtime.output_dir)
    place_job(cfg)
    console = Console(stderr=True)
    if cfg.engine == "openai":
        print(ALIAS_NOTE, file=sys.stderr)
    if backend(cfg) == "server":  # a server the suite starts (bench/serve/)
        from bench.outputs.table import print_serve_summary  # cost: pandas, rich, torch
        from bench.serve.cell import execute as execute_cell  # cost: torch, only for backend=server

        with progress_bar(console) as progress:
            summary, _, cell = execute_cell(cfg, out, progress)
        print_serve_summary(
            summary,
            f"{cfg.model.name} · server={cfg.server.name} · concurrency={cfg.concurrency} · {out}",
            Console(width=None if sys.stdout.isatty() else 200),
        )
        return
    with progress_bar(console) as progress:
        summary, _, runner = execute(cfg, out, progress, SHARED)
    row = summary.iloc[0] if len(summary) else {}
    partial = " · PARTIAL (interrupted)" if bool(row.get("partial", False)) else ""
    skipped = " · complete earlier, skipped" if runner is None else ""
    print_summary(
        summary,
        f"{cfg.model.name} · {row.get('device', '?')} · engine="
        f"{row.get('engine', '?')} · weights={row.get('weights', '?')} "
        f"({row.get('target_format', '?')}; draft {row.get('draft_format', '?')}) · "
        f"dtype={row.get('dtype', '?')} · {out}{partial}{skipped}",
        # a log's width: the summary's widest row (a long k=auto label, the loop columns) whole
        Console(width=None if sys.stdout.isatty() else 240),
    )
    if runner is not None:
        print(outside_line(runner.setup_s), file=sys.stderr)
    if partial:  # Ctrl-C: the finished prompts are summarised; stop here (and stop a sweep)
        sys.exit(130)


def outside_line(setup_s: dict) -> str:
    """This cell's time outside its measured turns, by part, and the sweep's running total."""
    for part, sec in setup_s.items():
        OUTSIDE[part] = OUTSIDE.get(part, 0.0) + sec
    split = lambda d: ", ".join(f"{k} {v:.1f} s" for k, v in d.items())  # noqa: E731
    return (
        f"outside the measured turns: {sum(setup_s.values()):.1f} s ({split(setup_s)}); "
        f"this sweep so far {sum(OUTSIDE.values()):.1f} s ({split(OUTSIDE)})"
    )


def local_parallel(launcher: dict) -> bool:
    """Does this Hydra launcher run several jobs at once on this machine?"""
    target = str(launcher.get("_target_", ""))
    if "Joblib" in target:
        return launcher.get("n_jobs", -1) not in (1, None)
    if "LocalLauncher" in target and "submitit" in target:  # submitit's local executor
        return True
    if "Ray" in target:
        return not (launcher.get("ray") or {}).get("init", {}).get("address")
    return False


def place_job(cfg: DictConfig) -> None:
    """One device per job. Jobs that a launcher runs side by side on one machine would share
    its cores and corrupt each other's timings: refused on a CPU unless device.allow_shared;
    on a machine with several GPUs each job takes GPU (job number mod GPUs)."""
    import torch
    from omegaconf import OmegaConf

    hc = HydraConfig.get()
    launcher = OmegaConf.to_container(hc.launcher, resolve=True) if "launcher" in hc else {}
    if not local_parallel(launcher or {}):
        return
    gpus = torch.cuda.device_count() if cfg.device.name in ("cuda", "auto") else 0
    if gpus:
        torch.cuda.set_device(int(hc.job.num) % gpus)
        return
    if not cfg.device.get("allow_shared", False):
        raise UserError(SHARED_CPU)


SHARED_CPU = (
    "hydra/launcher runs jobs in parallel on this machine, and on a CPU they would share its "
    "cores and corrupt each other's timings; run them one at a time (the default launcher), or "
    "set device.allow_shared=true to accept that"
)


def refuse_shared_cpu(argv: list[str]) -> None:
    """The same refusal as place_job's, before any job starts: from the command line alone, a
    launcher that runs jobs side by side here, on a CPU, without device.allow_shared=true."""
    kv = dict(a.lstrip("+").split("=", 1) for a in argv if "=" in a)
    launcher = kv.get("hydra/launcher", "basic")
    parallel = (
        launcher == "submitit_local"
        or (launcher == "joblib" and kv.get("hydra.launcher.n_jobs", "-1") != "1")
        or (launcher == "ray" and not kv.get("hydra.launcher.ray.init.address"))
    )
    if not parallel or kv.get("device.allow_shared", "false").lower() == "true":
        return
    device = kv.get("device", "auto")
    if device == "cpu" or (device == "auto" and not _cuda_available()):
        raise UserError(SHARED_CPU)


def _cuda_available() -> bool:
    import torch  # only for a parallel launcher: the plain path does not pay torch's import here

    return torch.cuda.is_available()


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    try:
        run(cfg)
    except UserError as e:
        fail(str(e))


AXES = ("concurrency", "request_rate")  # a comma list of these is a sweep even without -m


def sweep_axes(argv: list[str]) -> list[str]:
    """`concurrency=1,4` (a server sweep, backend=server) runs as `-m concurrency=1,4`."""
    if any(a in ("-m", "--multirun") for a in argv):
        return argv
    if any(a.split("=", 1)[0] in AXES and "," in a.split("=", 1)[-1] for a in argv if "=" in a):
        return ["-m", *argv]
    return argv


def output_dir(argv: list[str]) -> tuple[Path, str]:
    """(folder, setting): where this command writes, as its command line or conf/config.yaml
    names it: a sweep's hydra.sweep.dir, a run's hydra.run.dir or out=. An interpolated value
    (the defaults' time stamp, a sweep's hash) is cut to the folders written out before it."""
    from omegaconf import OmegaConf

    given = dict(a.lstrip("+").split("=", 1) for a in argv if "=" in a)
    conf = OmegaConf.to_container(OmegaConf.load(CONF / "config.yaml"), resolve=False)
    if any(a in ("-m", "--multirun") for a in argv):
        setting, default = "hydra.sweep.dir", conf["hydra"]["sweep"]["dir"]
    else:
        setting, default = "hydra.run.dir" if "hydra.run.dir" in given else "out", conf["out"]
    value = given.get(setting, default)
    fixed = value.split("${")[0]
    return (Path(fixed) if fixed == value or fixed.endswith("/") else Path(fixed).parent), setting


if __name__ == "__main__":
    warnings.filterwarnings("ignore", category=UserWarning)
    register()
    try:
        check_overrides(sys.argv[1:])
        refuse_shared_cpu(sys.argv[1:])
        sys.argv[1:] = method_knob_overrides(sweep_axes(sys.argv[1:]))
        writable_dir(*output_dir(sys.argv[1:]))  # before Hydra makes it, and before any load
    except UserError as e:
        fail(str(e))
    main()
