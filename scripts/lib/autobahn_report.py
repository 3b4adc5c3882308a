#!/usr/bin/env python3
"""Reads an Autobahn fuzzingclient report (index.json) and says whether the server passed.

    autobahn_report.py REPORT_DIR/index.json

A case passes when its behavior is OK, NON-STRICT or INFORMATIONAL and its closing behavior OK or
INFORMATIONAL; UNIMPLEMENTED (permessage-deflate cases when it was not negotiated) is skipped.
Prints each failed case and 'N passed, N failed, N skipped'; exit 1 on any failure, or when no
case ran at all (wstest writes an empty report when it cannot reach the server)."""
import collections
import json
import sys

PASSING = {"OK", "NON-STRICT", "INFORMATIONAL"}
PASSING_CLOSE = {"OK", "INFORMATIONAL"}


def case_key(case_id):
    return [int(part) for part in case_id.split(".")]


def main(path):
    with open(path) as f:
        report = json.load(f)
    counts = collections.Counter()
    for agent, cases in report.items():
        behaviors = collections.Counter(c["behavior"] for c in cases.values())
        print(f"agent {agent}: {len(cases)} cases; behavior: {dict(behaviors)}")
        for case_id in sorted(cases, key=case_key):
            c = cases[case_id]
            if c["behavior"] == "UNIMPLEMENTED":
                counts["skipped"] += 1
            elif c["behavior"] in PASSING and c["behaviorClose"] in PASSING_CLOSE:
                counts["passed"] += 1
            else:
                counts["failed"] += 1
                print(f"  FAIL {case_id}: behavior={c['behavior']} close={c['behaviorClose']} "
                      f"code={c.get('remoteCloseCode')} ({c['reportfile']})")
    if sum(counts.values()) == 0:
        print("no Autobahn case ran (was the server reachable?)")
        counts["failed"] = 1
    print(f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
