"""The course's arithmetic reward in verl's reward-function signature, the function itself unchanged.

verl calls `compute_score(data_source, solution_str, ground_truth, extra_info)` once per completion,
with the decoded reply (special tokens skipped) as `solution_str`. The course's reward needs the
course's line too (it checks the whole sum), so `scale_out/verl_data.py` stores it in `extra_info`;
the reply is read as a chat model's (`arithmetic_task.score`: one space, then the reply stripped).
Point verl at it with reward.custom_reward_function.path=scale_out/verl_reward.py (scale_out/verl_grpo.sh).
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import arithmetic_task as task  # noqa: E402


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> float:
    return task.score([extra_info["prompt"]], [solution_str], chat=True)[0]
