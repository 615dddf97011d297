#!/usr/bin/env python3
"""The test executables of one package that `cargo test --workspace --no-run --message-format=json` built:
`cargo test --workspace --no-run --message-format=json-render-diagnostics | test-executables.py PACKAGE [TARGET]`,
one path per line, and an error if there is none.

Why not `cargo test -p PACKAGE`: `-p` resolves the dependencies' features for that package alone, so cargo
compiles every dependency a second time (4.5 minutes of a cold CI run) to run binaries the workspace's build
already has.
"""
import json
import sys

if not 2 <= len(sys.argv) <= 3:
    sys.exit(__doc__)
package, target = sys.argv[1], sys.argv[2] if len(sys.argv) == 3 else None
found = []
for line in sys.stdin:
    message = json.loads(line)
    if (
        message.get("reason") == "compiler-artifact"
        and message.get("executable")
        and message["profile"]["test"]
        # A package ID is `path+file:///...#NAME@VERSION` (or `#VERSION` when the name is the folder's).
        and f"#{package}@" in message["package_id"]
        and target in (None, message["target"]["name"])
    ):
        found.append(message["executable"])
if not found:
    sys.exit(f"test-executables: cargo built no test binary{f' {target!r}' if target else ''} of {package}")
print("\n".join(found))
