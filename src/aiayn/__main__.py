import sys

from aiayn.cli import main

if __name__ == "__main__":  # not when a spawned worker process imports it (aiayn paper table3 --jobs)
    sys.exit(main())
