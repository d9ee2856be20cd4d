"""``python -m fastopt``, the same as the ``fastopt`` command; see fastopt._cli."""
from ._cli import main

if __name__ == "__main__":
    raise SystemExit(main())
