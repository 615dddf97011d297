#!/usr/bin/env python3
"""Summary table (case, result, duration) of a JUnit report, as Markdown: `e2e-summary.py junit.xml`."""
import sys
import xml.etree.ElementTree as ET


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    root = ET.parse(sys.argv[1]).getroot()
    rows, total, failed = [], 0.0, 0
    for case in root.iter("testcase"):
        seconds = float(case.get("time", "0"))
        total += seconds
        if case.find("failure") is not None or case.find("error") is not None:
            result, failed = "FAILED", failed + 1
        elif case.find("skipped") is not None:
            result = "skipped"
        else:
            result = "passed"
        suite = case.get("classname", "").split("::")[-1]
        rows.append((f"{suite}::{case.get('name')}", result, seconds))
    print("| case | result | duration |")
    print("|---|---|---:|")
    for name, result, seconds in rows:
        print(f"| `{name}` | {result} | {seconds:.1f} s |")
    print(f"\n{len(rows)} cases, {failed} failed, {total:.0f} s in all.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
