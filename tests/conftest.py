"""Under pytest-xdist each worker uses one torch thread, and so does every process a test starts: two
workers with two threads each on a 2-core machine oversubscribe it, and OpenMP's spinning then slows
every test several-fold (a two-thread TRL run beside a one-thread lesson took 5x and 8x their time).
Tests never touch the network: Hugging Face libraries are told to stay offline.

A test run leaves nothing in the system's temporary directory: the controlling process points
TMPDIR (and so pytest's tmp_path, and whatever TRL, transformers or torch write there) at one
folder of its own, which the workers inherit, and removes that folder when the run ends."""
import os
import shutil
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import torch  # noqa: E402

if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)
    os.environ["OMP_NUM_THREADS"] = "1"  # and one thread in every process a test starts (a TRL run, a kernel)


def pytest_collection_modifyitems(items):
    """Tests marked `minutes` first: the two workers start on the longest and finish together
    (a long test collected last would run alone while the other worker idles)."""
    items.sort(key=lambda item: item.get_closest_marker("minutes") is None)


def pytest_configure(config):
    if os.environ.get("PYTEST_XDIST_WORKER") or hasattr(config, "minirl_tmp"):
        return
    config.minirl_tmp, config.minirl_old_tmpdir = tempfile.mkdtemp(prefix="minirl-tests-"), os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = config.minirl_tmp
    tempfile.tempdir = None  # forget the cached default, so gettempdir() reads TMPDIR again
    if config.option.basetemp is None:
        config.option.basetemp = os.path.join(config.minirl_tmp, "pytest")


def pytest_unconfigure(config):
    if hasattr(config, "minirl_tmp"):
        shutil.rmtree(config.minirl_tmp, ignore_errors=True)
        if config.minirl_old_tmpdir is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = config.minirl_old_tmpdir
        tempfile.tempdir = None
