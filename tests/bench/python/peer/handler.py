"""The Python peer of issue #8: the function a user would otherwise write for tocsin.

awslambdaric + boto3 + aws-lambda-powertools (Logger), creating at import time the clients the Rust
functions create at init: DynamoDB, SQS, SNS. Compact, not a reimplementation: one handler, the
same AWS calls per record as the Rust sender and status functions (the same operations, tables and
item keys; the bench records both and compares only where the counts agree), no domain rules.

Sender, per send request: UpdateItem (the conditional claim, returning the intent; when refused
without the old item, one GetItem of the intent, as the Rust adapter), GetItem on the recipients
table, SNS Publish, TransactWriteItems (state + observation + MSG# index). Status, per
100 records: one BatchGetItem of their MSG# index entries; per record: TransactWriteItems
(observation + state) when indexed, else a conditional PutItem of the orphan.

Run by the bench as ``python -m awslambdaric handler.fn`` with this directory as cwd/PYTHONPATH,
the function's environment from template.yaml and AWS_ENDPOINT_URL pointing at the emulator.
"""

import base64
import gzip
import json
import os
import uuid
from datetime import datetime, timedelta, timezone

import boto3
from aws_lambda_powertools import Logger

LEDGER = os.environ["TOCSIN_LEDGER_TABLE"]
RECIPIENTS = os.environ["TOCSIN_RECIPIENTS_TABLE"]

logger = Logger(service="tocsin-python-peer")
dynamodb = boto3.client("dynamodb")
sqs = boto3.client("sqs")  # created as the Rust functions create theirs; unused by this peer
sns = boto3.client("sns")


def _now():
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def send_one(request):
    """One send request: claim the intent, check suppression, publish, record (the sender's calls)."""
    pk = {"S": "INTENT#" + request["key"]}
    attempt = str(uuid.uuid4())
    now = _now()
    lease = (datetime.now(timezone.utc) + timedelta(minutes=2)).isoformat()
    try:
        item = dynamodb.update_item(
            TableName=LEDGER,
            Key={"pk": pk, "sk": {"S": "INTENT"}},
            UpdateExpression="SET #s = :sending, attempt_id = :a, claimed_at = :now, lease_until = :lease "
            "ADD attempts :one",
            ConditionExpression="attribute_exists(pk) AND #s IN (:received, :queued)",
            ExpressionAttributeNames={"#s": "state"},
            ExpressionAttributeValues={
                ":sending": {"S": "sending"},
                ":received": {"S": "received"},
                ":queued": {"S": "queued"},
                ":a": {"S": attempt},
                ":now": {"S": now},
                ":lease": {"S": lease},
                ":one": {"N": "1"},
            },
            ReturnValues="ALL_NEW",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )["Attributes"]
    except dynamodb.exceptions.ConditionalCheckFailedException as e:
        # As the Rust adapter: the refused claim's old item, else one read to tell a missing
        # intent from one that is not claimable.
        old = e.response.get("Item") or dynamodb.get_item(
            TableName=LEDGER, Key={"pk": pk, "sk": {"S": "INTENT"}}, ConsistentRead=True
        ).get("Item")
        if not old:
            logger.info("send request for an unknown intent", extra={"key": request["key"][:12]})
            return {"outcome": "unknown intent"}
        return {"outcome": "not claimable"}
    intent = json.loads(item["intent"]["S"])
    recipient = item["pending_to"]["S"]
    state = dynamodb.get_item(
        TableName=RECIPIENTS, Key={"pk": {"S": "RCPT#" + recipient}, "sk": {"S": "STATE"}}, ConsistentRead=True
    ).get("Item")
    if state and state.get("suppressed", {}).get("BOOL"):
        return {"outcome": "suppressed"}
    body = intent.get("body")
    message = body if isinstance(body, str) else json.dumps(body)
    published = sns.publish(
        PhoneNumber=recipient,
        Message=message,
        MessageAttributes={"AWS.SNS.SMS.SMSType": {"DataType": "String", "StringValue": "Transactional"}},
    )
    mid = published["MessageId"]
    # As the Rust sender: what SNS answered first (observation, message index), then the state.
    try:
        dynamodb.put_item(
            TableName=LEDGER,
            Item={
                "pk": pk,
                "sk": {"S": "OBS#attempt:" + attempt + ":accepted"},
                "at": {"S": now},
                "obs": {"S": json.dumps({"source": "sender", "state": "accepted", "message_id": mid})},
            },
            ConditionExpression="attribute_not_exists(pk)",
        )
    except dynamodb.exceptions.ConditionalCheckFailedException:
        pass
    dynamodb.put_item(
        TableName=LEDGER,
        Item={
            "pk": {"S": "MSG#" + mid},
            "sk": {"S": "MSG"},
            "key": {"S": request["key"]},
            "recipient": {"S": recipient},
            "at": {"S": now},
        },
    )
    try:
        dynamodb.update_item(
            TableName=LEDGER,
            Key={"pk": pk, "sk": {"S": "INTENT"}},
            UpdateExpression="SET #s = :accepted, sns_message_id = :mid, accepted_at = :now "
            "REMOVE attempt_id, lease_until, pending_by",
            ConditionExpression="attempt_id = :a",
            ExpressionAttributeNames={"#s": "state"},
            ExpressionAttributeValues={
                ":accepted": {"S": "accepted"},
                ":mid": {"S": mid},
                ":now": {"S": now},
                ":a": {"S": attempt},
            },
        )
    except dynamodb.exceptions.ConditionalCheckFailedException:
        return {"outcome": "claim lost"}
    return {"outcome": "accepted", "message_id": mid}


def _sqs_batch(event):
    failures = []
    for record in event["Records"]:
        try:
            request = json.loads(record["body"])
            send_one({"key": request["key"]})
        except Exception:  # noqa: BLE001 - a failed record is retried by SQS, as the sender's
            logger.exception("send request failed")
            failures.append({"itemIdentifier": record["messageId"]})
    return {"batchItemFailures": failures}


def _subscription(event):
    """A CloudWatch Logs subscription event of SNS delivery records (the status function's calls)."""
    data = json.loads(gzip.decompress(base64.b64decode(event["awslogs"]["data"])))
    summary = {"events": 0, "applied": 0, "orphaned": 0, "duplicates": 0, "unparseable": 0}
    entries = data.get("logEvents", [])
    for start in range(0, len(entries), 100):
        parsed = []
        for entry in entries[start : start + 100]:
            summary["events"] += 1
            try:
                record = json.loads(entry["message"])
                parsed.append((entry, record, record["notification"]["messageId"]))
            except (ValueError, KeyError, TypeError):
                summary["unparseable"] += 1
        if not parsed:
            continue
        keys = [{"pk": {"S": "MSG#" + mid}, "sk": {"S": "MSG"}} for mid in dict.fromkeys(m for _, _, m in parsed)]
        got = dynamodb.batch_get_item(RequestItems={LEDGER: {"Keys": keys, "ConsistentRead": True}})
        index = {i["pk"]["S"][4:]: i for i in got.get("Responses", {}).get(LEDGER, [])}
        orphans = {}
        for entry, record, mid in parsed:
            now = _now()
            if mid in index:
                pk = {"S": "INTENT#" + index[mid]["key"]["S"]}
                state = "delivered" if record.get("status") == "SUCCESS" else "failed"
                oid = "log:" + entry["id"]
                # As the Rust status function: the state first, marked with the observation's id,
                # then the observation.
                try:
                    dynamodb.update_item(
                        TableName=LEDGER,
                        Key={"pk": pk, "sk": {"S": "INTENT"}},
                        UpdateExpression="SET #s = :to, final_at = :now, moved_by = :oid REMOVE due_shard, due_at",
                        ConditionExpression="#s = :accepted AND sns_message_id = :mid",
                        ExpressionAttributeNames={"#s": "state"},
                        ExpressionAttributeValues={
                            ":to": {"S": state},
                            ":now": {"S": now},
                            ":accepted": {"S": "accepted"},
                            ":mid": {"S": mid},
                            ":oid": {"S": oid},
                        },
                    )
                except dynamodb.exceptions.ConditionalCheckFailedException:
                    summary["duplicates"] += 1
                    continue
                try:
                    dynamodb.put_item(
                        TableName=LEDGER,
                        Item={
                            "pk": pk,
                            "sk": {"S": "OBS#" + oid},
                            "at": {"S": now},
                            "obs": {"S": json.dumps({"source": "status", "state": state})},
                        },
                        ConditionExpression="attribute_not_exists(pk)",
                    )
                except dynamodb.exceptions.ConditionalCheckFailedException:
                    pass
                summary["applied"] += 1
                continue
            orphans[(mid, entry["id"])] = {
                "PutRequest": {
                    "Item": {
                        "pk": {"S": "ORPHAN#" + mid},
                        "sk": {"S": "LOG#" + entry["id"]},
                        "log_group": {"S": data.get("logGroup", "")},
                        "message": {"S": entry["message"]},
                        "received_at": {"S": now},
                    }
                }
            }
            summary["orphaned"] += 1
        # As the Rust status function: a chunk's orphans 25 to a BatchWriteItem.
        requests = list(orphans.values())
        for i in range(0, len(requests), 25):
            pending = {LEDGER: requests[i : i + 25]}
            while pending:
                pending = dynamodb.batch_write_item(RequestItems=pending).get("UnprocessedItems") or None
    logger.info("status batch processed", extra={"summary": summary})
    return summary


@logger.inject_lambda_context
def fn(event, context):
    if "awslogs" in event:
        return _subscription(event)
    if event.get("Records"):
        return _sqs_batch(event)
    return {"ping": True}
