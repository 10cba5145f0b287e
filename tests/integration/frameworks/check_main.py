"""The command line of the framework check scripts (jax_checks.py,
tensorflow_checks.py): which check to run against which daemon; the check's
result goes to OUT/result.json for the test to read."""

import argparse
import json
import os


def run(checks):
    """Parses the arguments, runs checks[name](args), writes its result."""
    ap = argparse.ArgumentParser()
    ap.add_argument("check", choices=sorted(checks))
    ap.add_argument("--server", required=True)
    ap.add_argument("--pipeline", default="train")
    ap.add_argument("--transport", default="auto")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    result = checks[args.check](args)
    with open(os.path.join(args.out, "result.json"), "w") as f:
        json.dump(result, f)
    return 0
