"""llama.cpp as a measured peer: greedy decoding of a GGUF file through llama-cpp-python, timed
in a worker process of its own virtualenv (`make install-llamacpp`), prompt by prompt, so that
`bench.tools.engine_check` can interleave it with our engines on the same token ids.

    python bench/tools/llamacpp_peer.py GGUF [--threads N]  # the worker, in its venv: JSON

Protocol, one JSON object per line: the client sends {"ids": [...], "n": 64}; the worker decodes
exactly n tokens greedily after the prompt (end-of-sequence ignored, as our AR side does),
starting from an empty cache, and answers {"out": [...], "prefill_s": t_p, "decode_s": t_d}:
t_p the prompt's forward (it yields the first token), t_d the n − 1 one-token forwards after it.
{"curve": [1, 2, ...], "context": 128, "repeats": 3} → {"seconds": {q: median}}: llama.cpp's own
verify cost c(q), one forward over q new tokens with logits for every row after `context` cached
tokens, the cache rewound to `context` before each (a warm-up first, as engines.probe times
ours). The worker imports llama_cpp and numpy only, never this project: its venv has no torch.
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
        self.errors = tempfile.TemporaryFile(mode="w+")  # the worker's stderr, read if it dies
        self.proc = subprocess.Popen(
            [str(python), __file__, str(gguf), "--threads", str(threads)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.errors,
            text=True,
        )
        self.version = self._ask({"version": True})["version"]

    def _ask(self, msg: dict) -> dict:
        try:
            self.proc.stdin.write(json.dumps(msg) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except (BrokenPipeError, OSError):
            line = ""
        if not line:
            raise RuntimeError(self.death())
        return json.loads(line)

    def death(self) -> str:
        """One line: how the worker ended (its exit status or signal) and its own last error."""
        import signal

        rc = self.proc.wait(timeout=30)
        how = f"signal {-rc} ({signal.Signals(-rc).name})" if rc < 0 else f"exit status {rc}"
        self.errors.seek(0)
        lines = [x.strip() for x in self.errors.read().splitlines() if x.strip()]
        last = lines[-1][:300] if lines else "nothing on its stderr"
        return f"the llama.cpp worker ({self.gguf.name}) died, {how}: {last}"

    def decode(self, ids: list[int], n: int) -> tuple[list[int], float, float]:
        r = self._ask({"ids": list(map(int, ids)), "n": int(n)})
        return r["out"], r["prefill_s"], r["decode_s"]

    def curve(self, sizes, context: int = 128, repeats: int = 3) -> dict:
        """{q: median seconds of llama.cpp's forward over q tokens after `context` cached}."""
        r = self._ask({"curve": list(map(int, sizes)), "context": context, "repeats": repeats})
        return {int(q): t for q, t in r["seconds"].items()}

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

    def rewind(n: int) -> None:  # drop the cache's positions from n on (the API's name varies)
        if hasattr(llama_cpp, "llama_memory_seq_rm"):
            llama_cpp.llama_memory_seq_rm(llama_cpp.llama_get_memory(llm.ctx), 0, n, -1)
        elif hasattr(llama_cpp, "llama_kv_self_seq_rm"):
            llama_cpp.llama_kv_self_seq_rm(llm.ctx, 0, n, -1)
        else:
            llama_cpp.llama_kv_cache_seq_rm(llm.ctx, 0, n, -1)

    def forward(tokens: list[int], start: int) -> float:  # every row's logits; seconds
        batch = llama_cpp.llama_batch_init(len(tokens), 0, 1)
        try:
            for i, t in enumerate(tokens):
                batch.token[i], batch.pos[i], batch.n_seq_id[i] = t, start + i, 1
                batch.seq_id[i][0], batch.logits[i] = 0, 1
            batch.n_tokens = len(tokens)
            t0 = time.perf_counter()
            rc = llama_cpp.llama_decode(llm.ctx, batch)
            dt = time.perf_counter() - t0
            if rc != 0:
                raise RuntimeError(f"llama_decode returned {rc}")
            return dt
        finally:
            llama_cpp.llama_batch_free(batch)

    def curve(sizes: list[int], context: int, repeats: int) -> dict:
        llm.reset()
        rewind(0)
        forward([(i * 7919) % vocab for i in range(context)], 0)
        out = {}
        for q in sizes:
            new, times = [(i * 31) % vocab for i in range(q)], []
            for r in range(repeats + 1):
                rewind(context)
                dt = forward(new, context)
                if r:  # the first repeat warms up
                    times.append(dt)
            out[q] = sorted(times)[len(times) // 2]
        rewind(0)
        llm.reset()
        return out

    for line in sys.stdin:
        msg = json.loads(line)
        if msg.get("version"):
            print(json.dumps({"version": llama_cpp.__version__}), flush=True)
            continue
        if "curve" in msg:
            got = curve(msg["curve"], msg.get("context", 128), msg.get("repeats", 3))
            print(json.dumps({"seconds": got}), flush=True)
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
