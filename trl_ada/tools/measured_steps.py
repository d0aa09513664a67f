"""Steps to 90% of GRPO's skill gain, measured on the toy columns task: what
`trl-ada simulate --model-shape` multiplies by a configuration's projected step-time ratio to give its GPU time to the
same skill.

Written by `python benchmarks/skill_report.py --write-docs` from benchmarks/results/columns/skill_verdicts.json: the
configuration's optimizer steps to 90% of GRPO's whole-run skill gain over GRPO's own, pooled over the warm models on
the log scale, with its 95% interval (`benchmarks/gpu_time.py pooled_ratio`). tests/test_docs.py checks it against
the JSON; not edited by hand.
"""

# (configuration, GRPO it was measured against) -> (steps ratio, 95% interval low, high, task, warm models)
STEPS_TO_90: dict[tuple[str, str], tuple[float, float, float, str, tuple]] = {
    ("dapo-4", "grpo-4"): (0.6175, 0.5456, 0.7063, "columns-epochs", (0,)),
    ("est-8", "grpo-4"): (0.665, 0.3695, 1.1969, "columns-epochs", (0, 1)),
    ("est-8", "grpo-8"): (1.0243, 0.4277, 2.4534, "columns-epochs", (0, 1)),
    ("est-8-invp", "grpo-4"): (0.7213, 0.6608, 0.8196, "columns-epochs", (0,)),
    ("est-8-noweight", "grpo-4"): (0.677, 0.6276, 0.7705, "columns-epochs", (0,)),
    ("grpo-11", "grpo-4"): (0.6029, 0.4783, 0.7064, "columns", (2,)),
    ("grpo-16", "grpo-4"): (0.6045, 0.5184, 0.7049, "columns", (0, 1, 2)),
    ("grpo-20", "grpo-4"): (0.5293, 0.4355, 0.6384, "columns", (2,)),
    ("grpo-26", "grpo-4"): (0.5336, 0.4265, 0.6677, "columns", (0, 1, 2)),
    ("grpo-4-pilot", "grpo-4"): (1.1463, 1.0313, 1.3619, "columns-epochs", (0,)),
    ("grpo-4-select", "grpo-4"): (1.0427, 0.9425, 1.3018, "columns-epochs", (0,)),
    ("grpo-8", "grpo-4"): (0.6712, 0.4037, 1.1161, "columns-epochs", (0, 1)),
    ("memory-2", "grpo-2-wide"): (0.8205, 0.1721, 3.911, "columns-epochs", (1, 2)),
    ("memory-2", "grpo-4"): (0.8409, 0.7233, 0.9775, "columns-epochs", (0, 1, 2)),
    ("seq-balanced-8x4", "grpo-16"): (0.9506, 0.8175, 1.1054, "columns", (0, 1, 2)),
    ("seq-balanced-8x4", "grpo-20"): (1.0563, 0.981, 1.1553, "columns", (2,)),
    ("seq-balanced-8x4", "grpo-4"): (0.621, 0.5488, 0.7027, "columns", (0, 1, 2)),
    ("seq-balanced-8x4-weight", "grpo-4"): (0.6298, 0.5922, 0.6655, "columns", (0,)),
    ("seq-positive-4x2", "grpo-4"): (0.7806, 0.6834, 0.8916, "columns", (0, 1, 2)),
    ("seq-positive-8x4", "grpo-11"): (1.1176, 1.0055, 1.2872, "columns", (2,)),
    ("seq-positive-8x4", "grpo-16"): (1.0446, 0.9173, 1.1895, "columns", (0, 1, 2)),
    ("seq-positive-8x4", "grpo-4"): (0.6216, 0.4502, 0.8583, "columns", (0, 1, 2)),
    ("seq-positive-8x4-weight", "grpo-4"): (0.6733, 0.6217, 0.7305, "columns", (0,)),
}
