"""The Python peer of issue #8: the function a user would otherwise write for tocsin.

awslambdaric + boto3 + aws-lambda-powertools (Logger; Idempotency with DynamoDB persistence),
creating at import time the clients the Rust functions create at init: DynamoDB, SQS, SNS.
Compact, not a reimplementation: one handler, the same *shape* of work as the Rust sender and
status functions (the same AWS calls per record, the same tables and item keys), no domain rules.

Run by the bench as ``python -m awslambdaric handler.fn`` with this directory as cwd/PYTHONPATH,
the sender's environment from template.yaml and AWS_ENDPOINT_URL pointing at the emulator.
"""

import base64
import gzip
import json
import os
import uuid
from datetime import datetime, timedelta, timezone

import boto3
from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)

LEDGER = os.environ["TOCSIN_LEDGER_TABLE"]
RECIPIENTS = os.environ["TOCSIN_RECIPIENTS_TABLE"]

logger = Logger(service="tocsin-python-peer")
dynamodb = boto3.client("dynamodb")
sqs = boto3.client("sqs")  # created as the Rust functions create theirs; unused by this peer
sns = boto3.client("sns")
# The ledger doubles as the idempotency store: its key is pk/sk (strings), so powertools writes
# pk = "idempotency#<function>", sk = <hash of the payload>.
persistence = DynamoDBPersistenceLayer(
    table_name=LEDGER, key_attr="pk", sort_key_attr="sk", boto3_client=dynamodb
)
idempotency = IdempotencyConfig(expires_after_seconds=3600)


def _now():
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@idempotent_function(data_keyword_argument="request", config=idempotency, persistence_store=persistence)
def send_one(request):
    """One send request: claim the intent, check suppression, publish, record (sender's calls)."""
    pk = {"S": "INTENT#" + request["key"]}
    got = dynamodb.get_item(TableName=LEDGER, Key={"pk": pk, "sk": {"S": "INTENT"}}, ConsistentRead=True)
    item = got.get("Item")
    if item is None:
        logger.info("send request for an unknown intent", extra={"key": request["key"][:12]})
        return {"outcome": "unknown intent"}
    intent = json.loads(item["intent"]["S"])
    recipient = item["recipient_e164"]["S"]
    attempt = str(uuid.uuid4())
    now = _now()
    lease = (datetime.now(timezone.utc) + timedelta(minutes=2)).isoformat()
    try:
        dynamodb.update_item(
            TableName=LEDGER,
            Key={"pk": pk, "sk": {"S": "INTENT"}},
            UpdateExpression="SET #s = :sending, attempt_id = :a, claimed_at = :now, lease_until = :lease, "
            "updated_at = :now, open_recipient = recipient_e164 ADD attempts :one",
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
        )
    except dynamodb.exceptions.ConditionalCheckFailedException:
        return {"outcome": "not claimable"}
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
    dynamodb.transact_write_items(
        TransactItems=[
            {
                "Update": {
                    "TableName": LEDGER,
                    "Key": {"pk": pk, "sk": {"S": "INTENT"}},
                    "UpdateExpression": "SET #s = :accepted, sns_message_id = :mid, accepted_at = :now, "
                    "updated_at = :now REMOVE open_recipient",
                    "ConditionExpression": "attempt_id = :a",
                    "ExpressionAttributeNames": {"#s": "state"},
                    "ExpressionAttributeValues": {
                        ":accepted": {"S": "accepted"},
                        ":mid": {"S": mid},
                        ":now": {"S": now},
                        ":a": {"S": attempt},
                    },
                }
            },
            {
                "Put": {
                    "TableName": LEDGER,
                    "Item": {
                        "pk": pk,
                        "sk": {"S": "OBS#sender:" + attempt},
                        "at": {"S": now},
                        "obs": {"S": json.dumps({"source": "sender", "state": "accepted", "message_id": mid})},
                    },
                    "ConditionExpression": "attribute_not_exists(pk)",
                }
            },
            {
                "Put": {
                    "TableName": LEDGER,
                    "Item": {
                        "pk": {"S": "MSG#" + mid},
                        "sk": {"S": "MSG"},
                        "key": {"S": request["key"]},
                        "recipient": {"S": recipient},
                        "at": {"S": now},
                    },
                }
            },
        ]
    )
    return {"outcome": "accepted", "message_id": mid}


def _sqs_batch(event):
    failures = []
    for record in event["Records"]:
        try:
            request = json.loads(record["body"])
            send_one(request={"key": request["key"]})
        except Exception:  # noqa: BLE001 - a failed record is retried by SQS, as the sender's
            logger.exception("send request failed")
            failures.append({"itemIdentifier": record["messageId"]})
    return {"batchItemFailures": failures}


def _subscription(event):
    """A CloudWatch Logs subscription event of SNS delivery records (status's calls)."""
    data = json.loads(gzip.decompress(base64.b64decode(event["awslogs"]["data"])))
    summary = {"events": 0, "indexed": 0, "orphaned": 0, "duplicates": 0, "unparseable": 0}
    for entry in data.get("logEvents", []):
        summary["events"] += 1
        try:
            record = json.loads(entry["message"])
            mid = record["notification"]["messageId"]
            destination = record["delivery"]["destination"]
        except (ValueError, KeyError, TypeError):
            summary["unparseable"] += 1
            continue
        index = dynamodb.get_item(
            TableName=LEDGER, Key={"pk": {"S": "MSG#" + mid}, "sk": {"S": "MSG"}}, ConsistentRead=True
        ).get("Item")
        if index is not None:
            pk = {"S": "INTENT#" + index["key"]["S"]}
            dynamodb.get_item(TableName=LEDGER, Key={"pk": pk, "sk": {"S": "INTENT"}}, ConsistentRead=True)
            summary["indexed"] += 1
            continue
        at = datetime.fromtimestamp(entry["timestamp"] / 1000, timezone.utc)
        open_attempts = dynamodb.query(
            TableName=LEDGER,
            IndexName="open-index",
            KeyConditionExpression="open_recipient = :r AND claimed_at BETWEEN :from AND :to",
            ExpressionAttributeValues={
                ":r": {"S": destination},
                ":from": {"S": (at - timedelta(minutes=10)).isoformat()},
                ":to": {"S": (at + timedelta(seconds=5)).isoformat()},
            },
        )["Items"]
        if len(open_attempts) == 1:
            summary["indexed"] += 1
            continue
        try:
            dynamodb.put_item(
                TableName=LEDGER,
                Item={
                    "pk": {"S": "ORPHAN#" + mid},
                    "sk": {"S": "LOG#" + entry["id"]},
                    "log_group": {"S": data.get("logGroup", "")},
                    "message": {"S": entry["message"]},
                    "received_at": {"S": _now()},
                },
                ConditionExpression="attribute_not_exists(pk)",
            )
            summary["orphaned"] += 1
        except dynamodb.exceptions.ConditionalCheckFailedException:
            summary["duplicates"] += 1
    logger.info("status batch processed", extra={"summary": summary})
    return summary


@logger.inject_lambda_context
def fn(event, context):
    idempotency.register_lambda_context(context)
    if "awslogs" in event:
        return _subscription(event)
    if event.get("Records"):
        return _sqs_batch(event)
    return {"ping": True}
