"""The ground floor: what every other package of specsweep stands on; it imports none of them.

    errors      UserError, the one-line refusal of a bad value
    paths       the repository root, conf/ (and its groups' options), the local cache
    clock       the one clock (CUDA events on a GPU, perf_counter_ns on a CPU)
    prompting   prompt ids through the chat template, EOS ids, per-unit seeds
    sampling    SamplingParams and the lossless accept rules of a chain
    tree        the tree vocabulary (layouts, masks, the tree accept rule)
    state       DecodeState, what one turn's decode holds
    models      where models come from (the embedded GGUF, Hugging Face ids, directories)
    progress    the one progress bar of every command
    machine     the job's CPUs and their capacity under a cgroup quota
    loops       repetition loops in a turn's token ids (the records' loop flag)
    load        other work on this machine around a span of ours (load average, steal)
    memory      peak-memory probes around one turn
    devices     host → device copies for the decode loop (pinned, non-blocking on CUDA)
    provenance  which code produced a measurement (HEAD and the files that differ)
    stats       the two-sample test of check=distribution, Bonferroni's correction

Floors above, each importing only downward (contracts in pyproject.toml, checked by
import-linter in `make test`): engines and tasks; drafters; methods; bench (the run); and on
top bench.report, bench.gate, bench.serve and train.
"""
