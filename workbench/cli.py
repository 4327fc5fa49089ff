"""Placeholder; replaced below."""


def main(argv=None):
    return 0
