"""Check scale_out/verl_grpo.sh's settings with verl's own checks, on any machine: no GPU, no Ray cluster,
no model download. Run it before a job waits in a cluster's queue.

    python scale_out/verl_check.py                                  # the script's settings
    python scale_out/verl_check.py trainer.n_gpus_per_node=4        # with the overrides you would add to it

Hydra composes verl's `ppo_trainer` config, from the verl that is installed, with the script's overrides
and yours, as `python -m verl.trainer.main_ppo` does (a key verl does not have is refused here). Then
verl's `validate_config` runs, the check `main_ppo` makes before it starts Ray (batch sizes against the
GPUs, micro-batches, the loss aggregation, validation sampling), and the actor, rollout and algorithm
sections are built into verl's config classes, whose own checks run as they are built. What neither
checks: the model's own config (verl downloads it when training starts) and values read only while
training (a misspelled `kl_loss_type` fails at the first update).

It needs verl importable, not runnable: `pip install --no-deps verl==0.9.1` and the few packages its
config modules import (ray, tensordict, codetiming, orjson, pillow, datasets; the course's `make install`
puts them in its environment). The environment that trains is in scale_out/README.md.
"""
import shlex
import sys
import warnings
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent / "verl_grpo.sh"


def overrides(script: Path = SCRIPT) -> list[str]:
    """The key=value overrides of the script's `python -m verl.trainer.main_ppo` command, in order."""
    text = script.read_text()
    command = text[text.index("python -m verl.trainer.main_ppo"):].split('"$@"')[0].replace("\\\n", " ")
    return [t for t in shlex.split(command)[3:] if "=" in t]


def compose(extra: list[str] = (), script: Path = SCRIPT):
    """verl's ppo_trainer config with the script's overrides and `extra`, composed by Hydra as main_ppo does."""
    import verl
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    config_dir = Path(verl.__file__).parent / "trainer" / "config"
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        return hydra_compose("ppo_trainer", overrides=overrides(script) + list(extra))


def validate(config) -> None:
    """verl's own checks on a composed config; raises what verl raises."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
        for section in (config.actor_rollout_ref.actor, config.actor_rollout_ref.rollout, config.algorithm):
            omega_conf_to_dataclass(section)


def main(argv: list[str]) -> None:
    import verl
    config = compose(argv)
    validate(config)
    actor, rollout, trainer = config.actor_rollout_ref.actor, config.actor_rollout_ref.rollout, config.trainer
    print(f"verl {verl.__version__} accepts {SCRIPT.name} with {len(overrides()) + len(argv)} overrides: "
          f"{trainer.nnodes} x {trainer.n_gpus_per_node} GPUs, {config.data.train_batch_size} prompts x {rollout.n} "
          f"per step, loss {actor.loss_agg_mode}, KL {actor.kl_loss_type} x {actor.kl_loss_coef}, validation every "
          f"{trainer.test_freq} steps, a checkpoint every {trainer.save_freq} in {trainer.default_local_dir}")


if __name__ == "__main__":
    main(sys.argv[1:])
