"""The commands of `rewind`, one module per group; rewind/cli/main.py builds the
parser from each group's `register` and runs the chosen command."""
