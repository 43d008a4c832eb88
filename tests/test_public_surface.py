"""The public surface homework relies on, frozen: every name of `minirl`, `minirl.ops`, `.kl`,
`.advantages`, `.losses`, `.check` and `minirl.train` (the trainers and their configs), with its
signature (a config: its fields, types and defaults). A name removed or a signature changed fails
here, naming what homework would lose; a name added passes.

After a deliberate change, record the new surface with `python tests/test_public_surface.py --write`
and say in the commit what homework must change.
"""
import dataclasses
import inspect
import json
import sys
from pathlib import Path

import pytest

import minirl

FROZEN = Path(__file__).with_name("public_surface.json")
MODULES = ["minirl", "minirl.ops", "minirl.kl", "minirl.advantages", "minirl.losses", "minirl.check", "minirl.train"]


def describe(obj) -> str:
    """What homework can rely on about one public object."""
    if inspect.ismodule(obj):
        return "module"
    if dataclasses.is_dataclass(obj) and inspect.isclass(obj):
        return "dataclass(" + ", ".join(f"{f.name}: {f.type}" + ("" if f.default is dataclasses.MISSING else
                                                                f" = {f.default!r}") for f in dataclasses.fields(obj)) + ")"
    if callable(obj):
        try:
            return f"{'class' if inspect.isclass(obj) else 'function'}{inspect.signature(obj)}"
        except (TypeError, ValueError):
            return type(obj).__name__
    return type(obj).__name__  # a constant: its type (a checker's cases may grow)


def surface() -> dict[str, str]:
    out = {}
    for name in MODULES:
        module = sys.modules[name] if name in sys.modules else __import__(name, fromlist=["_"])
        for attr in module.__all__:
            out[f"{name}.{attr}"] = describe(getattr(module, attr))
    return out


def test_the_homework_modules_import_by_their_old_names():
    import minirl.advantages
    import minirl.check
    import minirl.kl
    import minirl.losses
    import minirl.ops
    from minirl.ops import masked_mean
    assert minirl.ops.masked_mean is masked_mean and minirl.check.pass_at_k is minirl.course.check.pass_at_k
    assert minirl.losses is minirl.core.losses and minirl.kl is minirl.core.kl and minirl.advantages is minirl.core.advantages


def test_nothing_homework_uses_was_removed_or_changed():
    frozen, now = json.loads(FROZEN.read_text()), surface()
    removed = sorted(set(frozen) - set(now))
    changed = sorted(k for k in set(frozen) & set(now) if frozen[k] != now[k])
    lines = [f"removed: {k} (was {frozen[k]})" for k in removed]
    lines += [f"changed: {k}\n  was {frozen[k]}\n  now {now[k]}" for k in changed]
    assert not lines, ("this change would break homework that uses minirl's public names:\n" + "\n".join(lines) +
                       "\nIf it is deliberate, record it: python tests/test_public_surface.py --write")


def test_the_freeze_catches_a_renamed_argument(monkeypatch):
    """A planted change (masked_mean's `dim` renamed `axis`) is reported as a change."""
    def masked_mean(x, mask, axis=None):
        return x
    monkeypatch.setattr(minirl.core.ops, "masked_mean", masked_mean)
    with pytest.raises(AssertionError, match=r"changed: minirl.ops.masked_mean"):
        test_nothing_homework_uses_was_removed_or_changed()


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    FROZEN.write_text(json.dumps(surface(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {FROZEN} ({len(surface())} names)")
