"""The run proper: a cell's lifecycle (prompt choice, context fit, resume, target loading),
the in-process runner that interleaves baseline and method per prompt, interference judging,
peak memory, the distribution check, and the run schema with its checks (`config`)."""
