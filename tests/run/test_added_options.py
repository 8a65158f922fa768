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


def _defaults(cls: type) -> dict[str, object]:
    import inspect

    return {
        k: p.default
        for klass in reversed(cls.__mro__)
        if "__init__" in vars(klass)
        for k, p in inspect.signature(klass.__init__).parameters.items()
        if p.default is not inspect.Parameter.empty
    }


def test_every_added_option_is_an_option_of_every_method_at_that_default() -> None:
    """A ``model.`` option of every method, a ``data.`` option of every data module, each at
    the value a record without it ran at."""
    import inspect

    import noisylabels.data as data
    from noisylabels.data.module import NoisyDataModule
    from noisylabels.methods import registry

    modules = [
        cls
        for cls in vars(data).values()
        if inspect.isclass(cls) and issubclass(cls, NoisyDataModule) and cls is not NoisyDataModule
    ]
    assert len(modules) >= 8
    kinds = {"model.": list(registry().values()), "data.": modules}
    for name, value in ADDED_SINCE.items():
        prefix = name[: name.index(".") + 1]
        assert prefix in kinds, name
        option = name.removeprefix(prefix)
        for cls in kinds[prefix]:
            assert option in _defaults(cls), (cls.__name__, option)
            assert _defaults(cls)[option] == value, (cls.__name__, option)
