"""The decode loops: `loop` owns prefill → rounds → stop (one clock, one loop for every method),
`wholeturn` the same for transformers' generate(), `turn` what one turn produced and what the
warm-up turns say k=auto's costs are, `batch` several conversations decoded together (B slots,
one target forward a round)."""
