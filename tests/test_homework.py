"""What a homework author meets first: `help(minirl)` names every module; `import minirl` loads
what homework uses and none of the instructor tooling; every config documents each option in its
help and refuses an unknown one with the nearest name; `minirl.sequence_logprobs` scores text pairs
(checked against a plain loop over log_softmax); a response without its leading space warns, the
course's own data never does; every module says what it exports."""
import dataclasses
import importlib
import inspect
import pathlib
import pydoc
import re
import subprocess
import sys
import warnings

import pytest
import torch

import minirl
from minirl.lm import reward_head, sequences
from minirl.lm.model import GPTConfig
from minirl.lm.sequences import check_leading_space
from minirl.train import dpo, gail, reward_model, sft
from minirl.train.dpo import DPOConfig
from minirl.train.expert_iteration import ExpertIterationConfig
from minirl.train.gail import GAILConfig
from minirl.train.grpo import GRPOConfig
from minirl.train.pg import PGConfig
from minirl.train.ppo import PPOConfig
from minirl.train.prm import PRMConfig
from minirl.train.raft import RAFTConfig
from minirl.train.reward_model import RMConfig
from minirl.train.sft import SFTConfig
from minirl.world import datasets

PACKAGE = pathlib.Path(minirl.__file__).parent
MODULES = sorted(f"{p.parent.name}.{p.stem}" for p in PACKAGE.glob("*/*.py") if p.stem not in ("__init__", "__main__"))
COMMANDS = ("train.pretrain", "train.reward_models", "train.sft_model", "train.tool_model", "train.steps_model",
            "train.process_models", "course.commands", "course.site", "course.written", "course.capstone", "course.grading")  # not loaded by `import minirl`
CONFIGS = (GRPOConfig, PPOConfig, PGConfig, DPOConfig, RMConfig, SFTConfig, RAFTConfig, GAILConfig, GPTConfig, PRMConfig,
           ExpertIterationConfig)


# ---------------------------------------------------------------- the package's help
@pytest.mark.parametrize("name", MODULES)
def test_every_module_is_listed_in_the_package_docstring(name):
    layer, module = name.split(".")
    assert re.search(rf"\b{module}\b", minirl.__doc__), f"minirl's docstring does not list {name}"
    layer_doc = importlib.import_module(f"minirl.{layer}").__doc__
    assert re.search(rf"^ +{module} {{2,}}\S", layer_doc, re.M), f"minirl.{layer}'s docstring does not describe {module}"


def test_import_minirl_loads_the_homework_modules_and_no_instructor_tooling():
    code = "import sys, minirl; print(' '.join(sorted(sys.modules)))"
    loaded = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split())
    homework = {f"minirl.{m}" for m in MODULES if m not in COMMANDS}
    assert homework <= loaded, f"not loaded: {sorted(homework - loaded)}"
    assert not loaded & ({f"minirl.{m}" for m in COMMANDS} | {"nbformat", "nbclient", "nbconvert", "transformers"})
    assert {"core", "lm", "world", "exact", "train", "course"} <= set(minirl.__all__)


# ---------------------------------------------------------------- configs: documented options
def test_the_config_list_is_every_config_class_in_the_package():
    found = set()
    for name in MODULES:
        module = importlib.import_module(f"minirl.{name}")
        found |= {obj for _, obj in inspect.getmembers(module, dataclasses.is_dataclass)
                  if inspect.isclass(obj) and obj.__name__.endswith("Config") and obj.__module__ == module.__name__}
    assert found == set(CONFIGS)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.__name__)
def test_help_explains_every_option(config):
    shown = pydoc.render_doc(config, renderer=pydoc.plaintext)
    for field in dataclasses.fields(config):
        # a line of the class docstring that starts with the option's name and goes on to say what it is
        assert re.search(rf"^ *{field.name} {{2,}}\S", config.__doc__, re.M), f"{config.__name__}.{field.name}"
        assert re.search(rf"^ *\| *{field.name} {{2,}}\S", shown, re.M)


# ---------------------------------------------------------------- configs: unknown options
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.__name__)
def test_a_misspelt_option_is_refused_with_the_nearest_name(config):
    default = config()
    for field in dataclasses.fields(config):
        typo = field.name[:-1] + field.name[-1].upper() + "x"  # 'seed' -> 'seeDx'
        with pytest.raises(TypeError, match=rf"^{config.__name__} has no option '{typo}'; did you mean '{field.name}'\? "
                                            rf"Its options: {', '.join(f.name for f in dataclasses.fields(config))}$"):
            config(**{typo: getattr(default, field.name)})
        assert config(**{field.name: getattr(default, field.name)}) == default  # the right name still works


def test_trl_names_point_to_ours_where_a_config_has_the_field():
    with pytest.raises(TypeError, match=r"GRPOConfig has no option 'learning_rate'; did you mean 'lr'\? \(TRL's"):
        GRPOConfig(learning_rate=1e-3)
    with pytest.raises(TypeError, match="did you mean 'group_size'"):
        GRPOConfig(num_generations=4)
    with pytest.raises(TypeError, match="did you mean 'clip_eps'"):
        PPOConfig(cliprange=0.1)
    with pytest.raises(TypeError, match="did you mean 'batch_size'"):
        DPOConfig(per_device_train_batch_size=8)
    with pytest.raises(TypeError, match=r"GAILConfig has no option 'learning_rate'\. Its options: disc_lr, "):
        GAILConfig(learning_rate=1e-3)  # no 'lr' here, and nothing spelt like it


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.__name__)
def test_positional_use_and_replace_keep_working(config):
    default = config()
    values = [getattr(default, f.name) for f in dataclasses.fields(config)]
    assert config(*values) == default
    first = dataclasses.fields(config)[0].name
    assert dataclasses.replace(default, **{first: getattr(default, first)}) == default
    with pytest.raises(TypeError, match=f"{config.__name__} has no option 'bogus_option'"):
        dataclasses.replace(default, bogus_option=1)


def test_a_bad_value_is_still_the_config_own_error():
    with pytest.raises(ValueError, match="group_size must be >= 2"):
        GRPOConfig(group_size=1)


# ---------------------------------------------------------------- sequence log-probs of text
def hand_logprobs(model, enc, pairs, average):
    """log pi(response + EOS | prompt), one unpadded pair at a time: log_softmax of the logits at the
    position before each response token, read at that token, summed (or averaged) in a loop."""
    out = []
    for prompt, response in pairs:
        p = enc.encode_ordinary(prompt)
        ids = p + enc.encode_ordinary(response) + [enc.eot_token]
        logp = torch.log_softmax(model(torch.tensor([ids]))[0].double(), dim=-1)  # (T, V)
        terms = [logp[t - 1, ids[t]].item() for t in range(len(p), len(ids))]
        out.append(sum(terms) / (len(terms) if average else 1))
    return out


PAIRS = [("q: 17+25= a:", " 42"), ("order:", " one large matcha latte with oat milk please ."),
         ("plan:", " read swim cook nap ."), ("review: the movie was dull", " but the cast was charming ."),
         ("q: 3+4= a:", " 7")]


@pytest.mark.parametrize("average", [False, True])
def test_sequence_logprobs_match_a_plain_loop(average):
    model, enc = minirl.load_model("base"), minirl.load_tokenizer()
    with torch.no_grad():
        got = minirl.sequence_logprobs(model, PAIRS, average=average)
        want = hand_logprobs(model, enc, PAIRS, average)
    assert got.shape == (len(PAIRS),)
    assert got.tolist() == pytest.approx(want, abs=1e-4)


def test_sequence_logprobs_carry_the_gradient_and_refuse_other_input():
    model = minirl.load_model("base")
    assert minirl.sequence_logprobs(model, PAIRS[:2]).requires_grad
    with pytest.raises(ValueError, match=r"list of \(prompt, response\) string pairs"):
        minirl.sequence_logprobs(model, PAIRS[0])
    with pytest.raises(ValueError, match=r"list of \(prompt, response\) string pairs"):
        minirl.sequence_logprobs(model, [{"prompt": "q: 1+1= a:", "completion": " 2"}])
    with pytest.raises(TypeError, match="model must be a minirl GPT"):
        minirl.sequence_logprobs("base", PAIRS)


# ---------------------------------------------------------------- the leading space
def test_a_response_without_its_leading_space_warns_once_with_the_count_and_the_fix():
    with pytest.warns(UserWarning, match=r"1 of 2 responses do not start with a space \(the first: '42'\).*"
                                         r"Add it: ' ' \+ response") as caught:
        minirl.sequence_logprobs(minirl.load_model("base"), [("q: 17+25= a:", "42"), ("q: 3+4= a:", " 7")])
    assert sum("start with a space" in str(w.message) for w in caught) == 1


def test_the_course_data_never_warns():
    prefs = datasets.load_preferences("train") + datasets.load_preferences("test")
    arithmetic = [(r["prompt"], f" {r['answer']}") for r in datasets.load_prompts("arithmetic", "test")]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_leading_space([r[side] for r in prefs for side in ("chosen", "rejected")])
        check_leading_space([r["completion"] for r in datasets.load_demos()])
        check_leading_space([r["completion"] for s in ("train", "test") for r in datasets.load_order_scores(s)])
        check_leading_space([r for _, r in arithmetic] + [r for _, r in PAIRS] + [""])  # an empty response is no error
        with torch.no_grad():
            minirl.sequence_logprobs(minirl.load_model("base"), arithmetic[:8] + PAIRS)


BARE = [{"prompt": "order:", "chosen": "one coffee .", "rejected": " one tea ."}]  # the chosen side lacks its space


def trains(call, name):
    """An entry point that goes on to train (one step) once it has warned."""
    return pytest.param(call, id=name, marks=pytest.mark.slow)


@pytest.mark.parametrize("call", [
    pytest.param(lambda: sft.heldout_loss(minirl.load_model("base"), [{"prompt": "q: 1+1= a:", "completion": "2"}]),
                 id="heldout_loss"),
    pytest.param(lambda: reward_model.pair_metrics(reward_head.load_reward_model("rm_100"), BARE), id="pair_metrics"),
    pytest.param(lambda: gail.Discriminator([{"prompt": "plan:", "completion": "read run swim nap ."}],
                                            GAILConfig(discriminator="gail"), base=minirl.load_model("base")),
                 id="gail.Discriminator"),
    trains(lambda: sft.train_sft(minirl.load_model("base"), [{"prompt": "q: 1+1= a:", "completion": "2"}],
                                 SFTConfig(steps=1)), "train_sft"),
    trains(lambda: reward_model.train_reward_model(BARE, RMConfig(steps=1, batch_size=1)), "train_reward_model"),
    trains(lambda: reward_model.train_on_scores([{"prompt": "order:", "completion": "one tea .", "score": 1.0}],
                                                RMConfig(steps=1, batch_size=1)), "train_on_scores"),
    trains(lambda: dpo.train_dpo(minirl.load_model("sft"), BARE, DPOConfig(steps=1, batch_size=1, eval_samples=2)),
           "train_dpo"),
])
def test_every_entry_point_that_takes_text_pairs_warns(call):
    with pytest.warns(UserWarning, match="do not start with a space"):
        call()


# ---------------------------------------------------------------- __all__
@pytest.mark.parametrize("name", MODULES)
def test_every_module_declares_its_public_names_and_each_exists(name):
    module = importlib.import_module(f"minirl.{name}")
    assert isinstance(getattr(module, "__all__", None), list), f"minirl.{name} has no __all__"
    assert len(set(module.__all__)) == len(module.__all__)
    missing = [n for n in module.__all__ if not hasattr(module, n)]
    assert not missing, f"minirl.{name}.__all__ names what it does not define: {missing}"


def test_the_package_all_exists():
    assert [n for n in minirl.__all__ if not hasattr(minirl, n)] == []
    assert minirl.sequence_logprobs is sequences.sequence_logprobs
