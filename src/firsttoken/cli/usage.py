"""An argument parser whose usage errors are one line: the usage block is what ``--help`` is for."""

from __future__ import annotations

import argparse
from typing import NoReturn


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        hint = f" (see {self.prog} --help)" if message.startswith("unrecognized arguments") else ""
        self.exit(2, f"{self.prog}: error: {message}{hint}\n")
