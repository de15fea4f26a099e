"""The `attention-viewer` command (installed by `pip install .`).

    attention-viewer [--port 8000 ...]      start the app: every option goes to launch.py's parser
    attention-viewer caption photo.jpg ...  a command of `python -m viewer` (caption, models, train,
                                            average, evaluate, triage, bench, import, merge)

The rule: when the first argument (after the command line's own --device/--checkpoints, which
`python -m viewer` takes before its command) names a command, it is `python -m viewer`;
anything else starts the app.
"""
from __future__ import annotations

import sys

# The commands of `python -m viewer` (viewer/__main__.py; tests/test_packaging.py keeps the two in step).
SUBCOMMANDS = ("caption", "ask", "models", "train", "average", "evaluate", "triage", "bench", "import", "merge",
               "qa-data", "world-data", "world-eval")
GLOBAL_OPTIONS = ("--device", "--checkpoints")   # `python -m viewer --device cpu caption ...`


def is_command(argv: list[str]) -> bool:
    """Whether argv is for `python -m viewer`: a command name first, perhaps after its global options."""
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in GLOBAL_OPTIONS:
            i += 2
        elif arg.split("=", 1)[0] in GLOBAL_OPTIONS and "=" in arg:
            i += 1
        else:
            return arg in SUBCOMMANDS
    return False


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if is_command(argv):
        from . import __main__ as cli
        return cli.main(argv)
    if argv[:1] in (["-h"], ["--help"]):
        print("attention-viewer [OPTIONS]: start the app (options below)\n"
              f"attention-viewer {{{','.join(SUBCOMMANDS)}}} ...: as `python -m viewer`, "
              "e.g. `attention-viewer caption --help`\n")
    from . import app
    return app.main(argv, prog="attention-viewer")


if __name__ == "__main__":
    sys.exit(main())
