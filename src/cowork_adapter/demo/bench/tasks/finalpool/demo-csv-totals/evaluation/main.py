"""Evaluation of demo-csv-totals: totals.json must match the ground truth to the cent.

Like many benchmark evaluators, it writes its own summary over the --res_log_file path.
"""

import argparse
import json
import os
import sys


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--res_log_file", required=True)
    parser.add_argument("--agent_workspace", required=True)
    parser.add_argument("--groundtruth_workspace", required=True)
    parser.add_argument("--launch_time", required=False, default="")
    return parser.parse_args()


def main():
    args = parse_args()
    with open(os.path.join(args.groundtruth_workspace, "totals.json")) as fh:
        expected = json.load(fh)
    checks = []  # (name, passed, critical)
    answer = None
    try:
        with open(os.path.join(args.agent_workspace, "totals.json")) as fh:
            answer = json.load(fh)
        checks.append(("totals.json is valid JSON", True, True))
    except (OSError, ValueError) as exc:
        checks.append(("totals.json is valid JSON (%s)" % exc, False, True))
    if answer is not None:
        regions = answer.get("by_region") or {}
        for region, total in sorted(expected["by_region"].items()):
            got = regions.get(region)
            ok = isinstance(got, (int, float)) and abs(got - total) < 0.005
            checks.append(("region %s = %.2f (got %r)" % (region, total, got), ok, False))
        extra = sorted(set(regions) - set(expected["by_region"]))
        checks.append(("no unknown regions %s" % extra, not extra, False))
        got = answer.get("grand_total")
        ok = isinstance(got, (int, float)) and abs(got - expected["grand_total"]) < 0.005
        checks.append(("grand_total = %.2f (got %r)" % (expected["grand_total"], got), ok, True))
    for name, passed, _critical in checks:
        print("[PASS] %s" % name if passed else "[FAIL] %s" % name)
    passed = sum(1 for _, ok, _ in checks if ok)
    critical_failed = [name for name, ok, critical in checks if critical and not ok]
    accuracy = 100.0 * passed / len(checks)
    with open(args.res_log_file, "w") as fh:
        json.dump({"total_passed": passed, "total_checks": len(checks), "accuracy": accuracy,
                   "critical_failed": critical_failed}, fh, indent=2)
    success = not critical_failed and passed == len(checks)
    print("result: %s (%d/%d checks)" % ("success" if success else "failure", passed, len(checks)))
    sys.exit(0 if success else 1)


if __name__ == "__main__":
    main()
