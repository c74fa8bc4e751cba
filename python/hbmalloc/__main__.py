"""`python -m hbmalloc ARGS` and the `hbmalloc` console script: runs the C command-line tool shipped in the
package with the same arguments (it replaces this process: exit status, signals and the terminal are the tool's)."""
import os
import sys

from hbmalloc import cli_path


def main():
    exe = cli_path()
    if exe is None:
        sys.stderr.write("hbmalloc: the command-line tool is not in this package (%s); install the package with "
                         "pip, or build it with cmake\n" % os.path.dirname(os.path.abspath(__file__)))
        return 127
    os.execv(exe, ["hbmalloc"] + sys.argv[1:])
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main())
