"""`python -m rewind.worker ...`, the same as `rewind worker ...` and `python worker.py ...`."""

from rewind.worker.main import main

if __name__ == "__main__":  # not when a tool walks the package's modules
    main()
