"""``python -m fastopt {demo,bench,schedule,config} ...``; see fastopt._cli."""
from ._cli import main

if __name__ == "__main__":
    raise SystemExit(main())
