"""Where tests/helpers/programs/hang_ranks.py's ranks stay, read from the file (the reports
name file:line, and the program may change)."""

from pathlib import Path

PROGRAM = Path(__file__).resolve().parent / "programs" / "hang_ranks.py"
_LINES = PROGRAM.read_text().splitlines()

# the stuck rank, in load_batch
STUCK = "hang_ranks.py:%d" % (1 + next(i for i, line in enumerate(_LINES)
                                       if "time.sleep(600)" in line))
# the others, in the second all_reduce
WAITING = "hang_ranks.py:%d" % (1 + max(i for i, line in enumerate(_LINES)
                                        if line.strip() == "dist.all_reduce(t)"))
