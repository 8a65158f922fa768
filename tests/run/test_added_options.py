"""An option added after runs were recorded: a record without it ran at the value it had before
(``identity.ADDED_SINCE``), so a resume of such a record at that value is the same run, and at
another value is another."""

from __future__ import annotations

from noisylabels.run.identity import ADDED_SINCE, differences


def test_a_record_without_an_added_option_ran_at_its_old_value() -> None:
    saved = {"model.alpha": 0.1, "model.class": "noisylabels.methods.CE"}
    for name, value in ADDED_SINCE.items():
        assert differences(saved, {**saved, name: value}) == {}
        assert differences({**saved, name: value}, saved) == {}
    assert differences(saved, {**saved, "model.vrnl_form": "bounded"}) == {
        "model.vrnl_form": ["paper", "bounded"]
    }


def test_every_added_option_is_an_option_of_every_method_at_that_default() -> None:
    import inspect

    from noisylabels.methods import registry

    for name, value in ADDED_SINCE.items():
        option = name.removeprefix("model.")
        for cls in registry().values():
            defaults = {
                k: p.default
                for klass in cls.__mro__
                if "__init__" in vars(klass)
                for k, p in inspect.signature(klass.__init__).parameters.items()
            }
            assert defaults.get(option) == value, (cls.__name__, option)
