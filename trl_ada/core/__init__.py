"""The sampling core: the engine (successive elimination in rounds or streaming, exit rules, round sizing,
downsampling) and the rules and estimators around it (advantages, pass-rate memory, budget allocation, prompt
selection, the side stream of prompts, step metrics).

Pure: it imports neither TRL nor transformers, and the engine not even torch; the estimators are tensor functions.
It receives plain values and callables and returns results, so it runs in the trainer, the simulator and the
benchmarks alike. It imports nothing from the adapter, the tools or the toy tasks (docs/architecture.md; the
contract is in pyproject.toml's `[tool.importlinter]`).
"""
