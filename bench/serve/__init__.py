"""`backend=server`: benchmark any OpenAI-compatible server (vLLM, SGLang, llama.cpp, ...).

    python -m bench backend=server server=vllm method=ngram concurrency=1,4 -m

One run is one cell (server × method × concurrency or request rate). For each repeat the plain
server and the speculative one are started in turn from `server.cmd` (+ the method's
`server.speculative` arguments), health-checked, sent the same prompts, scraped, and stopped:
never side by side. Files, one idea each:

    server.py   the server's lifecycle: command from the config, start, health, stop, log
    client.py   one streaming request (/v1/completions or /v1/chat/completions): TTFT, ITLs
    load.py     the load: conversations at a concurrency or a request rate, bounded in count
                and time; connection errors, timeouts and HTTP errors counted, never dropped
    scrape.py   Prometheus /metrics: speculative counters before and after a pass, differenced
    cell.py     one cell end to end: passes → records.jsonl, passes.jsonl, summary.csv
    summary.py  the cell's summary rows: per-request percentiles, throughput, τ and α
"""
