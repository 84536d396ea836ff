"""`python -m rewind.cli ...`, the same as the `rewind` console script."""

from rewind.cli.main import main

if __name__ == "__main__":  # not when a tool walks the package's modules
    main()
