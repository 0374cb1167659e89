"""llama.cpp as a measured peer: greedy decoding of a GGUF file through llama-cpp-python, timed
in a worker process of its own virtualenv (`make install-llamacpp`), prompt by prompt, so that
`bench.engine_check` can interleave it with our engines on the same token ids.

    python bench/llamacpp_peer.py GGUF [--threads N]   # the worker (its venv's python): JSON lines

Protocol, one JSON object per line: the client sends {"ids": [...], "n": 64}; the worker decodes
exactly n tokens greedily after the prompt (end-of-sequence ignored, as our AR side does),
starting from an empty cache, and answers {"out": [...], "prefill_s": t_p, "decode_s": t_d}:
t_p the prompt's forward (it yields the first token), t_d the n − 1 one-token forwards after it.
The worker imports llama_cpp and numpy only, never this project: its venv has no torch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def venv_python() -> Path:
    """The llama.cpp venv's interpreter (make install-llamacpp; SPECSWEEP_VENVS says where)."""
    root = Path(os.environ.get("SPECSWEEP_VENVS", Path.home() / ".cache/specsweep/venvs"))
    return root.expanduser() / "llamacpp" / "bin" / "python"


class Peer:
    """A running worker; `decode(ids, n)` → (output ids, prefill seconds, decode seconds)."""

    def __init__(self, gguf: Path, python: Path | None = None, threads: int | None = None):
        python = python or venv_python()
        if not Path(python).exists():
            raise FileNotFoundError(f"{python} does not exist (make install-llamacpp)")
        threads = threads or len(os.sched_getaffinity(0))
        self.gguf = Path(gguf)
        self.proc = subprocess.Popen(
            [str(python), __file__, str(gguf), "--threads", str(threads)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=tempfile.TemporaryFile(mode="w+"),
            text=True,
        )
        self.version = self._ask({"version": True})["version"]

    def _ask(self, msg: dict) -> dict:
        self.proc.stdin.write(json.dumps(msg) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            self.proc.stderr.seek(0)
            tail = self.proc.stderr.read()[-1500:]
            raise RuntimeError(f"the llama.cpp worker exited ({self.proc.poll()}): {tail}")
        return json.loads(line)

    def decode(self, ids: list[int], n: int) -> tuple[list[int], float, float]:
        r = self._ask({"ids": list(map(int, ids)), "n": int(n)})
        return r["out"], r["prefill_s"], r["decode_s"]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def worker(gguf: str, threads: int) -> None:
    import llama_cpp
    import numpy as np

    llm = llama_cpp.Llama(
        model_path=gguf,
        n_ctx=4096,
        n_batch=512,
        n_threads=threads,
        n_threads_batch=threads,
        logits_all=False,
        verbose=False,
    )
    vocab = llm.n_vocab()

    def last_argmax() -> int:  # the logits of the last token evaluated, as llama.cpp keeps them
        row = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
        return int(np.argmax(np.ctypeslib.as_array(row, shape=(vocab,))))

    for line in sys.stdin:
        msg = json.loads(line)
        if msg.get("version"):
            print(json.dumps({"version": llama_cpp.__version__}), flush=True)
            continue
        ids, n = msg["ids"], msg["n"]
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(ids)
        out = [last_argmax()]
        t1 = time.perf_counter()
        while len(out) < n:
            llm.eval([out[-1]])
            out.append(last_argmax())
        t2 = time.perf_counter()
        print(json.dumps({"out": out, "prefill_s": t1 - t0, "decode_s": t2 - t1}), flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    threads = int(args[args.index("--threads") + 1]) if "--threads" in args else 2
    worker(args[0], threads)
