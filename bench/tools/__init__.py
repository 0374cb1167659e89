"""Tools beside the run, each a command of its own (they measure engines, not methods):

    python -m bench.tools.engine_check    # engines side by side: tok/s, roofline, c(q), TPOT split
    python -m bench.tools.kernel_check    # a layer's products and the output layer, cold and warm
    python -m bench.tools.profile_step    # one decoding step (or a verify forward), op by op
    python -m bench.tools.gpu_check       # every method on CUDA, on models built in-process

`llamacpp_peer` is llama.cpp's worker that engine_check interleaves with our engines.
"""
