"""The course's arithmetic reward in verl's reward-function signature, the function itself unchanged.

verl calls `compute_score(data_source, solution_str, ground_truth, extra_info)` once per completion,
with the decoded completion (special tokens skipped) as `solution_str`. The course's reward needs
the prompt too (it checks the whole sum), so `scale_out/verl_data.py` stores it in `extra_info`.
Point verl at it with reward.custom_reward_function.path=scale_out/verl_reward.py (scale_out/verl_grpo.yaml).
"""
from minirl.world.rewards import arithmetic_reward


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> float:
    return arithmetic_reward([extra_info["prompt"]], [solution_str])[0]
