#!/usr/bin/env bash
# verl GRPO on Ray with the course's arithmetic reward: Qwen2.5-0.5B-Instruct on one node of 8 GPUs (verl 0.9.1).
# Each key=value overrides verl's own ppo_trainer config; Hydra refuses a key verl does not have
# (tests/test_scale_out.py composes these overrides against verl's shipped config files).
#   python scale_out/verl_data.py runs/verl_data      # the prompts as verl reads them
#   bash scale_out/verl_grpo.sh                       # after hf download Qwen/Qwen2.5-0.5B-Instruct
# adv_estimator=grpo: (r - mean) / std within each prompt's group (lesson 06); the KL penalty sits in
# the loss as TRL's beta does (0.04 of the k3 estimator, "low_var_kl"); 16 prompts x 8 completions
# per step, lr 1e-6, 64-token replies after prompts of at most 207 tokens (the settings of
# scale_out/grpo_vllm.yaml); vLLM generates, colocated with the FSDP trainer.
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
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.actor.ppo_mini_batch_size=16 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16 \
    actor_rollout_ref.actor.use_kl_loss=true \
    actor_rollout_ref.actor.kl_loss_coef=0.04 \
    actor_rollout_ref.actor.kl_loss_type=low_var_kl \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.n=8 \
    actor_rollout_ref.rollout.temperature=1.0 \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.5 \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16 \
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=16 \
    reward.custom_reward_function.path=scale_out/verl_reward.py \
    reward.custom_reward_function.name=compute_score \
    trainer.nnodes=1 \
    trainer.n_gpus_per_node=8 \
    trainer.total_training_steps=250 \
    'trainer.logger=[console]' \
    trainer.project_name=minirl \
    trainer.experiment_name=arithmetic_grpo \
    "$@"
