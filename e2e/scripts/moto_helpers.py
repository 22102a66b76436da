#!/usr/bin/env python3
"""Seed and inspect the test-ground moto server (ECR, SQS, EventBridge).

Run with the moto venv's python, e.g. `e2e/scripts/moto.sh helpers CMD ...`.
Endpoint: --endpoint or $IMAGEWATCH_MOTO_URL. Region: --region or
$AWS_REGION or us-east-1. Dummy credentials are used unless AWS_* are set.

Commands (JSON or a single value is printed on stdout):
  create-repository NAME                  -> repositoryUri
  put-image NAME TAG [--content TEXT]     -> imageDigest (a valid OCI manifest
                                             whose digest depends on NAME:TAG or TEXT)
  describe-images NAME                    -> JSON list (tags, digest, imagePushedAt)
  auth-token                              -> JSON of GetAuthorizationToken
  create-queue NAME [VISIBILITY_S]        -> QueueUrl
  queue-depth QUEUE_URL                   -> "<visible> <in flight>" message counts
  receive QUEUE_URL [--wait S]            -> JSON list of message bodies (deleted)
  route-ecr-events RULE QUEUE_URL         -> rule ARN; EventBridge rule matching
                                             source aws.ecr / "ECR Image Action"
                                             with the SQS queue as its target
  put-push-event NAME TAG [DIGEST]        -> PutEvents an "ECR Image Action" PUSH
                                             (DIGEST looked up by tag if omitted)
  send-push-message QUEUE_URL NAME TAG [DIGEST]
                                          -> SQS SendMessage of the same event
                                             envelope (what an EventBridge->SQS
                                             target would deliver); MessageId
  send-push-messages QUEUE_URL NAME COUNT -> COUNT such messages, tags v0..v<COUNT-1>
"""
import argparse
import datetime
import hashlib
import json
import os
import sys
import uuid

import boto3

ACCOUNT = "123456789012"
DETAIL_TYPE = "ECR Image Action"


def session(args):
    kw = dict(
        region_name=args.region,
        aws_access_key_id=os.environ.get("AWS_ACCESS_KEY_ID", "testing"),
        aws_secret_access_key=os.environ.get("AWS_SECRET_ACCESS_KEY", "testing"),
    )
    return lambda svc: boto3.client(svc, endpoint_url=args.endpoint, **kw)


def sha(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def manifest_for(content):
    """A syntactically valid OCI image manifest referencing fake blobs."""
    config = json.dumps({"architecture": "amd64", "os": "linux", "imagewatch": content}).encode()
    layer = content.encode()
    m = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": sha(config),
            "size": len(config),
        },
        "layers": [
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                "digest": sha(layer),
                "size": len(layer),
            }
        ],
    }
    return json.dumps(m, sort_keys=True)


def digest_of(client, name, tag):
    r = client("ecr").describe_images(repositoryName=name, imageIds=[{"imageTag": tag}])
    return r["imageDetails"][0]["imageDigest"]


def push_event(args, name, tag, digest):
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": DETAIL_TYPE,
        "source": "aws.ecr",
        "account": ACCOUNT,
        "time": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": args.region,
        "resources": [],
        "detail": {
            "result": "SUCCESS",
            "repository-name": name,
            "image-digest": digest,
            "action-type": "PUSH",
            "image-tag": tag,
        },
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--endpoint", default=os.environ.get("IMAGEWATCH_MOTO_URL"))
    ap.add_argument("--region", default=os.environ.get("AWS_REGION", "us-east-1"))
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("create-repository"); p.add_argument("name")
    p = sub.add_parser("put-image"); p.add_argument("name"); p.add_argument("tag"); p.add_argument("--content")
    p = sub.add_parser("describe-images"); p.add_argument("name")
    sub.add_parser("auth-token")
    p = sub.add_parser("create-queue"); p.add_argument("name"); p.add_argument("visibility", nargs="?")
    p = sub.add_parser("queue-depth"); p.add_argument("queue_url")
    p = sub.add_parser("send-push-messages"); p.add_argument("queue_url"); p.add_argument("name"); p.add_argument("count", type=int)
    p = sub.add_parser("receive"); p.add_argument("queue_url"); p.add_argument("--wait", type=int, default=1)
    p = sub.add_parser("route-ecr-events"); p.add_argument("rule"); p.add_argument("queue_url")
    p = sub.add_parser("put-push-event"); p.add_argument("name"); p.add_argument("tag"); p.add_argument("digest", nargs="?")
    p = sub.add_parser("send-push-message"); p.add_argument("queue_url"); p.add_argument("name"); p.add_argument("tag"); p.add_argument("digest", nargs="?")
    args = ap.parse_args()
    if not args.endpoint:
        sys.exit("no endpoint: set IMAGEWATCH_MOTO_URL or pass --endpoint")
    client = session(args)

    if args.cmd == "create-repository":
        ecr = client("ecr")
        try:
            r = ecr.create_repository(repositoryName=args.name)["repository"]
        except ecr.exceptions.RepositoryAlreadyExistsException:
            r = ecr.describe_repositories(repositoryNames=[args.name])["repositories"][0]
        print(r["repositoryUri"])
    elif args.cmd == "put-image":
        body = manifest_for(args.content or f"{args.name}:{args.tag}")
        r = client("ecr").put_image(
            repositoryName=args.name,
            imageManifest=body,
            imageManifestMediaType="application/vnd.oci.image.manifest.v1+json",
            imageTag=args.tag,
        )
        print(r["image"]["imageId"]["imageDigest"])
    elif args.cmd == "describe-images":
        r = client("ecr").describe_images(repositoryName=args.name)
        print(json.dumps(r["imageDetails"], default=str, indent=1))
    elif args.cmd == "auth-token":
        r = client("ecr").get_authorization_token()
        print(json.dumps(r["authorizationData"], default=str))
    elif args.cmd == "create-queue":
        attributes = {"VisibilityTimeout": args.visibility} if args.visibility else {}
        print(client("sqs").create_queue(QueueName=args.name, Attributes=attributes)["QueueUrl"])
    elif args.cmd == "queue-depth":
        a = client("sqs").get_queue_attributes(
            QueueUrl=args.queue_url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        print(a["ApproximateNumberOfMessages"], a["ApproximateNumberOfMessagesNotVisible"])
    elif args.cmd == "send-push-messages":
        sqs = client("sqs")
        for i in range(args.count):
            digest = "sha256:" + hashlib.sha256(f"{args.name}:v{i}".encode()).hexdigest()
            e = push_event(args, args.name, f"v{i}", digest)
            sqs.send_message(QueueUrl=args.queue_url, MessageBody=json.dumps(e))
        print(args.count)
    elif args.cmd == "receive":
        sqs = client("sqs")
        r = sqs.receive_message(QueueUrl=args.queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=args.wait)
        out = []
        for m in r.get("Messages", []):
            out.append(json.loads(m["Body"]))
            sqs.delete_message(QueueUrl=args.queue_url, ReceiptHandle=m["ReceiptHandle"])
        print(json.dumps(out, indent=1))
    elif args.cmd == "route-ecr-events":
        sqs = client("sqs")
        arn = sqs.get_queue_attributes(QueueUrl=args.queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        ev = client("events")
        rule = ev.put_rule(
            Name=args.rule,
            EventPattern=json.dumps({"source": ["aws.ecr"], "detail-type": [DETAIL_TYPE]}),
            State="ENABLED",
        )
        ev.put_targets(Rule=args.rule, Targets=[{"Id": "sqs", "Arn": arn}])
        print(rule["RuleArn"])
    elif args.cmd == "put-push-event":
        digest = args.digest or digest_of(client, args.name, args.tag)
        e = push_event(args, args.name, args.tag, digest)
        r = client("events").put_events(
            Entries=[{"Source": e["source"], "DetailType": DETAIL_TYPE, "Detail": json.dumps(e["detail"])}]
        )
        if r.get("FailedEntryCount"):
            sys.exit(f"PutEvents failed: {r}")
        print(r["Entries"][0]["EventId"])
    elif args.cmd == "send-push-message":
        digest = args.digest or digest_of(client, args.name, args.tag)
        e = push_event(args, args.name, args.tag, digest)
        r = client("sqs").send_message(QueueUrl=args.queue_url, MessageBody=json.dumps(e))
        print(r["MessageId"])


if __name__ == "__main__":
    main()
