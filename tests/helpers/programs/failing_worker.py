"""Test program: every rank raises, inside torch's @record (so it writes its error file)."""

from torch.distributed.elastic.multiprocessing.errors import record


@record
def main() -> None:
    raise ValueError("tjsc worker failed on purpose")


if __name__ == "__main__":
    main()
