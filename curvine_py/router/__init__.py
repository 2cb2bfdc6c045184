"""`curvine-py router`: an OpenAI-compatible HTTP proxy in front of N vLLM replicas that sends each
request to the replica most likely to hit its prefix (round-robin, prefix-aware or KV-aware).

One job per module: `wire` (vLLM KV event wire format), `blockhash` (vLLM and LMCache hashes of a
prompt), `prompt` (request bodies -> token ids), `index` (block hash -> replicas and tiers),
`subscriber` (ZMQ SUB + replay per replica), `replicas` (the replica set, load, DNS discovery),
`policies` (the three policies), `l2` (the curvine-py L2 as the STORAGE tier), `metrics`,
`proxy` (the aiohttp app) and `main` (flags). See docs/routing.md.
"""
