#!/usr/bin/env bash
# verl GRPO on Ray with the course's arithmetic reward: Qwen2.5-0.5B-Instruct on one node of 8 GPUs (verl 0.9.1,
# in an environment of its own: scale_out/README.md gives the install line).
#   python scale_out/verl_data.py runs/verl_data      # the prompts as verl reads them
#   python scale_out/verl_check.py                    # verl's own checks on these settings, no GPU needed
#   bash scale_out/verl_grpo.sh                       # after hf download Qwen/Qwen2.5-0.5B-Instruct
# Each key=value overrides verl's own ppo_trainer config; Hydra refuses a key verl does not have.
# The settings of scale_out/grpo_vllm.yaml, in verl's terms:
# - adv_estimator=grpo: (r - mean) / std within each prompt's group (lesson 06); 16 prompts x 8 completions per
#   step, one update per step (ppo_mini_batch_size = train_batch_size), lr 1e-6, 64-token replies after prompts
#   of at most 207 tokens; vLLM generates, colocated with the FSDP trainer;
# - the loss as TRL's loss_type "grpo" aggregates it: each completion's token mean, then the mean over
#   completions (seq-mean-token-mean; verl's default, token-mean, is TRL's "dapo");
# - the KL to the reference in the loss, 0.04 of k3 per token, with TRL's default gradient: TRL multiplies k3 by
#   the ratio pi/pi_old (use_bias_correction_kl), whose gradient on-policy is (log pi - log pi_ref) grad log pi,
#   k2's; verl's k3+ has k3's value and k2's gradient (its low_var_kl is k3's own gradient, clamped);
# - validation every 25 steps and before training, on the 300 held-out prompts, 8 samples each at temperature 1
#   (the mean score is pass@1, as grpo_trl.py measures it); a checkpoint every 50 steps (the last at step 250), with
#   the model in Hugging Face's format (hf_model) beside verl's shards, under runs/verl/checkpoints;
# - attention through PyTorch's sdpa, without removing padding: verl's default is flash-attention 2, which the
#   install line does not build; with flash-attn installed, drop the last two model overrides for its speed.
set -euo pipefail
python -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    algorithm.norm_adv_by_std_in_grpo=true \
    algorithm.use_kl_in_reward=false \
    data.train_files=runs/verl_data/train.parquet \
    data.val_files=runs/verl_data/test.parquet \
    data.train_batch_size=16 \
    data.max_prompt_length=256 \
    data.max_response_length=64 \
    actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct \
    actor_rollout_ref.model.use_remove_padding=false \
    +actor_rollout_ref.model.override_config.attn_implementation=sdpa \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.actor.ppo_mini_batch_size=16 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16 \
    actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean \
    actor_rollout_ref.actor.use_kl_loss=true \
    actor_rollout_ref.actor.kl_loss_coef=0.04 \
    actor_rollout_ref.actor.kl_loss_type=k3+ \
    'actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]' \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.n=8 \
    actor_rollout_ref.rollout.temperature=1.0 \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.5 \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16 \
    actor_rollout_ref.rollout.val_kwargs.do_sample=true \
    actor_rollout_ref.rollout.val_kwargs.temperature=1.0 \
    actor_rollout_ref.rollout.val_kwargs.top_p=1.0 \
    actor_rollout_ref.rollout.val_kwargs.top_k=-1 \
    actor_rollout_ref.rollout.val_kwargs.n=8 \
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=16 \
    reward.custom_reward_function.path=scale_out/verl_reward.py \
    reward.custom_reward_function.name=compute_score \
    trainer.nnodes=1 \
    trainer.n_gpus_per_node=8 \
    trainer.total_training_steps=250 \
    trainer.val_before_train=true \
    trainer.test_freq=25 \
    trainer.save_freq=50 \
    trainer.default_local_dir=runs/verl/checkpoints \
    'trainer.logger=[console]' \
    trainer.project_name=minirl \
    trainer.experiment_name=arithmetic_grpo \
    "$@"
