"""Every text or path parameter of every command is one line of something, refused where it enters otherwise: the
CLI sweep at 2b91fd1 met ten text options that took '' as "not given" (--cache-mode '', matrix resolve --cuda '',
model fetch --revision '' ...) and a --url whose newline split the progress line. The walk covers every command
typer builds, so an option added later is held to it too."""

from __future__ import annotations

from typing import Any

import pytest
import typer
from hypothesis import given
from hypothesis import strategies as st

from labwright.cli import GROUPS, app
from labwright.errors import BadInput


def _text_params() -> list[tuple[str, Any, Any]]:
    root = typer.main.get_command(app)
    context = type(root.make_context("labwright", ["lab", "--help"], resilient_parsing=True))
    found = []

    def walk(command: Any, ctx: Any, path: str) -> None:
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            walk(sub, context(sub, parent=ctx, info_name=name), f"{path} {name}")
        for param in getattr(command, "params", []):
            annotation = repr(getattr(getattr(param, "type_descriptor", None), "annotation", None))
            if "str" in annotation or "Path" in annotation:
                found.append((f"{path} {param.opts[0] if param.opts else param.name}", param, ctx))

    top = context(root, info_name="labwright")
    for name in GROUPS:
        command = root.get_command(top, name)
        walk(command, context(command, parent=top, info_name=name), name)
    return found


PARAMS = _text_params()


def test_the_walk_sees_the_commands_text_options():
    names = {label for label, _, _ in PARAMS}
    assert len(PARAMS) > 150 and any(n.endswith("--cache-mode") for n in names), sorted(names)[:20]


def _typed(param: Any, ctx: Any, value: Any) -> BadInput:
    ctx.set_parameter_source(param.name, _source(ctx).COMMANDLINE)
    with pytest.raises(BadInput) as refused:
        param.process_value(ctx, (value,) if param.nargs != 1 or param.multiple else value)
    return refused.value


def _source(ctx: Any) -> Any:
    import importlib

    return importlib.import_module(type(ctx).__module__).ParameterSource


@pytest.mark.parametrize("label, param, ctx", PARAMS, ids=[label for label, _, _ in PARAMS])
def test_an_empty_value_is_refused_naming_the_parameter(label, param, ctx):
    message = str(_typed(param, ctx, ""))
    shown = param.opts[0] if param.param_type_name == "option" else (param.metavar or param.name).upper()
    assert message.startswith(f"{shown} ''") and "\n" not in message, message


@given(st.integers(0, len(PARAMS) - 1), st.text(min_size=1, max_size=8),
       st.sampled_from(["\n", "\r", "\x00", "\x1b", "\x7f", "\t"]), st.text(max_size=8))
def test_a_control_character_anywhere_is_refused_naming_the_parameter(index, before, control, after):
    label, param, ctx = PARAMS[index]
    message = str(_typed(param, ctx, before + control + after))
    assert "control character" in message and "\n" not in message, (label, message)
