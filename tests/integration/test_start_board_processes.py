"""The start board across real processes: a count one process writes is read by another through the
shared memory, and lingers only for the hop."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from libs.scheduling.starts import LINGER_S, StartBoard


def test_another_process_count_is_read_through_shared_memory(tmp_path: Path) -> None:
    clock = time.monotonic
    board = StartBoard(tmp_path, "vocoder", clock=clock)
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from libs.scheduling.starts import StartBoard\n"
        "board = StartBoard(Path(sys.argv[1]), 'acoustic')\n"
        "board.under_way(2)\n"
        "print('ready', flush=True)\n"
        "sys.stdin.readline()\n"
        "board.under_way(0)\n"
        "print('done', flush=True)\n"
        "sys.stdin.readline()\n"
        "board.close()\n"
    )
    other = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[2]
    )
    try:
        assert other.stdout is not None and other.stdin is not None
        assert other.stdout.readline().strip() == "ready"
        assert board.under_way_all() == 2
        other.stdin.write("\n")
        other.stdin.flush()
        assert other.stdout.readline().strip() == "done"
        deadline = time.monotonic() + 5.0
        while board.under_way_all() and time.monotonic() < deadline:  # the linger runs out
            time.sleep(LINGER_S / 4)
        assert board.under_way_all() == 0
        other.stdin.write("\n")
        other.stdin.flush()
        assert other.wait(10) == 0
    finally:
        other.kill()
        board.close()
