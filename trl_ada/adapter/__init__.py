"""The TRL adapter: `ReinforceAdaTrainer(GRPOTrainer)` and `ReinforceAdaConfig(GRPOConfig)`, every TRL-private name
trl-ada touches (`compat`), the one interface a generation batch's sampling code gets (`step_io.StepIO`), the
generation backends, checkpoints, input checks, and the rollout worker for TRL's asynchronous trainer.

It drives the core and may import it, TRL, transformers and accelerate; it imports nothing from the tools or the toy
tasks (docs/architecture.md).
"""
