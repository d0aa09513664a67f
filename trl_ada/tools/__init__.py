"""The tools on top: the `trl-ada` command and its subcommands (train, recipes, prepare, eval, simulate, demo), data
preparation and evaluation, the budget simulator, the demo and its held-out measures, the GPU checks and the
reproducibility pins.

They may import the adapter, the core and the toy tasks; nothing below imports them (docs/architecture.md).
"""
