#!/usr/bin/env python3
"""What failed or flaked in a CI run, in a few lines: `ci-failures.py LOG... [--junit REPORT...]`.

CI keeps only the end of its output, and the end is whichever half finished last; a failing case of the other
half is thousands of lines up. This prints, for each log, the cases libtest or nextest reported failed, with the
panic that failed them, and `make`'s own errors; for each JUnit report, its failed cases with the first lines of
the failure, and the cases that passed only on a retry (nextest's flaky ones), with their first failure. Prints
nothing when nothing failed or flaked. .ci/run calls it last.
"""
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

# A half's lines carry its name in brackets ("[test] ..."), sometimes a cluster's too.
PREFIX = re.compile(r"^(\[[^\]]+\](?: |$))+")
FAILED_CASE = re.compile(r"^test (\S+) \.\.\. FAILED$|^\s*(?:FAIL|TIMEOUT|FLAKY [\d/]+) \[\s*[\d.]+s\] (.+)$")
PANIC = re.compile(r"panicked at ")
MAKE_ERROR = re.compile(r"^make(\[\d+\])?: \*\*\* ")
CONTEXT_LINES = 3


def from_log(path: Path) -> list:
    lines = [PREFIX.sub("", line.rstrip("\n")) for line in path.open(errors="replace")]
    found, seen = [], set()
    # Panics are printed only beside a failure: passing cases may panic on purpose, in threads they expect to.
    failed = any(FAILED_CASE.search(line) or MAKE_ERROR.search(line) for line in lines)
    for i, line in enumerate(lines):
        if FAILED_CASE.search(line) or MAKE_ERROR.search(line):
            item = line.strip()
        elif failed and PANIC.search(line):
            # The panic's message follows its location.
            item = " / ".join(part.strip() for part in lines[i : i + CONTEXT_LINES] if part.strip())[:600]
        else:
            continue
        if item not in seen:
            seen.add(item)
            found.append(item)
    return found


def from_junit(path: Path) -> list:
    found = []
    for case in ET.parse(path).getroot().iter("testcase"):
        for tag, what in (("failure", "failed"), ("error", "failed"), ("flakyFailure", "flaky, passed on a retry")):
            failure = case.find(tag)
            if failure is None:
                continue
            text = (failure.get("message") or failure.text or "").strip()
            # nextest keeps a failed try's output beside its message.
            if not text and (out := failure.find("system-out")) is not None:
                text = (out.text or "").strip()[-600:]
            first = " / ".join(line.strip() for line in text.splitlines() if line.strip())[:600]
            found.append(f"{case.get('name', '?')} ({what}): {first}")
            break
    return found


def main(argv: list) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__, file=sys.stderr)
        return 2
    logs, reports = argv, []
    if "--junit" in argv:
        at = argv.index("--junit")
        logs, reports = argv[:at], argv[at + 1 :]
    for kind, paths, read in (("log", logs, from_log), ("report", reports, from_junit)):
        for name in paths:
            path = Path(name)
            if not path.is_file():
                continue
            try:
                found = read(path)
            except (OSError, ET.ParseError) as e:
                print(f"{kind} {path}: cannot read it: {e}")
                continue
            if found:
                print(f"what failed or flaked, from {kind} {path}:")
                for item in found:
                    print(f"  {item}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
