"""Under pytest-xdist each worker uses one torch thread: two workers with two threads each on a
2-core machine oversubscribe it, and OpenMP's spinning then slows every test several-fold.
Tests never touch the network: Hugging Face libraries are told to stay offline."""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import torch  # noqa: E402

if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)
