"""How a generation batch is sampled: `rounds.sample_in_rounds` (GRPOTrainer's own `_generate`, once per round) and
`streaming.sample_streaming` (one streaming engine of `trl_ada.adapter.engines` per batch)."""
