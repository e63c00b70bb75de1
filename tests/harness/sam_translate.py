"""Translates a SAM template to the CloudFormation that AWS would deploy, offline, with the SAM
translator itself (samtranslator.translator.transform.transform, the library behind SAM CLI and
the AWS::Serverless transform).

Usage: python sam_translate.py TEMPLATE [PARAMETERS_JSON]  ->  CloudFormation JSON on stdout.

Offline on purpose: region and credentials are fixed fakes (the translator only reads the
region, for the partition), and managed policies are never looked up through IAM (the template
names none; a name would fail the translation, which is the right outcome for a test). Local
CodeUri values are replaced by an S3 location, as `sam package` / `sam deploy` do before the
transform runs.
"""

import json
import os
import sys

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")

from samtranslator.translator.transform import transform  # noqa: E402
from samtranslator.yaml_helper import yaml_parse  # noqa: E402


class NoManagedPolicies:
    """The managed-policy map the translator would fetch from IAM: empty, offline."""

    def load(self):
        return {}


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as f:
        template = yaml_parse(f.read())
    parameters = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    for logical_id, resource in template.get("Resources", {}).items():
        if resource.get("Type") != "AWS::Serverless::Function":
            continue
        props = resource.setdefault("Properties", {})
        code = props.get("CodeUri")
        if isinstance(code, str) and not code.startswith("s3://"):
            props["CodeUri"] = f"s3://tocsin-artifacts/{logical_id}.zip"
    translated = transform(template, parameters, NoManagedPolicies())
    json.dump(translated, sys.stdout, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
