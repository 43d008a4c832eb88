"""Under pytest-xdist each worker uses one torch thread: two workers with two threads each on a
2-core machine oversubscribe it, and OpenMP's spinning then slows every test several-fold."""
import os

import torch

if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)
