"""Runs in the moto virtual environment (scripts/venvs/moto.txt): starts
moto's S3 server on 127.0.0.1 (a free port) with IAM authentication on,
creates a user with an access key allowed s3:*, a bucket, and uploads the
files named on stdin's first line (JSON: {"bucket": B, "objects":
{key: local_path}}). Prints one JSON line {"port", "key_id", "secret"},
then serves until stdin closes."""

import json
import os
import sys

# Every request after these (the IAM setup) must be signed by a known key.
os.environ["INITIAL_NO_AUTH_ACTION_COUNT"] = "3"
os.environ.setdefault("AWS_ACCESS_KEY_ID", "setup")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "setup")

import boto3  # noqa: E402
from moto.server import ThreadedMotoServer  # noqa: E402


def main():
    spec = json.loads(sys.stdin.readline())
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = "http://127.0.0.1:%d" % port
    iam = boto3.client("iam", endpoint_url=endpoint, region_name="us-east-1")
    iam.create_user(UserName="trainer")
    key = iam.create_access_key(UserName="trainer")["AccessKey"]
    iam.put_user_policy(UserName="trainer", PolicyName="s3", PolicyDocument=json.dumps({
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                      aws_access_key_id=key["AccessKeyId"],
                      aws_secret_access_key=key["SecretAccessKey"])
    s3.create_bucket(Bucket=spec["bucket"])
    for k, path in spec["objects"].items():
        with open(path, "rb") as f:
            s3.put_object(Bucket=spec["bucket"], Key=k, Body=f.read())
    print(json.dumps({"port": port, "key_id": key["AccessKeyId"],
                      "secret": key["SecretAccessKey"]}), flush=True)
    sys.stdin.read()  # until the test closes it
    server.stop()


if __name__ == "__main__":
    main()
