#!/usr/bin/env python3
"""Merge the JUnit reports of scripts/schemathesis.sh's passes into one, and end with "N passed, N failed".

Usage: schemathesis-report.py REPORT_DIR SECONDS OUTPUT... (the passes' printed output, for the case counts).
A test case in the report is an operation, or the stateful scenarios, each with all its generated cases.
Exits 1 if any failed or a pass wrote no report.
"""
import re
import sys
import xml.etree.ElementTree as ET

PASSES = ("resources", "faults")


def main() -> int:
    report, elapsed, outputs = sys.argv[1], sys.argv[2], sys.argv[3:]
    merged = ET.Element("testsuites")
    passed = failed = 0
    for name in PASSES:
        try:
            root = ET.parse(f"{report}/junit-{name}.xml").getroot()
        except (OSError, ET.ParseError) as e:
            print(f"no JUnit report from the {name} pass: {e}", file=sys.stderr)
            failed += 1
            continue
        for suite in root.iter("testsuite"):
            suite.set("name", f"schemathesis-{name}")
            merged.append(suite)
            for case in suite.iter("testcase"):
                if case.find("failure") is not None or case.find("error") is not None:
                    failed += 1
                elif case.find("skipped") is None:
                    passed += 1
    merged.set("tests", str(passed + failed))
    merged.set("failures", str(failed))
    ET.ElementTree(merged).write(f"{report}/junit.xml", encoding="utf-8", xml_declaration=True)
    cases = 0
    for out in outputs:
        with open(out, encoding="utf-8", errors="replace") as f:
            counts = re.findall(r"^\s*(\d+) generated", f.read(), re.M)
        cases += int(counts[-1]) if counts else 0
    print(f"\nschemathesis: {cases} generated cases in {elapsed} s; report {report}/junit.xml")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
