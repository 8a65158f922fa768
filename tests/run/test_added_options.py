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


def test_a_null_option_and_the_value_it_resolves_to_are_one_run() -> None:
    """Every option a module resolves from null (``resolved_defaults``): the run given null and
    the run given that value have one identity, whichever side recorded the value (a checkpoint
    written before identities recorded the resolution kept null); another value differs."""
    from noisylabels.data import CIFAR10NDataModule, DigitsDataModule
    from noisylabels.methods import ELRPlus
    from noisylabels.run.identity import DEFAULT_PREFIX, of_objects

    cases = [
        (None, DigitsDataModule, {"strong_views": 1}),
        (None, DigitsDataModule, {}),
        (ELRPlus, None, {}),
        (None, CIFAR10NDataModule, {}),  # label_set: null is its default set
    ]
    for model_cls, data_cls, base in cases:
        build = model_cls or data_cls
        null = build(**base)
        resolved = null.resolved_defaults()
        assert resolved
        spelled = build(**base, **resolved)

        def ident(obj, is_model=model_cls is not None):
            pair = (obj, None) if is_model else (None, obj)
            return of_objects(*pair, seed=0, trainer_options=None)

        assert differences(ident(null), ident(spelled)) == {}
        old = {k: v for k, v in ident(null).items() if not k.startswith(DEFAULT_PREFIX)}
        for key in resolved:  # a record of before: null, no resolution
            old[f"{'model' if model_cls else 'data'}.{key}"] = None
        assert differences(old, ident(spelled)) == {}
        assert differences(ident(spelled), old) == {}
        for key, value in resolved.items():  # the old null against another value differs
            if isinstance(value, bool):
                name = f"{'model' if model_cls else 'data'}.{key}"
                changed = ident(build(**base, **{**resolved, key: not value}))
                assert list(differences(old, changed)) == [name], name
                assert list(differences(changed, old)) == [name], name
    other = DigitsDataModule(strong_views=1, strong_augment="randaugment-disc-m5")
    null = DigitsDataModule(strong_views=1)
    assert list(differences(of_objects(None, null, seed=0, trainer_options=None),
                            of_objects(None, other, seed=0, trainer_options=None))) == [
        "data.strong_augment"
    ]  # fmt: skip
    old = {k: v for k, v in of_objects(None, null, seed=0, trainer_options=None).items()
           if not k.startswith(DEFAULT_PREFIX)} | {"data.strong_augment": None}  # fmt: skip
    assert list(differences(old, of_objects(None, other, seed=0, trainer_options=None))) == [
        "data.strong_augment"
    ]
