#!/usr/bin/env python3
"""The focused specs of a ginkgo JUnit report (upstream's e2e.test), as a Markdown table and a count:
`e2e-lb-summary.py junit.xml FOCUS SKIP summary.md` (scripts/e2e-kind-lb.sh). The report lists every spec in
the suite, those the focus left out as skipped too: the summary keeps the focused ones and tells a spec's own
skip (it says why) from the skip list's. Exits 1 when no spec matched the focus.
"""
import re, sys, xml.etree.ElementTree as ET
junit, focus, skip, out = sys.argv[1:5]
focus_re, skip_re = re.compile(focus), (re.compile(skip) if skip else None)
rows, counts, total = [], {"passed": 0, "failed": 0, "skipped": 0}, 0.0
for case in ET.parse(junit).getroot().iter("testcase"):
    name = case.get("name", "")
    if not focus_re.search(name):
        continue
    name = re.sub(r"^\[It\] ", "", name)
    secs = float(case.get("time", "0"))
    total += secs
    failure = case.find("failure")
    if failure is None:
        failure = case.find("error")
    skipped = case.find("skipped")
    if failure is not None:
        text = (failure.get("message") or failure.text or "").strip()
        # The first lines of the failure: ginkgo's summary of where and what.
        lines = [l.strip() for l in text.splitlines() if l.strip()][:4]
        result, why = "FAILED", " / ".join(lines)[:400]
        counts["failed"] += 1
    elif skipped is not None:
        msg = skipped.get("message", "")
        if skip_re and skip_re.search(name) and msg == "skipped":
            why = "skip list (E2E_LB_SKIP / skips in e2e-kind-lb.sh)"
        else:
            why = re.sub(r"^skipped( - )?", "", msg) or "skipped"
        result = "skipped"
        counts["skipped"] += 1
    else:
        result, why = "passed", ""
        counts["passed"] += 1
    rows.append((result, secs, name, why))
with open(out, "w") as f:
    f.write("| result | seconds | spec | why |\n| --- | ---: | --- | --- |\n")
    for result, secs, name, why in rows:
        f.write(f"| {result} | {secs:.0f} | {name} | {why.replace('|', '/')} |\n")
for result, secs, name, why in rows:
    print(f"{result:8} {secs:6.0f}s  {name}" + (f"\n                   {why}" if why else ""))
print(f"spec time {total:.0f}s; table in {out}")
print(f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
if not rows:
    print("error: no spec matched the focus", file=sys.stderr)
    sys.exit(1)
