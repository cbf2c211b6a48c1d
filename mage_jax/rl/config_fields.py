"""The RL section's numeric fields and their ranges, checked at set-up by train/run_setup.py's
check_config (launch.rl and the curriculum's RL stages pass them; the SFT set-up knows nothing of RL)."""
from __future__ import annotations

from mage_jax.train.run_setup import COUNT, FRACTION, NON_NEGATIVE, NON_NEGATIVE_INT, POSITIVE, FINITE, Rule

# The entropy term's coefficient: either sign, at most 1 in size (the policy-gradient term's
# per-token scale is |A| ~ 1; a larger c makes the update an entropy update with a reward term).
ENTROPY_COEFF: Rule = ("a number in [-1, 1]", lambda v: FINITE[1](v) and -1 <= v <= 1)

# An unparsable call's advantage cap (rl/loop.py samples_with_advantages): <= 0, at most an
# episode advantage's usual size.
PARSE_ERROR_ADVANTAGE: Rule = ("a number in [-1, 0]", lambda v: FINITE[1](v) and -1 <= v <= 0)

RL_FIELDS: dict[str, Rule] = {
    "rl.num_tasks": COUNT, "rl.total_updates": COUNT, "rl.groups_per_update": COUNT,
    "rl.episodes_per_group": COUNT, "rl.max_policy_lag": NON_NEGATIVE_INT,
    "rl.admission_window": COUNT, "rl.tis_cap": POSITIVE, "rl.clip_eps_low": NON_NEGATIVE,
    "rl.clip_eps_high": NON_NEGATIVE, "rl.adv_eps": NON_NEGATIVE, "rl.sampler_floor": NON_NEGATIVE,
    "rl.sampler_prior_attempts": NON_NEGATIVE, "rl.max_episode_steps": COUNT,
    "rl.inference_gpus": NON_NEGATIVE_INT, "rl.env_slots": COUNT, "rl.rollout_workers": COUNT,
    "rl.max_tokens": COUNT, "rl.temperature": POSITIVE, "rl.top_p": FRACTION,
    "rl.request_timeout_s": POSITIVE, "rl.server_ready_timeout_s": POSITIVE,
    "rl.group_timeout_s": POSITIVE, "rl.sync_tolerance": POSITIVE, "rl.keep_exports": COUNT,
    "rl.group_redundancy": NON_NEGATIVE_INT, "rl.episode_deadline_s": NON_NEGATIVE,
    "rl.engine_port": NON_NEGATIVE_INT, "rl.max_micro_batches": COUNT,
    "rl.epochs_per_update": COUNT, "rl.negative_advantage_weight": FRACTION,
    "rl.positive_advantage_weight": FRACTION, "rl.entropy_coeff": ENTROPY_COEFF,
    "rl.parse_error_advantage": PARSE_ERROR_ADVANTAGE, "rl.entropy_gate_nats": NON_NEGATIVE,
}
