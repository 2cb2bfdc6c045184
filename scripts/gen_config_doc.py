#!/usr/bin/env python3
"""Generates docs/configuration.md from the definitions the code runs with, so the reference cannot
drift from them: the config dataclasses of curvine_py/config.py (fields, types, defaults and the
comments beside them), the TOML section each is loaded from (found in the `load(Cls, section=...)`
calls), their CURVINE_* environment names, the other CURVINE_* variables the code reads, and every
command's argparse flags.

The parsers are the real ones: each subcommand's `main` (found through curvine_py.cli.main.SUBCOMMANDS,
as the CLI dispatches) is called with the parsing step intercepted, so the parser a user's command
line meets is the one documented, and nothing is started. tests/unit/test_docs.py uses the same
discovery to check every `curvine-py` command written in the docs.

`--check` exits 1 when docs/configuration.md differs from what this script writes.
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import difflib
import importlib
import inspect
import io
import os
import pathlib
import sys
import tokenize
import tomllib
from collections.abc import Callable, Iterator
from typing import Any, get_type_hints

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from curvine_py import config  # after the path fix, so a checkout runs without an install
from curvine_py.cli.main import SUBCOMMANDS

OUTPUT = ROOT / "docs" / "configuration.md"
CONFIG_SOURCE = pathlib.Path(config.__file__)
PACKAGE_DIR = CONFIG_SOURCE.parent
ENV_PREFIX = "CURVINE_"
# `bench` dispatches to bench/NAME.py in the checkout; its flags are for developers (see --help there).
DOCUMENTED_COMMANDS = [name for name in SUBCOMMANDS if name != "bench"]


# -- the config dataclasses ---------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, slots=True)
class Setting:
    name: str
    kind: str          # the TOML type
    default: str       # as a TOML value (markdown)
    doc: str           # the comment beside (or just above) the field
    group: str         # a comment heading the fields that follow it, shown once before them

    @property
    def env(self) -> str:
        return f"{ENV_PREFIX}{self.name.upper()}"


def _comments(source: str) -> dict[int, str]:
    """Line number -> the text of the comment on that line."""
    found: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            found[tok.start[0]] = tok.string.lstrip("#").strip()
    return found


def _kind(hint: Any) -> str:
    names = {int: "integer", float: "float", str: "string", bool: "boolean"}
    if hint in names:
        return names[hint]
    if hint == tuple[str, ...]:
        return "list of strings (env: comma-separated)"
    return str(hint)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return repr(value)


def _default_source(node: ast.expr | None) -> ast.expr | None:
    """The default's expression: `X` in `name: T = X` or in `field(default=X, ...)`."""
    if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "field":
        return next((kw.value for kw in node.keywords if kw.arg == "default"), None)
    return node


def settings_of(cls: type[Any]) -> list[Setting]:
    source = pathlib.Path(inspect.getfile(cls)).read_text()
    comments = _comments(source)
    [klass] = [n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == cls.__name__]
    hints = get_type_hints(cls)
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    settings: list[Setting] = []
    previous_end = klass.lineno
    for node in klass.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            previous_end = node.end_lineno or node.lineno
            continue
        name = node.target.id
        above = " ".join(comments[n] for n in range(previous_end + 1, node.lineno) if n in comments)
        beside = comments.get(node.end_lineno or node.lineno, "")
        # A comment above a field that has its own comment heads a group; otherwise it is the field's.
        group, doc = (above, beside) if beside else ("", above)
        value = defaults[name]
        shown = f"`{_toml_value(value)}`"
        expression = _default_source(node.value)
        if isinstance(expression, ast.BinOp):   # `64 * MiB` says more than 67108864
            shown += f" (`{ast.get_source_segment(source, expression)}`)"
        settings.append(Setting(name, _kind(hints[name]), shown, doc, group))
        previous_end = node.end_lineno or node.lineno
    return settings


def _python_files() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        rel = path.relative_to(PACKAGE_DIR.parent)
        if rel.parts[1] == "proto":
            continue
        yield ".".join(rel.with_suffix("").parts), ast.parse(path.read_text())


def loaded_sections() -> dict[str, dict[str, list[str]]]:
    """Config class name -> TOML section -> the modules that load it (`load(Cls, section="...")`)."""
    found: dict[str, dict[str, list[str]]] = {}
    for module, tree in _python_files():
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], (ast.Name, ast.Attribute))):
                continue
            func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            section = next((kw.value for kw in node.keywords if kw.arg == "section"), None)
            if func != "load" or not isinstance(section, ast.Constant):
                continue
            first = node.args[0]
            cls = first.attr if isinstance(first, ast.Attribute) else getattr(first, "id", "")
            users = found.setdefault(cls, {}).setdefault(str(section.value), [])
            if module not in users:
                users.append(module)
    return found


def config_classes() -> dict[str, type[Any]]:
    """Every settings class: config.py's own, then each one a role module defines and loads
    (`load(RouterConfig, section="router")` in curvine_py/router/settings.py), by name."""
    found: dict[str, type[Any]] = {
        name: obj for name, obj in vars(config).items()
        if isinstance(obj, type) and dataclasses.is_dataclass(obj) and obj.__module__ == config.__name__}
    for name, by_section in loaded_sections().items():
        for module in (m for users in by_section.values() for m in users):
            obj = getattr(importlib.import_module(module), name, None)
            if name not in found and isinstance(obj, type) and dataclasses.is_dataclass(obj):
                found[name] = obj
    return found


def _imports(tree: ast.Module) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return found


def _flag_dests(tree: ast.Module) -> dict[str, str]:
    """Setting -> the parsed argument it is taken from, in `{"setting": ...args.DEST...}` literals
    (the flags a command hands to `load`)."""
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Dict):
            continue
        for key, value in zip(node.keys, node.values):
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                dest = next((n.attr for n in ast.walk(value) if isinstance(n, ast.Attribute)
                             and isinstance(n.value, ast.Name) and n.value.id == "args"), None)
                if dest:
                    found[key.value] = dest
    return found


def setting_flags() -> dict[str, dict[str, list[tuple[str, str]]]]:
    """Config class name -> setting -> (flag, its help) for the flags that set it, over every command
    that loads the class (in its own module or one it imports): the flag the command hands to `load`
    for that setting, else the flag of the setting's name."""
    trees = dict(_python_files())
    sections = loaded_sections()
    classes = config_classes()
    found: dict[str, dict[str, list[tuple[str, str]]]] = {}
    for command in DOCUMENTED_COMMANDS:
        module = SUBCOMMANDS[command][0]
        near = {module} | (_imports(trees[module]) & set(trees))
        mapping: dict[str, str] = {}
        for name in sorted(near):
            mapping.update(_flag_dests(trees[name]))
        taken = set(mapping.values())
        parser = command_parser(command)
        options = {a.dest: (a.option_strings[-1], _help(a, parser)) for a in parser._actions if a.option_strings}
        for cls_name, by_section in sections.items():
            if not near & {m for users in by_section.values() for m in users}:
                continue
            for f in dataclasses.fields(classes[cls_name]):
                dest = mapping.get(f.name) or (f.name if f.name not in taken else "")
                if dest in options:
                    flags = found.setdefault(cls_name, {}).setdefault(f.name, [])
                    if options[dest][0] not in (flag for flag, _ in flags):
                        flags.append(options[dest])
    return found


def named_environment() -> dict[str, list[str]]:
    """CURVINE_* names written out in the code (read or set directly, not through `load`) -> modules."""
    found: dict[str, list[str]] = {}
    for module, tree in _python_files():
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                      if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                      and n.body and isinstance(n.body[0], ast.Expr)}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
                    and node.value.startswith(ENV_PREFIX) and len(node.value) > len(ENV_PREFIX) and node.value.isupper()
                    and node.value.replace("_", "").isalnum()):
                users = found.setdefault(node.value, [])
                if module not in users:
                    users.append(module)
    return dict(sorted(found.items()))


# -- the command-line parsers -------------------------------------------------------------------
class _Captured(BaseException):
    """Raised instead of parsing; a BaseException so no `except Exception` in a main swallows it."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__(parser.prog)
        self.parser = parser


@contextlib.contextmanager
def _clean_environment() -> Iterator[None]:
    """Some parsers take defaults from the environment (CURVINE_MASTER, CSI_ENDPOINT...) when they are
    built: document the defaults, not this shell's variables."""
    saved = dict(os.environ)
    os.environ.clear()
    try:
        yield
    finally:
        os.environ.update(saved)


def captured_parser(main: Callable[[list[str]], object], argv: list[str], what: str) -> argparse.ArgumentParser:
    """The parser `main(argv)` parses its arguments with; `main` stops there, before doing anything."""
    def capture(self: argparse.ArgumentParser, *_: object, **__: object) -> Any:
        raise _Captured(self)

    original = argparse.ArgumentParser.parse_known_args
    argparse.ArgumentParser.parse_known_args = capture  # type: ignore[method-assign]
    try:
        with _clean_environment():
            main(argv)
    except _Captured as captured:
        return captured.parser
    finally:
        argparse.ArgumentParser.parse_known_args = original  # type: ignore[method-assign]
    raise RuntimeError(f"{what}: main() returned without parsing its arguments")


def command_parser(name: str) -> argparse.ArgumentParser:
    """The parser of `curvine-py NAME ...` (not for `bench`, which dispatches first: bench_parsers)."""
    module = importlib.import_module(SUBCOMMANDS[name][0])
    return captured_parser(module.main, [], f"curvine-py {name}")


def bench_parsers() -> dict[str, argparse.ArgumentParser]:
    """`curvine-py bench NAME`: each benchmark's own parser (bench/NAME.py in the checkout)."""
    module = importlib.import_module(SUBCOMMANDS["bench"][0])
    return {name: captured_parser(module.main, [name], f"curvine-py bench {name}") for name in module.BENCHMARKS}


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """NAME -> parser of `PROG NAME ...` for a parser with sub-commands (fs, kv); {} otherwise."""
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found.update(action.choices)
    return found


# -- rendering ----------------------------------------------------------------------------------
EXAMPLE = """
# /etc/curvine-py/curvine.toml: one file can serve every role; each reads its own section
[master]
host = "10.0.0.1"
token_file = "/etc/curvine-py/token"
lease_ms = 5000

[worker]
master = "10.0.0.1:8995"
data_dirs = ["/nvme0/curvine:1.5TB", "/nvme1/curvine"]
token_file = "/etc/curvine-py/token"

[mount]
master = "10.0.0.1:8995"
token_file = "/etc/curvine-py/token"

[client]
master = "10.0.0.1:8995"
"""


def _check_example(sections: dict[str, dict[str, list[str]]]) -> None:
    """The example must load: every key it sets exists in its section (token files are not read)."""
    table = tomllib.loads(EXAMPLE)
    by_section = {section: cls for cls, names in sections.items() for section in names}
    classes = config_classes()
    for section, keys in table.items():
        cls = classes[by_section[section]]
        unknown = set(keys) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise RuntimeError(f"the example's [{section}] sets unknown keys {sorted(unknown)}")
        values = {k: v for k, v in keys.items() if k != "token_file"}
        config.load(cls, section=section, flags=values, env={})


# -- rendering (markup) ---------------------------------------------------------------------------------
def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _help(action: argparse.Action, parser: argparse.ArgumentParser) -> str:
    text = action.help or ""
    if "%(" in text:
        text = text % {**vars(action), "prog": parser.prog}
    return _cell(text)


def _argument(action: argparse.Action) -> str:
    if action.nargs == 0:
        return ""
    if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
        shown = "{" + ",".join(str(c) for c in action.choices) + "}"
    else:
        metavar = action.metavar if isinstance(action.metavar, str) else None
        shown = metavar or (action.dest if not action.option_strings else action.dest.upper())
    if action.nargs == "?":
        shown = f"[{shown}]"
    return f"`{shown}`"


def _flag_default(action: argparse.Action) -> str:
    default = action.default
    if default is None or default is False or default in ("", [], argparse.SUPPRESS) or action.nargs == 0:
        return ""
    return f"`{default}`"


def flag_table(parser: argparse.ArgumentParser) -> list[str]:
    rows = ["| flag | argument | default | meaning |", "|---|---|---|---|"]
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        flag = ", ".join(f"`{s}`" for s in action.option_strings) or "(positional)"
        if isinstance(action, argparse._AppendAction):
            flag += " (repeatable)"
        rows.append(f"| {flag} | {_argument(action)} | {_flag_default(action)} | {_help(action, parser)} |")
    return rows


def settings_section(cls: type[Any], sections: dict[str, list[str]],
                     flags: dict[str, list[tuple[str, str]]]) -> list[str]:
    names = ", ".join(f"`[{s}]`" for s in sections)
    users = sorted({m for modules in sections.values() for m in modules})
    lines = [f"### {names} — `{cls.__name__}`", ""]
    if cls.__doc__ and not cls.__doc__.startswith(cls.__name__ + "("):   # not the dataclass-made one
        lines += [" ".join(cls.__doc__.split()), ""]
    lines += [f"Loaded by {', '.join(f'`{u}`' for u in users)}.", "",
              "| key | environment | flag | type | default | meaning |", "|---|---|---|---|---|---|"]
    for s in settings_of(cls):
        if s.group:
            lines.append(f"| | | | | | *{_cell(s.group)}* |")
        its_flags = flags.get(s.name, [])
        flag = ", ".join(f"`{f}`" for f, _ in its_flags)
        # the comment beside the field, else what its flag's help says
        meaning = _cell(s.doc) or next((text for _, text in its_flags if text), "")
        lines.append(f"| `{s.name}` | `{s.env}` | {flag} | {s.kind} | {s.default} | {meaning} |")
    return lines + [""]


def _first_paragraph(text: str | None) -> str:
    return " ".join((text or "").strip().split("\n\n")[0].split())


def render() -> str:
    sections = loaded_sections()
    classes = list(config_classes().values())
    _check_example(sections)
    out = [
        "# Configuration reference",
        "",
        "<!-- Generated by scripts/gen_config_doc.py from curvine_py/config.py and the commands' parsers;",
        "     do not edit by hand: run `.venv/bin/python scripts/gen_config_doc.py` after changing them",
        "     (tests/unit/test_docs.py fails while this file is stale). -->",
        "",
        _first_paragraph(config.__doc__),
        "",
        "Every setting below can be given three ways besides its default: as `key = value` in the named",
        "section of a TOML file passed with `--config FILE`, as the environment variable shown, and (where",
        "the flag column names one) as a flag of the commands that load it ([Commands](#commands) has",
        "each command's flags). A later source wins:",
        "defaults < TOML file < `CURVINE_*` environment < flags. A key the section does not define, or a",
        "value of the wrong type, stops the role at start with an error naming it.",
        "",
        "```toml",
        EXAMPLE.strip("\n"),
        "```",
        "",
        " ".join((config.load.__doc__ or "").split("\n\n", 1)[-1].split()),
        "",
        "## Settings",
        "",
    ]
    flags = setting_flags()
    for cls in classes:
        out += settings_section(cls, sections.get(cls.__name__, {"(not loaded by any command)": []}),
                                flags.get(cls.__name__, {}))
    extra = named_environment()
    if extra:
        out += ["## Environment variables named in the code", "",
                "Besides the `load` layering above, these modules read (or, for their children, set) these",
                "variables by name.", "",
                "| variable | where |", "|---|---|"]
        out += [f"| `{name}` | {', '.join(f'`{m}`' for m in modules)} |" for name, modules in extra.items()]
        out.append("")
    out += ["## Commands", "",
            "The flags of each `curvine-py` subcommand, taken from the parser it runs. An empty default",
            "means the setting's default above (or the flag is off). `curvine-py bench NAME --help` lists",
            "each benchmark's own flags.", ""]
    for name in DOCUMENTED_COMMANDS:
        parser = command_parser(name)
        out += [f"### `curvine-py {name}`", "", _cell(SUBCOMMANDS[name][1]) + ".", ""]
        out += flag_table(parser) + [""]
        for sub, sub_parser in subparsers(parser).items():
            out += [f"#### `curvine-py {name} {sub}`", ""]
            if len(sub_parser._actions) > 1:
                out += flag_table(sub_parser) + [""]
            else:
                out += ["No arguments.", ""]
    return "\n".join(out).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=_first_paragraph(__doc__))
    p.add_argument("--check", action="store_true", help="exit 1 if the file is stale (and show how)")
    p.add_argument("--output", type=pathlib.Path, default=OUTPUT, help="default docs/configuration.md")
    args = p.parse_args(argv)
    output: pathlib.Path = args.output
    text = render()
    if args.check:
        current = output.read_text() if output.exists() else ""
        if current == text:
            return 0
        diff = difflib.unified_diff(current.splitlines(), text.splitlines(), "committed", "generated", lineterm="")
        print("\n".join(list(diff)[:60]), file=sys.stderr)
        print(f"{output} is stale: run scripts/gen_config_doc.py", file=sys.stderr)
        return 1
    output.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
