"""`python -m proxy.cli`: the `deja` command."""

from proxy.cli import main

# Guarded: the model workers are spawned processes, which import the main module again.
if __name__ == "__main__":
    raise SystemExit(main())
