"""What a person at a terminal sees: no message is ever drawn into a progress bar's line, and a run
refused at set-up draws no bar at all. The commands run on a pseudo-terminal (tqdm then draws as it
does for a person) and the screen is rebuilt from the bytes, carriage returns and cursor moves included."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BAR = re.compile(r"\d+%\||\|\s*\d+(\.\d+)?k?/\d+|\[\d\d:\d\d<|\?\w+/s\]|\d\w*/s\]")
MESSAGE = re.compile(r"info string|warning:|error:|wrote |batch size|training on|hcpe3 cache")
TIMEOUT_S = 240
COLUMNS = 120


def run_on_pty(argv: list[str], cwd: Path) -> tuple[int, str]:
    """Run argv with stdout and stderr on one pseudo-terminal; its exit status and everything it drew."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, COLUMNS, 0, 0))  # tqdm sizes bars by it
    proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave)
    os.close(slave)
    chunks, deadline = [], time.monotonic() + TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        else:
            proc.kill()
            pytest.fail(f"{' '.join(argv)} did not finish in {TIMEOUT_S} s")
    finally:
        os.close(master)
    return proc.wait(30), b"".join(chunks).decode("utf-8", "replace")


def screen(output: str) -> list[str]:
    """The rows a terminal shows after drawing `output` (CR, LF, cursor up/down, erase to end of line)."""
    rows: list[list[str]] = [[]]
    row = col = 0
    i = 0
    while i < len(output):
        escape = re.match(r"\x1b\[(\d*)([A-Za-z])", output[i:])
        if escape:
            n, code = int(escape.group(1) or 1), escape.group(2)
            if code == "A":
                row = max(0, row - n)
            elif code == "B":
                row += n
            elif code == "K":
                del rows[row][col:]
            i += escape.end()
            rows.extend([] for _ in range(row + 1 - len(rows)))
            continue
        ch = output[i]
        i += 1
        if ch == "\r":
            col = 0
        elif ch == "\n":
            row, col = row + 1, 0
            rows.extend([] for _ in range(row + 1 - len(rows)))
        else:
            line = rows[row]
            line.extend(" " for _ in range(col + 1 - len(line)))
            line[col] = ch
            col += 1
    return ["".join(r).rstrip() for r in rows]


def mixed_rows(output: str) -> list[str]:
    """Rows where a bar and a message share the screen line, seen either on the final screen or in any
    single write between two line ends (a message glued to a bar that a later redraw hides counts too)."""
    rows = screen(output)
    for line in output.split("\n"):
        rows += [part for part in line.split("\r") if part.strip()]
    return [r for r in rows if BAR.search(r) and MESSAGE.search(r)]


def test_screen_rebuilds_carriage_returns_and_cursor_moves():
    assert screen("abc\rX\n") == ["Xbc", ""]
    assert screen("one\ntwo\x1b[A\rON") == ["ONe", "two"]
    assert mixed_rows(" 0%|          | 0/8 [00:00<?, ?game/s]info string backend onnx\n") != []
    assert mixed_rows(" 0%|          | 0/8 [00:00<?, ?game/s]\r" + " " * 60 + "\rinfo string x\n") == []


@pytest.fixture(scope="module")
def csa_with_damage(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("csa")
    (folder / "good.csa").write_text((REPO / "tests" / "data" / "csa" / "two_games.csa").read_text())
    (folder / "bad.csa").write_text("V2.2\nPI\n+\n+7776FU\n-3334FU\n+7776FU\n")  # an illegal third move
    return folder


def test_convert_warning_is_not_drawn_into_the_bar(csa_with_damage: Path, tmp_path: Path):
    cmd = [str(REPO / "bin" / "convert"), "csa-to-hcpe", str(csa_with_damage), "-o", str(tmp_path / "o.hcpe")]
    rc, out = run_on_pty(cmd, tmp_path)
    assert rc == 0, out
    assert "warning:" in out and BAR.search(out), out
    assert mixed_rows(out) == [], out


def test_selfplay_info_lines_are_not_drawn_into_the_bar(tmp_path: Path):
    cmd = [str(REPO / "bin" / "selfplay"), "--out", str(tmp_path / "sp"), "--games", "2", "--parallel", "2"]
    rc, out = run_on_pty([*cmd, "--sims", "8", "--max-moves", "6", "--threads", "1"], tmp_path)
    assert rc == 0, out
    assert "info string backend" in out and BAR.search(out), out
    assert mixed_rows(out) == [], out


@pytest.mark.parametrize("processes", ["1", "2"])
def test_selfplay_refused_at_set_up_draws_no_bar(tmp_path: Path, processes: str):
    """A model that is no model: one error line, no bar drawn first, no output folder left."""
    cmd = [str(REPO / "bin" / "selfplay"), "--model", str(REPO / "README.md"), "--out", str(tmp_path / "sp")]
    rc, out = run_on_pty([*cmd, "--games", "4", "--processes", processes], tmp_path)
    assert rc == 2, out
    assert "selfplay: error: " in out and "README.md" in out, out
    assert not BAR.search(out), out
    assert not (tmp_path / "sp").exists()


def test_training_log_lines_are_not_drawn_into_the_bar(tmp_path: Path):
    from train.data import synthetic

    synthetic.write_hcpe(tmp_path / "t.hcpe", 300, seed=1)
    synthetic.write_hcpe(tmp_path / "h.hcpe", 100, seed=2)
    cmd = [sys.executable, str(REPO / "bin" / "train"), "--data", str(tmp_path / "t.hcpe"), "--test"]
    cmd += [str(tmp_path / "h.hcpe"), "--out", str(tmp_path / "run"), "--network", "tiny", "--workers", "0"]
    rc, out = run_on_pty([*cmd, "--eval-interval", "2", "--log-interval", "1", "--device", "cpu"], tmp_path)
    assert rc == 0, out
    assert "test policy acc" in out and BAR.search(out), out
    assert mixed_rows(out) == [], out
