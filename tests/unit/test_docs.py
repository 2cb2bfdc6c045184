"""The documentation tells the truth about the CLI: docs/configuration.md is what
scripts/gen_config_doc.py generates from the code, every `curvine-py` command written in README.md
and docs/*.md names a subcommand and flags its real parser knows, and the systemd units in
deploy/systemd/ start commands the real parsers accept, without a token on any command line.

Commands are found in fenced code blocks, indented lines that start with a command, and inline
code spans that start with one; `#` comments are skipped (they explain, they do not run). The
parsers are built by scripts/gen_config_doc.py the way the CLI builds them, and nothing is started.
"""
from __future__ import annotations

import argparse
import configparser
import functools
import importlib.util
import json
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCUMENTS = ["README.md", *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))]
UNITS = sorted((ROOT / "deploy" / "systemd").glob("*.service"))
PROGRAM = "curvine-py"


def _load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_config_doc", ROOT / "scripts" / "gen_config_doc.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module      # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


gen = _load_generator()


# -- finding commands in markdown ---------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Snippet:
    line: int          # where it starts in its document (1-based)
    text: str
    shell: bool        # shell syntax (else only ["curvine-py", ...] lists are looked for)


NON_SHELL = {"python", "py", "yaml", "yml", "toml", "json", "ini", "proto", "protobuf", "html", "css", "dockerfile"}
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*([\w+-]*)")
_INLINE = re.compile(r"(`+)(.+?)\1")
_COMMAND_START = re.compile(r"^(\$ |sudo |\S*/)?" + re.escape(PROGRAM) + r"(\s|$)")


def snippets(markdown: str) -> Iterator[Snippet]:
    lines = markdown.splitlines()
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if fence:
            marker, info = fence.group(1), fence.group(2).lower()
            start = i + 1
            i += 1
            while i < len(lines) and not lines[i].strip().startswith(marker):
                i += 1
            yield Snippet(start + 1, "\n".join(lines[start:i]), info not in NON_SHELL)
        elif lines[i].startswith(("    ", "\t")) and _COMMAND_START.match(lines[i].strip()):
            text, start = lines[i], i
            while text.endswith("\\") and i + 1 < len(lines):   # a continued indented command
                i += 1
                text += "\n" + lines[i]
            yield Snippet(start + 1, text, True)
        else:
            for match in _INLINE.finditer(lines[i]):
                if _COMMAND_START.match(match.group(2).strip()):
                    yield Snippet(i + 1, match.group(2), True)
        i += 1


def _tokens(line: str) -> list[str]:
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        return list(lexer)
    except ValueError:          # an unbalanced quote in prose-like text: words are good enough
        return line.split("#", 1)[0].split()


def invocations(snippet: Snippet) -> Iterator[tuple[int, list[str]]]:
    """(line, the arguments after `curvine-py`) for each command in the snippet."""
    if not snippet.shell:
        yield from _listed(snippet)
        return
    logical: list[tuple[int, str]] = []
    pending = ""
    for offset, raw in enumerate(snippet.text.splitlines()):
        if not pending:
            first = offset
        pending += raw
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        logical.append((snippet.line + first, pending))
        pending = ""
    if pending:
        logical.append((snippet.line + first, pending))
    for line, text in logical:
        segment: list[str] = []
        for token in [*_tokens(text), ";"]:
            if token.strip(";&|"):
                segment.append(token)
                continue
            found = _after_program(segment)
            if found is not None:
                yield line, found
            segment = []
    yield from _listed(snippet)


def _after_program(segment: list[str]) -> list[str] | None:
    for index, token in enumerate(segment):
        if token.rsplit("/", 1)[-1] == PROGRAM:
            if "install" in segment[:index]:      # `pip install curvine-py`: the package, not a command
                return None
            return segment[index + 1:]
        if token == "-m" and segment[index + 1:index + 2] == ["curvine_py.cli.main"]:
            return segment[index + 2:]
    return None


_LISTED = re.compile(r'\[\s*"(?:[^"\]]*/)?' + re.escape(PROGRAM) + r'"\s*,[^\]]*\]', re.DOTALL)


def _listed(snippet: Snippet) -> Iterator[tuple[int, list[str]]]:
    """`["curvine-py", "master", ...]` as in YAML, JSON or Python argument lists."""
    for match in _LISTED.finditer(snippet.text):
        try:
            items = json.loads(match.group(0))
        except ValueError:
            continue
        yield snippet.line + snippet.text.count("\n", 0, match.start()), [str(item) for item in items[1:]]


# -- checking a command against the parsers -----------------------------------------------------
@functools.cache
def top_parsers() -> dict[str, argparse.ArgumentParser | None]:
    """Subcommand -> its parser (None for `bench`, which dispatches to one parser per benchmark)."""
    return {name: None if name == "bench" else gen.command_parser(name) for name in gen.SUBCOMMANDS}


@functools.cache
def bench_parsers() -> dict[str, argparse.ArgumentParser]:
    return dict(gen.bench_parsers())


_FLAG = re.compile(r"^(--?[A-Za-z][\w-]*)(=.*)?$")
_NAME = re.compile(r"^[a-z][a-z0-9-]*$")


def _placeholder(token: str) -> list[str] | None:
    """`{a,b}` -> [a, b]; `NAME`, `<name>`, `...` -> [] (stands for any); a real name -> None."""
    if token.startswith("{") and token.endswith("}"):
        return token[1:-1].split(",")
    if _NAME.match(token):
        return None
    return []


def check(args: list[str]) -> list[str]:
    """What is wrong with `curvine-py ARGS` (an empty list: nothing)."""
    if not args or args[0] in ("-h", "--help"):
        return []
    names = _placeholder(args[0])
    if names == []:
        return []
    problems = [f"unknown subcommand {n!r}" for n in names or [args[0]] if n not in gen.SUBCOMMANDS]
    if problems:
        return problems
    for name in names or [args[0]]:
        parser = top_parsers()[name]
        if parser is None:
            problems += _check_choice(bench_parsers(), args[1:], f"{PROGRAM} {name}")
        else:
            problems += _check_flags(parser, args[1:])
    return problems


def _check_choice(choices: dict[str, argparse.ArgumentParser], rest: list[str], where: str) -> list[str]:
    """`rest` starts with one of `choices` (or a placeholder: then the flags must suit every choice)."""
    if not rest or _FLAG.match(rest[0]):
        return [] if not rest or rest[0] in ("-h", "--help") else [f"{where}: a flag before the command"]
    names = _placeholder(rest[0])
    picked = list(choices) if names == [] else (names or [rest[0]])
    unknown = [f"{where}: unknown command {n!r}" for n in picked if n not in choices]
    return unknown or [p for n in picked for p in _check_flags(choices[n], rest[1:])]


def _check_flags(parser: argparse.ArgumentParser, rest: list[str]) -> list[str]:
    chooses = gen.subparsers(parser)
    i = 0
    while i < len(rest):
        token = rest[i].strip("[](),")
        if token == "--":
            return []
        flag = _FLAG.match(token)
        if flag:
            action = parser._option_string_actions.get(flag.group(1))
            if action is None:
                return [f"{parser.prog}: unknown flag {flag.group(1)}"]
            if action.nargs != 0 and flag.group(2) is None:
                i += 1          # its value
        elif chooses:
            return _check_choice(chooses, rest[i:], parser.prog)
        i += 1
    return []


# -- the tests ----------------------------------------------------------------------------------
def test_configuration_doc_is_generated_from_the_code() -> None:
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_config_doc.py"), "--check"],
                            capture_output=True, text=True, check=False, cwd=ROOT)
    assert result.returncode == 0, result.stderr


def test_a_stale_configuration_doc_fails_the_check(tmp_path: pathlib.Path) -> None:
    stale = tmp_path / "configuration.md"
    stale.write_text((ROOT / "docs" / "configuration.md").read_text().replace("`--lease-ms`", "`--lease`"))
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_config_doc.py"), "--check",
                             "--output", str(stale)], capture_output=True, text=True, check=False, cwd=ROOT)
    assert result.returncode == 1
    assert "is stale" in result.stderr and "--lease-ms" in result.stderr
    assert "`--lease`" in stale.read_text()        # --check never writes


def test_configuration_doc_covers_every_setting_and_flag() -> None:
    text = (ROOT / "docs" / "configuration.md").read_text()
    for cls in (gen.config.MasterConfig, gen.config.WorkerConfig, gen.config.ClientConfig, gen.config.MountConfig):
        for setting in gen.settings_of(cls):
            assert f"| `{setting.name}` | `{setting.env}` |" in text
    for name in gen.DOCUMENTED_COMMANDS:
        for action in gen.command_parser(name)._actions:
            for option in set(action.option_strings) - {"-h", "--help"}:
                assert f"`{option}`" in text, (name, option)
    assert "| `lease_ms` | `CURVINE_LEASE_MS` | `--lease-ms` | integer | `5000` | a worker silent this long" in text
    # A flag named differently from its setting is found through the flags the command hands to load().
    assert "| `heartbeat_interval_ms` | `CURVINE_HEARTBEAT_INTERVAL_MS` | `--heartbeat-ms` |" in text
    known = {o for name in gen.DOCUMENTED_COMMANDS for a in gen.command_parser(name)._actions for o in a.option_strings}
    shown = re.findall(r"^\| `\w+` \| `CURVINE_\w+` \| ([^|]*) \|", text, re.MULTILINE)
    assert len(shown) > 50
    assert {f for cell in shown for f in re.findall(r"`([^`]+)`", cell)} <= known


@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_documented_command_exists(document: str) -> None:
    problems = [f"{document}:{line}: {PROGRAM} {shlex.join(args)}: {problem}"
                for snippet in snippets((ROOT / document).read_text())
                for line, args in invocations(snippet) for problem in check(args)]
    assert not problems, "\n".join(problems)


def test_the_docs_name_many_commands() -> None:
    """The extraction finds the commands people copy (a checker that finds none passes anything)."""
    found = [args[0] for document in DOCUMENTS for snippet in snippets((ROOT / document).read_text())
             for _, args in invocations(snippet) if args]
    for name in ("up", "master", "worker", "mount", "fs", "kv", "report", "csi", "bench"):
        assert name in found, name


_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(markdown: str) -> set[str]:
    return {_slug(line.lstrip("#")) for line in _without_code(markdown) if re.match(r"^#{1,6} ", line)}


def _without_code(markdown: str) -> list[str]:
    kept: list[str] = []
    fence = ""
    for line in markdown.splitlines():
        match = _FENCE.match(line)
        if fence:
            fence = "" if line.strip().startswith(fence) else fence
        elif match:
            fence = match.group(1)
        else:
            kept.append(line)
    return kept


@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_relative_link_leads_somewhere(document: str) -> None:
    source = ROOT / document
    broken = []
    for number, line in enumerate(_without_code(source.read_text()), 1):
        for target in _LINK.findall(re.sub(r"`[^`]*`", "", line)):
            if re.match(r"^[a-z]+:", target):       # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            resolved = (source.parent / path).resolve() if path else source
            if not resolved.exists():
                broken.append(f"{target}: no such file")
            elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved.read_text()):
                broken.append(f"{target}: no heading with that anchor")
    assert not broken, f"{document}: " + "; ".join(broken)


CHECKED = """
Run `curvine-py master --lease-ms 5` or `curvine-py master --lese-ms 5`.

```bash
export CURVINE_MASTER=127.0.0.1:8995
.venv/bin/curvine-py fs mkdir -p /a && curvine-py fs --master m:1 put ./x /a/x   # also --nope
curvine-py worker --master m:1 --data-dir /d:1GB \\
    --bogus 3
pip install curvine-py
curvine-py fs --recursive rm /a
curvine-py fs rm --recursive /a
curvine-py frob --x
curvine-py bench NAME --quick
curvine-py bench {kv,meta} --quick
curvine-py bench kv --dir=/tmp --sizes 1
curvine-py mount --master HOST:PORT MOUNTPOINT [--subdir PATH] [--tokn T]
```

    curvine-py kv put --durable k ./f

```yaml
command: ["curvine-py", "report", "--master", "m:1", "--jsn"]
```
"""


def test_the_checker_finds_what_is_wrong_and_only_that() -> None:
    found = [(line, args[0], problem) for snippet in snippets(CHECKED)
             for line, args in invocations(snippet) for problem in check(args)]
    assert found == [
        (2, "master", "curvine-py master: unknown flag --lese-ms"),
        (7, "worker", "curvine-py worker: unknown flag --bogus"),
        (10, "fs", "curvine-py fs: unknown flag --recursive"),      # an option of `rm`, not of `fs`
        (12, "frob", "unknown subcommand 'frob'"),
        (16, "mount", "curvine-py mount: unknown flag --tokn"),
        (22, "report", "curvine-py report: unknown flag --jsn"),
    ]


def test_the_checker_reads_commands_as_the_shell_would() -> None:
    [snippet] = list(snippets("```\nFOO=1 curvine-py kv exists 'a b' ; curvine-py report --json | jq .\n```"))
    assert [args for _, args in invocations(snippet)] == [["kv", "exists", "a b"], ["report", "--json"]]
    assert check(["bench", "nosuch"]) == ["curvine-py bench: unknown command 'nosuch'"]
    assert check(["fs", "nosuch"]) == ["curvine-py fs: unknown command 'nosuch'"]
    assert check(["fs", "--master", "put", "ls"]) == []     # --master's value happens to read like a command


# -- systemd units ------------------------------------------------------------------------------
class _UnitFile(configparser.ConfigParser):
    """systemd unit syntax as far as these units use it: case-sensitive keys, no interpolation."""

    def __init__(self) -> None:
        super().__init__(interpolation=None, strict=False)

    def optionxform(self, optionstr: str) -> str:
        return optionstr


def _unit(path: pathlib.Path) -> configparser.ConfigParser:
    parser = _UnitFile()
    parser.read_string(path.read_text())
    return parser


def _exec_argv(line: str) -> list[str]:
    argv = shlex.split(line.replace("\\\n", " "))
    while argv and argv[0][:1] in "-@:+!":     # systemd's prefixes (ignore failure, ...)
        argv[0] = argv[0][1:]
    return argv


def test_the_three_units_exist() -> None:
    assert [p.name for p in UNITS] == ["curvine-py-master.service", "curvine-py-mount.service",
                                       "curvine-py-worker.service"]


@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_unit_starts_a_command_the_cli_accepts(unit: pathlib.Path) -> None:
    service = _unit(unit)["Service"]
    argv = _exec_argv(service["ExecStart"])
    assert argv[0] == "/usr/local/bin/curvine-py" or argv[0].endswith("/bin/curvine-py"), argv
    role = unit.stem.removeprefix("curvine-py-")
    assert argv[1] == role
    assert check(argv[1:]) == []
    # The real parser accepts the whole command line (values included), not only its flag names.
    parser = top_parsers()[role]
    assert parser is not None
    parser.parse_args(argv[2:])


@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_unit_keeps_the_token_off_the_command_line(unit: pathlib.Path) -> None:
    service = _unit(unit)["Service"]
    commands = [v for k, v in service.items() if k.startswith("Exec")]
    for command in commands:
        argv = _exec_argv(command)
        assert "--token" not in argv and not any(a.startswith("--token=") for a in argv), command
        assert not any("TOKEN" in a for a in argv), command
    assert "CURVINE_TOKEN=" not in service.get("Environment", ""), "the token belongs in a root-only file"
    assert "--token-file" in service["ExecStart"] or service.get("EnvironmentFile")


@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_unit_restarts_and_raises_its_limits(unit: pathlib.Path) -> None:
    parsed = _unit(unit)
    service = parsed["Service"]
    assert service["Restart"] == "on-failure"
    assert int(service["LimitNOFILE"]) >= 65536
    assert service["Type"] in ("simple", "exec", "notify")
    assert "network-online.target" in parsed["Unit"]["After"]
    assert parsed["Install"]["WantedBy"]


def test_units_start_in_order() -> None:
    units = {p.stem: _unit(p) for p in UNITS}
    worker, mount = units["curvine-py-worker"]["Unit"], units["curvine-py-mount"]["Unit"]
    assert "curvine-py-master.service" in worker["After"].split()
    assert {"curvine-py-master.service", "curvine-py-worker.service"} <= set(mount["After"].split())
    mount_service = units["curvine-py-mount"]["Service"]
    stop = _exec_argv(mount_service["ExecStop"])
    start = _exec_argv(mount_service["ExecStart"])
    assert stop[:2] == ["/bin/fusermount3", "-u"] or stop[:2] == ["/usr/bin/fusermount3", "-u"], stop
    mount_parser = top_parsers()["mount"]
    assert mount_parser is not None
    assert stop[-1] == mount_parser.parse_args(start[2:]).mountpoint
    assert _exec_argv(mount_service["ExecStartPre"]) == ["/bin/mkdir", "-p", stop[-1]]


# The directives the units may use (a misspelt key is ignored by systemd with only a warning).
DIRECTIVES = {
    "Unit": {"Description", "Documentation", "Wants", "Requires", "After", "Before", "StartLimitIntervalSec",
             "StartLimitBurst", "ConditionPathExists"},
    "Service": {"Type", "EnvironmentFile", "Environment", "ExecStartPre", "ExecStart", "ExecStop", "Restart",
                "RestartSec", "TimeoutStopSec", "LimitNOFILE", "LimitMEMLOCK", "KillMode", "User", "Group"},
    "Install": {"WantedBy", "RequiredBy"},
}


@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_unit_uses_only_real_directives(unit: pathlib.Path, tmp_path: pathlib.Path) -> None:
    parsed = _unit(unit)
    assert set(parsed.sections()) == set(DIRECTIVES)
    for section in parsed.sections():
        assert set(parsed[section]) <= DIRECTIVES[section], (section, set(parsed[section]) - DIRECTIVES[section])
    analyze = shutil.which("systemd-analyze")
    if analyze:     # systemd's own check too where it is installed (it needs the commands to exist)
        copy = tmp_path / unit.name
        copy.write_text(unit.read_text().replace("/usr/local/bin/curvine-py", sys.executable))
        result = subprocess.run([analyze, "verify", "--man=no", str(copy)], capture_output=True, text=True,
                                check=False)
        assert result.returncode == 0 and not result.stderr.strip(), result.stderr


def test_every_doc_is_linked_from_the_index() -> None:
    index = (ROOT / "docs" / "README.md").read_text()
    linked = set(re.findall(r"\]\(([^)#]+\.md)", index))
    missing = [p.name for p in (ROOT / "docs").glob("*.md") if p.name != "README.md" and p.name not in linked]
    assert not missing, f"docs/README.md does not link {missing}"


def test_the_readme_links_the_index_and_operations() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "(docs/README.md)" in readme and "(docs/operations.md)" in readme


_COMMIT_HASH = re.compile(r"(?<!\w)(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}(?!\w)", re.IGNORECASE)


def test_benchmarks_page_holds_current_figures_only() -> None:
    """docs/benchmarks.md is what a user reads: the current figures, short; history lives in git."""
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    assert len(text.splitlines()) < 400
    hashes = sorted(set(_COMMIT_HASH.findall(text)))
    assert not hashes, f"docs/benchmarks.md names commit-hash-like tokens: {hashes}"
