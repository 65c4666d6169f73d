"""bin/ commands start as a GUI or a shell starts them: the file itself, a minimal environment, any cwd.

A GUI runs `bin/usi_engine` with its own environment, where the python on PATH may lack the project's
packages; the first line of every bin/ file hands it to bin/_launch, which picks the project's Python.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BIN = REPO / "bin"
LAUNCHER = BIN / "_launch"
COMMANDS = sorted(p.name for p in BIN.iterdir() if not p.name.startswith("_") and p.suffix != ".bat")
ENGINES = ("greedy_usi", "usi_engine")
TIMEOUT = 120  # a hang fails the test; startup imports torch, slow on a loaded machine
# The README's set-up makes REPO/.venv, and the launcher must find it unaided. Where the tests run
# under another environment (no .venv), that interpreter is named explicitly instead.
PICK = {} if (REPO / ".venv" / "bin" / "python").exists() else {"GUMBEL_SHOGI_PYTHON": sys.executable}


def minimal_env(home: Path, **extra: str) -> dict[str, str]:
    """What `env -i PATH=/usr/bin:/bin` leaves: no venv, no PYTHONPATH, the system python first."""
    return {"PATH": "/usr/bin:/bin", "HOME": str(home), **extra}


def start(argv: list[str], cwd: Path, env: dict[str, str], stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run(
        argv, input=stdin, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT
    )


def test_every_command_is_found():
    assert set(ENGINES) < set(COMMANDS) and {"convert", "loop", "match", "selfplay", "train"} <= set(COMMANDS)


@pytest.mark.parametrize("name", COMMANDS)
def test_commands_are_still_python_files(name):
    """`python bin/train ...` and torchrun run the files as Python: the first line is only a comment there."""
    path = BIN / name
    compile(path.read_text(), str(path), "exec")
    assert os.access(path, os.X_OK)


@pytest.mark.parametrize("name", ENGINES)
def test_engines_answer_usi_when_started_directly(name, tmp_path):
    out = start([str(BIN / name)], tmp_path, minimal_env(tmp_path, **PICK), "usi\nquit\n")
    assert out.returncode == 0, out.stderr
    assert "usiok" in out.stdout.splitlines(), out.stdout + out.stderr


@pytest.mark.parametrize("name", COMMANDS)
def test_commands_print_help_when_started_directly(name, tmp_path):
    out = start([str(BIN / name), "--help"], tmp_path, minimal_env(tmp_path, **PICK))
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"usage: {name}"), out.stdout


# Commands that parse their flags before the heavy imports, so that --help and a mistyped flag answer at
# once; and the modules that take seconds to import. The probe runs a bin/ file as `python FILE ARG...`
# does, then names the heavy modules it imported, on the last line of stderr.
QUICK = (
    "convert",
    "corpus",
    "distill",
    "greedy_usi",
    "loop",
    "match",
    "rescore",
    "selfplay",
    "teacher_usi",
    "train",
    "usi_engine",
)
HEAVY = ("torch", "matplotlib", "onnxruntime", "numba", "ray")
IMPORTS_PROBE = f"""
import runpy, sys
sys.argv = sys.argv[1:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
finally:
    print("heavy:", *[m for m in {HEAVY!r} if m in sys.modules], file=sys.stderr)
"""


@pytest.mark.parametrize(
    ("args", "status"), [(["--help"], 0), (["--no-such-flag"], 2)], ids=["help", "bad-flag"]
)
@pytest.mark.parametrize("name", QUICK)
def test_help_and_flag_errors_come_before_the_heavy_imports(name, args, status, tmp_path):
    argv = [sys.executable, "-c", IMPORTS_PROBE, str(BIN / name), *args]
    out = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT)
    assert out.returncode == status, out.stderr
    assert out.stderr.splitlines()[-1] == "heavy:", out.stderr


def test_a_symlink_to_an_engine_works_from_anywhere(tmp_path):
    """A user may link bin/greedy_usi into ~/bin; the project is found through the link."""
    link = tmp_path / "links" / "greedy"
    link.parent.mkdir()
    link.symlink_to(BIN / "greedy_usi")
    out = start([str(link)], tmp_path, minimal_env(tmp_path, **PICK), "usi\nquit\n")
    assert "usiok" in out.stdout.splitlines(), out.stderr


# ----- the launcher's choice, in a fake project layout -----


@pytest.fixture
def project(tmp_path):
    """tmp/project/bin with the real launcher and a `probe` command (the real first line) that prints
    the tag of the interpreter that ran it (see tagged_python)."""
    root = tmp_path / "project"
    (root / "bin").mkdir(parents=True)
    shutil.copy(LAUNCHER, root / "bin" / "_launch")
    first_line = (BIN / "usi_engine").read_text().splitlines()[0]
    for name in ("probe", "usi_engine"):  # usi_engine: the launcher also tells a GUI what is wrong
        probe = root / "bin" / name
        probe.write_text(f"{first_line}\nimport os\nprint(os.environ.get('PICKED'))\n")
        probe.chmod(0o755)
    return root


def tagged_python(folder: Path, name: str, tag: str) -> Path:
    """An interpreter (sys.executable, which has the project's packages) that tells which one ran."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(f'#!/bin/sh\nPICKED={tag} exec "{sys.executable}" "$@"\n')
    path.chmod(0o755)
    return path


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory) -> Path:
    """A real Python without the project's packages (like a system python3)."""
    venv = tmp_path_factory.mktemp("bare")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=TIMEOUT)
    return venv / "bin" / "python"


def test_launcher_prefers_gumbel_shogi_python_then_the_venv_then_python3(project, tmp_path):
    probe = str(project / "bin" / "probe")
    on_path = tagged_python(tmp_path / "path", "python3", "path")
    env = minimal_env(tmp_path, PATH=f"{on_path.parent}:/usr/bin:/bin")
    assert start([probe], tmp_path, env).stdout == "path\n"  # no venv: python3, as it has the packages
    tagged_python(project / ".venv" / "bin", "python", "venv")
    assert start([probe], tmp_path, env).stdout == "venv\n"
    named = tagged_python(tmp_path / "named", "py", "named")
    assert start([probe], tmp_path, {**env, "GUMBEL_SHOGI_PYTHON": str(named)}).stdout == "named\n"
    link = tmp_path / "elsewhere" / "probe"  # the venv is found through a symlinked command
    link.parent.mkdir()
    link.symlink_to(probe)
    assert start([str(link), "arg"], tmp_path, env).stdout == "venv\n"


def shell_tools(folder: Path) -> Path:
    """A PATH folder with only what the launcher itself needs: no python3 unless one is added."""
    folder.mkdir()
    for tool in ("sh", "dirname", "basename", "readlink"):
        (folder / tool).symlink_to(shutil.which(tool))
    return folder


def test_launcher_without_a_usable_python_says_so_in_one_line(project, tmp_path, bare_python):
    probe = str(project / "bin" / "probe")
    tools = shell_tools(tmp_path / "tools")
    (tools / "python3").symlink_to(bare_python)
    env = minimal_env(tmp_path, PATH=str(tools))
    for extra, words in (
        ({}, "no Python with the project's packages"),
        ({"GUMBEL_SHOGI_PYTHON": str(bare_python)}, f"GUMBEL_SHOGI_PYTHON={bare_python} is not a Python"),
        ({"GUMBEL_SHOGI_PYTHON": str(tmp_path / "missing")}, "GUMBEL_SHOGI_PYTHON="),
    ):
        out = start([probe], tmp_path, {**env, **extra})
        assert out.returncode == 2 and out.stdout == ""
        assert len(out.stderr.splitlines()) == 1 and out.stderr.startswith(f"probe: error: {words}"), (
            out.stderr
        )
    # a GUI shows the engine's output, not always its stderr: the reason is there too
    out = start([str(project / "bin" / "usi_engine")], tmp_path, env)
    assert out.returncode == 2
    assert out.stdout.startswith("info string error: usi_engine: no Python with the project's packages")


def test_launcher_passes_over_a_venv_without_the_packages(project, tmp_path, bare_python):
    (project / ".venv" / "bin").mkdir(parents=True)
    (project / ".venv" / "bin" / "python").symlink_to(bare_python)
    on_path = tagged_python(tmp_path / "path", "python3", "path")
    env = minimal_env(tmp_path, PATH=f"{on_path.parent}:/usr/bin:/bin")
    assert start([str(project / "bin" / "probe")], tmp_path, env).stdout == "path\n"
