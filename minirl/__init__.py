"""minirl: a small from-scratch engine for learning reinforcement learning for language models.

    import minirl
    enc = minirl.load_tokenizer()          # tiktoken.Encoding from the course's own BPE ranks
    model = minirl.load_model("base")      # the tiny GPT pretrained on the tiny world
    out = minirl.sample(model, ["q: 17+25= a:"], max_new_tokens=6, group_size=8)
    out.texts, out.logprobs, out.mask      # completions and their RL tensors
    minirl.sequence_logprobs(model, [("q: 17+25= a:", " 42")])   # log pi(" 42" + EOS | prompt), (1,)

Every trainer takes a config dataclass (GRPOConfig, PPOConfig, DPOConfig, ...) whose help lists
what each option means; an option it does not have is refused with the nearest name it does have.
Trainers and configs: `from minirl.train import GRPOConfig, train_grpo`.

The package in layers; a module imports only from its own layer and the layers before it in this
list (tests/test_layout.py checks it):

  core        the floor: argument checks, data paths, progress bars, tensor functions (no model, no world)
                validate, paths, figures, notebook, claims, tables, ops, kl, advantages, corrections, losses,
                preferences, compare
  lm          the language model
                tokenizer, model, sampling, multiturn, sequences, critic, reward_head, process_head, export, memory
  world       the tiny world
                grammar, rewards, datasets, generate, tasks, evaluate, tools, steps
  exact       the micro world, solved exactly
                micro, mdp, imitation, irl, micro_dpo, micro_gail, group_updates, entropy,
                reward_design, distillation, micro_env, process, expert_iteration
  train       the trainers and lessons 09 and 10's measurements
                training, pg, ppo, grpo, sft, reward_model, dpo, best_of_n, raft, expert_iteration,
                prm, process_rewards, gail, rlhf, overoptimization; commands pretrain, reward_models, sft_model, tool_model, steps_model,
                process_models
  course      exercise checkers, the write-the-loop checker (course.training_loop), their verdicts, predictions, a lesson's size,
              where a lesson finds its recorded sweeps (course.sweeps);
              the instructor's commands (course.commands, course.grading, course.site, course.capstone) and written answers (course.written)

Homework's names stay where they have always been: minirl.ops, minirl.kl, minirl.advantages,
minirl.losses and minirl.check are the modules above (core's four, course's check), and
tests/test_public_surface.py freezes the public names and signatures.

Commands: python -m minirl.course (open, hand out, grade), python -m minirl.world (the world's
files), python -m minirl.train.pretrain, python -m minirl.train.reward_models, python -m
minirl.train.sft_model, python -m minirl.train.tool_model, python -m minirl.train.steps_model,
python -m minirl.train.process_models (the shipped checkpoints), python -m minirl.course.site (the static site).
"""
import sys

from . import core, course, exact, lm, train, world
from .core import advantages, kl, losses, ops
from .core.claims import claim
from .core.tables import table
from .core.notebook import setup
from .core.paths import DataError
from .course import check
from .lm.model import GPT, GPTConfig, KVCache, load_model
from .lm.sampling import Rollout, completion_logprobs, sample, sample_tokens
from .lm.sequences import sequence_logprobs
from .lm.tokenizer import load_tokenizer

for _module in (advantages, kl, losses, ops, check):  # `import minirl.ops` and `from minirl.ops import ...` work
    sys.modules[f"{__name__}.{_module.__name__.rsplit('.', 1)[1]}"] = _module
del _module

__all__ = [
    "GPT", "GPTConfig", "KVCache", "Rollout", "DataError", "claim", "completion_logprobs", "load_model", "load_tokenizer",
    "sample", "sample_tokens", "sequence_logprobs", "setup", "table",
    "core", "lm", "world", "exact", "train", "course",
    "advantages", "check", "kl", "losses", "ops",
]
