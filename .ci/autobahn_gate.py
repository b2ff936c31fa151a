#!/usr/bin/env python3
"""Gates an Autobahn|Testsuite run on its reports/<side>/index.json.

wstest exits 0 whatever the results, so CI reads the report instead. A case passes when its behaviour
is OK, NON-STRICT or INFORMATIONAL and its closing behaviour OK or INFORMATIONAL; UNIMPLEMENTED cases
(extensions we do not negotiate) are counted as skipped; anything else fails.

usage: autobahn_gate.py LABEL INDEX_JSON [--expect N]
prints every failed case, the counts per behaviour, then "autobahn LABEL: N passed, N failed, N skipped";
exits 1 if a case failed or the report holds fewer cases than expected.
"""

import json
import sys

PASSING = ("OK", "NON-STRICT", "INFORMATIONAL")
PASSING_CLOSE = ("OK", "INFORMATIONAL")


def case_key(case_id):
    return tuple(int(part) for part in case_id.split("."))


def main(argv):
    if len(argv) not in (3, 5) or (len(argv) == 5 and argv[3] != "--expect"):
        print(__doc__.strip().splitlines()[-3], file=sys.stderr)
        return 2
    label, path = argv[1], argv[2]
    expected = int(argv[4]) if len(argv) == 5 else 1
    try:
        with open(path) as handle:
            report = json.load(handle)
    except (OSError, ValueError) as error:
        print("autobahn %s: no report (%s)" % (label, error))
        report = {}
    passed = failed = skipped = 0
    behaviours = {}
    for agent in sorted(report):
        cases = report[agent]
        for case_id in sorted(cases, key=case_key):
            result = cases[case_id]
            behaviour, close = result["behavior"], result["behaviorClose"]
            behaviours[behaviour] = behaviours.get(behaviour, 0) + 1
            if behaviour == "UNIMPLEMENTED":
                skipped += 1
            elif behaviour in PASSING and close in PASSING_CLOSE:
                passed += 1
                if behaviour != "OK":
                    print("%s %s %s %s" % (behaviour, agent, case_id, close))
            else:
                failed += 1
                print("FAILED %s %s %s %s" % (agent, case_id, behaviour, close))
    total = passed + failed + skipped
    counts = ", ".join("%d %s" % (count, name) for name, count in sorted(behaviours.items()))
    print("autobahn %s cases: %d (%s)" % (label, total, counts or "none"))
    if total < expected:
        print("autobahn %s: expected at least %d cases, the report holds %d" % (label, expected, total))
        failed += expected - total
    print("autobahn %s: %d passed, %d failed, %d skipped" % (label, passed, failed, skipped))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
