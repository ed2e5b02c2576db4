"""Evaluation of demo-csv-totals: totals.json must match the ground truth to the cent.

Like many benchmark evaluators, it writes its own summary over the --res_log_file path.
"""

import json

from utils.task_script import Check, evaluation_args, load_answer, read_groundtruth, report_with_summary


def main():
    args = evaluation_args()
    expected = json.loads(read_groundtruth(args, "totals.json"))
    answer, error = load_answer(args, "totals.json", json.loads)
    if error is None:
        checks = [Check("totals.json is valid JSON", True)]
    else:
        checks = [Check("totals.json is valid JSON (%s)" % error, False)]
    if answer is not None:
        regions = answer.get("by_region") or {}
        for region, total in sorted(expected["by_region"].items()):
            got = regions.get(region)
            ok = isinstance(got, (int, float)) and abs(got - total) < 0.005
            checks.append(Check("region %s = %.2f (got %r)" % (region, total, got), ok, critical=False))
        extra = sorted(set(regions) - set(expected["by_region"]))
        checks.append(Check("no unknown regions %s" % extra, not extra, critical=False))
        got = answer.get("grand_total")
        ok = isinstance(got, (int, float)) and abs(got - expected["grand_total"]) < 0.005
        checks.append(Check("grand_total = %.2f (got %r)" % (expected["grand_total"], got), ok))
    report_with_summary(args.res_log_file, checks)


if __name__ == "__main__":
    main()
