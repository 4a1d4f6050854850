"""The command lines' argument parser: argparse, but a mistake costs one line, not the whole usage."""
import argparse


class Parser(argparse.ArgumentParser):
    def __init__(self, prog, description, **kwargs):
        super().__init__(prog=prog, description=description,
                         formatter_class=argparse.ArgumentDefaultsHelpFormatter, **kwargs)

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")
