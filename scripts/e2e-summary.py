#!/usr/bin/env python3
"""Summary table (case, result, duration) of a JUnit report, as Markdown: `e2e-summary.py junit.xml`.

A case that passed without running (libtest has no "skipped": the suite prints `skipping <case>: <why>` and
returns) is marked skipped in the report itself too, with the reason, so CI systems show it as skipped.
"""
import sys
import xml.etree.ElementTree as ET

SKIP_MARK = "skipping "


def skip_reason(case: ET.Element):
    for stream in ("system-out", "system-err"):
        node = case.find(stream)
        for line in (node.text or "").splitlines() if node is not None else []:
            if line.startswith(SKIP_MARK):
                return line[len(SKIP_MARK):]
    return None


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    path = sys.argv[1]
    tree = ET.parse(path)
    rows, total, failed, skipped = [], 0.0, 0, 0
    for suite in tree.getroot().iter("testsuite"):
        for case in suite.iter("testcase"):
            seconds = float(case.get("time", "0"))
            total += seconds
            if case.find("failure") is not None or case.find("error") is not None:
                result, failed = "FAILED", failed + 1
            elif case.find("skipped") is not None:
                result, skipped = "skipped", skipped + 1
            elif (why := skip_reason(case)) is not None:
                ET.SubElement(case, "skipped", message=why)
                suite.set("skipped", str(int(suite.get("skipped", "0")) + 1))
                result, skipped = f"skipped: {why}", skipped + 1
            else:
                result = "passed"
            # One test binary per crate: a case's name already says its module (`conformance_nodes::...`).
            name = case.get("name", "")
            if "::" not in name:
                name = f"{case.get('classname', '').split('::')[-1]}::{name}"
            rows.append((name, result, seconds))
    tree.write(path, encoding="utf-8", xml_declaration=True)
    print("| case | result | duration |")
    print("|---|---|---:|")
    for name, result, seconds in rows:
        print(f"| `{name}` | {result} | {seconds:.1f} s |")
    print(f"\n{len(rows)} cases, {failed} failed, {skipped} skipped, {total:.0f} s in all.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
