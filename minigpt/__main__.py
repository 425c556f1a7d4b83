"""`python -m minigpt` and the `minigpt` command: a Ctrl-C while torch is still importing (the first seconds of
any command) ends with one line and the shell's status for SIGINT, not a traceback from inside the import."""

import os
import signal
import sys


def _interrupted_while_importing(signum: int, frame: object) -> None:
    # No KeyboardInterrupt: raised inside importlib's own machinery it can only be printed ("Exception ignored
    # in ... _get_module_lock"), never caught. One line, and out with the shell's status for Ctrl-C.
    print("minigpt: interrupted while starting", file=sys.stderr, flush=True)
    os._exit(130)


def run() -> int:
    signal.signal(signal.SIGINT, _interrupted_while_importing)
    try:
        from minigpt.cli import main
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)  # from here on, Ctrl-C is KeyboardInterrupt
    try:
        return main()  # a command's own work says its interruption itself (minigpt.cli._run)
    except KeyboardInterrupt:  # main's own start (its parser, its lazy imports)
        print("minigpt: interrupted while starting", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(run())
