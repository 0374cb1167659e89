"""The run proper, one idea a module:

    config        the run schema (its defaults, once) and the checks on its values
    lifecycle     one lifecycle for every backend: prompts, cell, what to skip or refuse
    cells         a run directory as one cell of a sweep: identity, state, resume
    runner        load, warm up, then per prompt interleave baseline and method
    batched       batch=B: the cell's conversations decoded B at a time
    interference  noticing other work on the machine, and which repeats to believe
    distcheck     check=distribution: the two-sample test of a method's samples
    forced        alpha1_forced: first-token acceptance with every round drafting

It stands on bench.decode and bench.outputs, below the report, the gate and the server backend.
"""
