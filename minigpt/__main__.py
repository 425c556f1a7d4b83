"""`python -m minigpt` and the `minigpt` command: a Ctrl-C while torch is still importing (the first seconds of
any command) ends with one line and the shell's status for SIGINT, not a traceback from inside the import."""

import sys


def run() -> int:
    try:
        from minigpt.cli import main
    except KeyboardInterrupt:
        print("minigpt: interrupted while starting", file=sys.stderr)
        return 130
    return main()


if __name__ == "__main__":
    raise SystemExit(run())
