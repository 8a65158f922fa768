"""The command line's parsing: its parser class, help layout and the errors of a parse.

What :mod:`noisylabels.run.cli` needs to turn a command line into options: the parser that
accepts a logger without a ``save_dir`` (the CLI sets the run's root), the help that keeps the
list of methods readable, ``--model.GROUP.OPTION null`` of an option group, the closest real
options of an unknown one (:mod:`noisylabels.arguments`, for a method's and a dataset's options
too), and the paragraph of a constructor's error.
"""

from __future__ import annotations

import importlib
import os
import re
from argparse import ArgumentError
from collections.abc import Sequence
from typing import Any

import torch
from jsonargparse import ArgumentParser, DefaultHelpFormatter
from lightning.pytorch.cli import LightningArgumentParser

from noisylabels.arguments import is_option, option_name, suggestion, with_suggestion
from noisylabels.data import NoisyDataModule
from noisylabels.errors import InputError
from noisylabels.methods import NoisyLabelMethod, describe_methods
from noisylabels.methods.core.groups import OPTION_GROUPS, option_group_of
from noisylabels.run.loggers import fill_save_dirs, logger_keys
from noisylabels.run.source import class_path


class HelpFormatter(DefaultHelpFormatter):
    """jsonargparse's help formatter, keeping the line breaks of group descriptions (the list
    of methods under ``--model``)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "".join(indent + line for line in text.splitlines(keepends=True))


def methods_help() -> str:
    """The methods of ``--model``, one line each."""
    lines = describe_methods().splitlines()
    return (
        "Methods: --model NAME (or noisylabels.methods.NAME); its options: --model.help NAME\n"
        + "\n".join("  " + line for line in lines)
    )


class NoisyLabelsParser(LightningArgumentParser):
    """Lightning's parser, accepting a logger that requires a ``save_dir`` and was given none
    (``--trainer.logger CSVLogger``): the CLI sets it to the run's root before the logger is
    built (:mod:`noisylabels.run.loggers`). It takes no abbreviation of an option, nor of a
    method's or dataset's own (jsonargparse builds their parsers of this class too):
    ``--model.optim.l`` is not ``--model.optim.lr``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def validate(self, namespace: Any, *args: Any, **kwargs: Any) -> None:
        keys = logger_keys(namespace) if kwargs.get("branch") is None else []
        if keys:
            namespace = namespace.clone()
            for key in keys:  # any folder will do for the check; the root is set later
                fill_save_dirs(namespace[key], ".")
        super().validate(namespace, *args, **kwargs)


def auto_precision(accelerator: Any) -> str | None:
    """The precision of a run that does not set one: ``bf16-mixed`` where ``accelerator`` (a
    name; ``auto`` picks CUDA when there is one) is a CUDA GPU with bf16 support, else ``None``
    (Lightning's ``32-true``)."""
    cuda = torch.cuda.is_available() and str(accelerator).lower() in ("auto", "gpu", "cuda")
    return "bf16-mixed" if cuda and torch.cuda.is_bf16_supported() else None


GROUP_OPTION = re.compile(r"--model\.(\w+)\.(\w+)(?:=(.*))?$")


def with_group_nulls(argv: list[str]) -> list[str]:
    """``argv`` with ``--model.GROUP.OPTION null`` of an option group written as
    ``--model.GROUP '{OPTION: null}'``: jsonargparse hands an option nested in a method's
    ``init_args`` on as the text of its value, which makes null the string ``None``."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        found = GROUP_OPTION.match(argv[i])
        value = found and (found.group(3) if found.group(3) is not None else None)
        if found and value is None and i + 1 < len(argv):
            value, step = argv[i + 1], 2
        else:
            step = 1
        if found and found.group(1) in OPTION_GROUPS and value in ("null", "~"):
            out += [f"--model.{found.group(1)}", f"{{{found.group(2)}: null}}"]
            i += step
        else:
            out.append(argv[i])
            i += 1
    return out


def with_group_hint(error: InputError) -> InputError:
    """``error``, refusing a method option that lives in an option group (``--model.lr``, or
    ``lr:`` under a config's ``init_args``), with where it is: ``--model.optim.lr``."""
    found = re.search(r"Option '(\w+)' is not accepted|unrecognized arguments: --(\w+)", str(error))
    option = found and (found.group(1) or found.group(2))
    group = option_group_of(option) if option else None
    if group is None:
        return error
    return type(error)(
        f"{error} The method's option {option} is --model.{group}.{option} (in a config: "
        f"{group}: {{{option}: ...}} under model.init_args)"
    )


# what jsonargparse's report of a class's option it does not know names: the option (as the class
# has it: "alph", "optim.l") and the class
_NESTED_KEY = re.compile(r"NestedArg\(key='([^']+)'")
_GIVEN_CLASS = re.compile(r"Problem with given class_path '([\w.]+)'")
_UNKNOWN = re.compile(r"Option '[^']+' is not accepted|unrecognized arguments: ")


def class_options(path: str) -> list[str]:
    """The options of the class at ``path`` (``noisylabels.methods.Forward``) as a parser of
    it names them (``--alpha``, ``--optim.lr``); none where it cannot be imported or read."""
    module, _, name = path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
        parser = ArgumentParser(exit_on_error=False)
        parser.add_class_arguments(cls, fail_untyped=False)
    except (ImportError, AttributeError, ValueError, TypeError):
        return []
    return list(parser._option_string_actions)


def with_option_hint(error: ArgumentError, parser: Any, argv: Sequence[str]) -> ArgumentError:
    """``error``, refusing an option ``parser`` (of the command line ``argv``) does not know,
    with the closest real options (``did you mean --trainer.max_epochs?``): the parser's own,
    or, for an option of the method, the data module or another class given by its path
    (``--model.alph``), that class's, as the command line wrote the unknown one. ``error``
    itself where no option is close (and for an option that lives in an option group,
    which :func:`with_group_hint` names)."""
    message = str(error.message)
    hinted = with_suggestion(message, getattr(parser, "_option_string_actions", {}))
    if hinted != message:
        return ArgumentError(None, hinted)
    key, given_class = _NESTED_KEY.search(message), _GIVEN_CLASS.search(message)
    if key is None or given_class is None or not _UNKNOWN.search(message):
        return error  # not an unknown option (a value that does not parse, say)
    if option_group_of(key.group(1)) is not None:
        return error
    suffix = "." + key.group(1)
    given = [option_name(t) for t in argv if is_option(t) and option_name(t).endswith(suffix)]
    if not given:  # an option of a config file, not of the command line
        return error
    prefix = given[-1][: -len(key.group(1))]
    options = [prefix + o[2:] for o in class_options(given_class.group(1)) if o.startswith("--")]
    if given[-1] in options:  # a real option of the class: what is wrong is elsewhere
        return error
    hint = suggestion(given[-1:], options)
    return ArgumentError(None, f"{message}\n{hint}") if hint else error


# jsonargparse's report of a class that could not be built, and the groups the CLI builds
_BUILD_FAILED = "Does not validate against any of the Union subtypes"
_GROUPS = {NoisyLabelMethod: "model", NoisyDataModule: "data"}


def constructor_error(err: BaseException) -> InputError | None:
    """A ``ValueError`` or ``TypeError`` that the constructor of the method or the data module
    raised (jsonargparse reports it as its own ``ValueError`` raised from it), as an
    :class:`InputError` naming the option group and the class; ``None`` for anything else."""
    cause = err.__cause__
    message = str(err)
    if not message.startswith(_BUILD_FAILED) or not isinstance(cause, (ValueError, TypeError)):
        return None
    subtypes = re.search(r"Subtypes: \[(.*?)\]", message)
    line = subtypes.group(1) if subtypes else ""
    named = [(base, g) for base, g in _GROUPS.items() if class_path(base) in line]
    if not named:
        return None
    base, group = named[0]
    # the given value's class_path comes after its init_args (which may hold others)
    found = re.findall(r"class_path='([\w.]+)'", message)
    name = found[-1] if found else base.__name__
    return InputError(
        f"--{group} ({name}): {cause}. Its options: noisylabels fit --{group}.help {name}"
    )


STAGE_HELP = {
    "fit": "Train a method, test it on the clean test set, write results.json.",
    "validate": "Evaluate a checkpoint on the (noisy) validation split.",
    "test": "Evaluate a checkpoint on the clean test set.",
    "predict": "Predict the class probabilities of the test set into predictions.csv.",
}


def parser_key(cli: Any, main_kwargs: Any) -> Any:
    """What the parser of ``cli`` is built from: its class and stage, the classes and settings
    it passes Lightning, the environment jsonargparse reads at build time and the list of
    methods (the help of ``--model``); ``None`` where a setting cannot be a key (never reused)."""
    try:
        key = (
            type(cli), cli.stage, repr(main_kwargs), cli.parser_class, cli.trainer_class,
            cli.model_class, cli.datamodule_class, cli.subclass_mode_model,
            cli.subclass_mode_data, repr(cli.seed_everything_default), repr(cli.trainer_defaults),
            cli.auto_configure_optimizers, os.environ.get("JSONARGPARSE_DEFAULT_ENV"),
            methods_help(),
        )  # fmt: skip
        hash(key)
        return key
    except TypeError:
        return None
