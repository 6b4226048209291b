"""Fail when site-packages holds a .pth file we did not expect (a compromised wheel's foothold)."""

import pathlib
import site
import sys

ALLOWED = {"distutils-precedence.pth"}


def main() -> int:
    bad = []
    for directory in site.getsitepackages():
        for path in pathlib.Path(directory).glob("*.pth"):
            editable = path.name.startswith("__editable__") and "think_actors" in path.name
            if path.name not in ALLOWED and not editable:
                bad.append(str(path))
    if bad:
        print("unexpected .pth files in site-packages:", *bad, sep="\n  ", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
