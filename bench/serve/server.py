"""A server's lifecycle from the run config: build its command, start it, wait until healthy,
stop it. The suite owns the process: one server at a time, on `server.host` (127.0.0.1 by
default), its output kept in the run directory (`server_<role>_<repeat>.log`).

`server.cmd` is the plain server's argv; the speculative server adds `server.speculative.<method>`;
`server.env` is added to its environment. Placeholders in any argument or environment value,
replaced as plain text (so JSON braces need no escaping):
    {host} {port} {served}      where it listens and the model name it serves
    {model_dir}                 the target as a transformers directory (embedded:NAME converted)
    {gguf}                      the target's GGUF file (embedded models; else model.gguf)
    {k} {k+1}                   the draft length (k, else the method's own default), and k + 1
    {method.X} {model.X}        any value of the method or model config (model paths resolved)
    {server.X}                  any value of the server config (e.g. {server.dtype})
The first argument is looked up in `server.venv`/bin, then on PATH.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from groundfloor.errors import UserError
from groundfloor.paths import group_options


def placeholders(cfg) -> dict[str, str]:
    from groundfloor.models import embedded_gguf, resolve_path  # cost: torch (1.1 s); else stdlib

    s, model, method = cfg.server, cfg.model, cfg.method
    out = {"{host}": str(s.host), "{port}": str(s.port), "{served}": str(s.served_name)}
    for key, value in s.items():
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            out["{server.%s}" % key] = (
                str(Path(str(value)).expanduser()) if key == "venv" else str(value)
            )
    for key, value in model.items():
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            v = str(value)
            out["{model.%s}" % key] = resolve_path(v) if key in PATH_KEYS else v
    for key, value in method.items():
        if isinstance(value, (str, int, float, bool)) or value is None:
            out["{method.%s}" % key] = str(value)
    k = server_k(cfg)
    out["{k}"] = str(k)
    out["{k+1}"] = str(int(k) + 1) if k is not None else "None"
    out["{model_dir}"] = "" if "{model_dir}" not in str(s.cmd) else resolve_path(str(model.target))
    gguf = embedded_gguf(str(model.target)) if "{gguf}" in str(s.cmd) else None
    out["{gguf}"] = str(gguf or model.get("gguf") or "")
    return out


def server_k(cfg):
    """The draft length a server is started with: k, else the method's own; a server drafts a
    fixed length, so k=auto starts it with the method's `fixed_k` (none: its own default)."""
    method = cfg.method
    k = cfg.k if cfg.k is not None else method.get("k")
    return method.get("fixed_k") if k == "auto" else k


# the model config's keys naming a folder, file or Hub id: the target, its GGUF file and every
# drafter of conf/drafter/ (a new drafter's weights resolve as the others' do, with no edit here)
PATH_KEYS = ("target", "gguf", *group_options("drafter"))


def substitute(arg: str, values: dict[str, str]) -> str:
    for key, v in values.items():
        if key in arg:
            arg = arg.replace(key, v)
    return arg


def command(cfg, role: str) -> list[str]:
    """The argv for `role` (baseline: the plain server; method: plus its speculation)."""
    s = cfg.server
    argv = [str(a) for a in s.cmd]
    if role == "method":
        spec = s.get("speculative") or {}
        name = str(cfg.method.name)
        if name not in spec:
            raise UserError(
                f"server={s.name} has no speculative arguments for method={name}; "
                f"it has: {', '.join(spec) or 'none'} (server.speculative.<method>)"
            )
        argv += [str(a) for a in spec[name]]
    values = placeholders(cfg)
    argv = [substitute(a, values) for a in argv]
    argv[0] = find_executable(argv[0], s.get("venv"), str(s.name))
    return argv


def find_executable(name: str, venv, server: str) -> str:
    if venv:
        cand = Path(str(venv)).expanduser() / "bin" / name
        if cand.exists():
            return str(cand)
    found = shutil.which(name)
    if found:
        return found
    where = f"{Path(str(venv)).expanduser() / 'bin'} or " if venv else ""
    raise UserError(
        f"server={server}: {name!r} is not in {where}PATH; install the server "
        f"(README: Benchmark a server) or set server.venv"
    )


def get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    """(HTTP status, body) of a GET; status 0 when nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, ""
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return 0, ""


class Server:
    """`with Server(cfg, role, log_path) as srv:` — started and healthy inside, stopped after."""

    def __init__(self, cfg, role: str, log_path: Path):
        self.cfg, self.role, self.log_path = cfg, role, log_path
        self.argv = command(cfg, role)
        s = cfg.server
        self.base = f"http://{s.host}:{s.port}"
        self.proc: subprocess.Popen | None = None
        self.startup_s: float | None = None

    def url(self, path: str) -> str:
        return self.base + path

    def __enter__(self) -> "Server":
        s = self.cfg.server
        if get(self.url(str(s.health)), timeout=2)[0]:
            raise UserError(
                f"something already answers on {self.base}; the suite starts its "
                f"own server there (stop it, or choose another server.port)"
            )
        values = placeholders(self.cfg)
        env = dict(
            os.environ,
            **{str(k): substitute(str(v), values) for k, v in (s.get("env") or {}).items()},
        )
        self.log = open(self.log_path, "w", encoding="utf-8")
        self.log.write(" ".join(self.argv) + "\n")
        self.log.flush()
        t0 = time.monotonic()
        # its own process group: stopping it stops the workers it spawns
        self.proc = subprocess.Popen(
            self.argv,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
        try:
            self.wait_healthy(float(s.startup_timeout_s))
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - t0
        return self

    def wait_healthy(self, timeout: float) -> None:
        s = self.cfg.server
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"server={s.name} ({self.role}) exited with status "
                    f"{self.proc.returncode} while starting; its log: "
                    f"{self.log_path}\n{tail(self.log_path)}"
                )
            if (
                get(self.url(str(s.health)), timeout=2)[0] == 200
                and get(self.url("/v1/models"), timeout=5)[0] == 200
            ):
                return
            time.sleep(0.5)
        raise RuntimeError(
            f"server={s.name} ({self.role}) not healthy after {timeout:.0f} s "
            f"(server.startup_timeout_s); its log: {self.log_path}\n"
            f"{tail(self.log_path)}"
        )

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=float(self.cfg.server.stop_timeout_s))
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
            except ProcessLookupError:
                pass
        try:  # workers the server left in its group
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.log.close()
        self.proc = None

    def __exit__(self, *exc) -> None:
        self.stop()


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
