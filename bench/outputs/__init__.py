"""What a run writes and prints: `records` (records.jsonl, env.json), `metrics` (each summary
column registered once), `acceptance` (τ, α and the predicted speedup), `verdict` (losslessness),
`answers` (Spec-Bench answer files), `table` (the summary table)."""
