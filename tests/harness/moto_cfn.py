"""moto's server as moto_serial.py runs it, plus what tocsin's deploy tests need and moto's
CloudFormation lacks:

- the resource type AWS::Logs::SubscriptionFilter, created and deleted through moto's own CloudWatch
  Logs backend with the checks that backend makes on PutSubscriptionFilter (the log group exists,
  the destination function exists, at most 2 filters per log group: LimitExceededException);
  CloudFormation names an unnamed filter `<stack>-<logical id>-<suffix>`, as moto names every
  other unnamed resource;
- a log group's KmsKeyId, which moto's own AWS::Logs::LogGroup drops;
- the resource type AWS::SNS::Subscription (the on-call topic's e-mail, webhook and SMS
  subscriptions), through moto's SNS backend, which confirms every subscription at once;
- the resource type AWS::Scheduler::Schedule, through moto's EventBridge Scheduler backend, which
  refuses a second schedule of the same name in a schedule group (ConflictException), as AWS does;
- a failed CreateStack rolls back, as CloudFormation does: every resource it created is deleted
  except those with DeletionPolicy Retain (RetainExceptOnCreate ones are deleted: that is what the
  policy is for), and the stack is left ROLLBACK_COMPLETE (delete it before creating it again). The
  call still answers with the failing resource's error, so tests see why;
- DeleteStack keeps RetainExceptOnCreate resources, like Retain ones (moto keeps only Retain);
- the resource types AWS::SMSVOICE::ConfigurationSet and ProtectConfiguration (End User
  Messaging), the set created, updated and
  deleted through the End User Messaging stand-in (eum_standin.py) of this very process, by the
  operations CloudFormation's own handler calls, so the stand-in's model validation and its errors
  apply; see ConfigurationSetResource for what is checked and where each check comes from.
  The protect configuration is created and deleted the same way (ProtectConfigurationResource).
  AWS::SMSVOICE::OptOutList, PhoneNumber and Pool are not supported: template.yaml declares none
  (the opt-out list and the origination identities are the account's, named by parameters).

Usage: python moto_cfn.py HOST PORT
"""

import json
import os
import re
import runpy
import sys
from typing import Any

from moto.cloudformation.models import Stack
from moto.cloudformation.parsing import ResourceMap
from moto.core.common_models import CloudFormationModel
from moto.core.exceptions import JsonRESTError
from moto.logs.models import LogGroup, logs_backends
from moto.scheduler.models import scheduler_backends
from moto.sns.models import sns_backends

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # eum_standin, beside this file
import eum_standin  # noqa: E402 - the module moto_serial.py imports too (one module, one stand-in)


class SubscriptionFilterResource(CloudFormationModel):
    # moto files every model under the service its module path names.
    __module__ = "moto.logs.tocsin_subscription_filter"

    def __init__(self, log_group_name: str, filter_name: str) -> None:
        self.log_group_name = log_group_name
        self.filter_name = filter_name

    @property
    def physical_resource_id(self) -> str:
        return self.filter_name

    @staticmethod
    def cloudformation_name_type() -> str:
        return "FilterName"

    @staticmethod
    def cloudformation_type() -> str:
        return "AWS::Logs::SubscriptionFilter"

    @classmethod
    def create_from_cloudformation_json(  # type: ignore[misc]
        cls, resource_name: str, cloudformation_json: Any, account_id: str, region_name: str, **kwargs: Any
    ) -> "SubscriptionFilterResource":
        p = cloudformation_json["Properties"]
        logs_backends[account_id][region_name].put_subscription_filter(
            p["LogGroupName"], resource_name, p.get("FilterPattern", ""), p["DestinationArn"], p.get("RoleArn", "")
        )
        return cls(p["LogGroupName"], resource_name)

    def delete(self, account_id: str, region_name: str) -> None:
        backend = logs_backends[account_id][region_name]
        # A filter goes with its group: when the stack's own group was deleted first (moto deletes
        # in no dependency order; CloudFormation would delete the filter first), it is gone.
        if self.log_group_name in backend.groups:
            backend.delete_subscription_filter(self.log_group_name, self.filter_name)


class SubscriptionResource(CloudFormationModel):
    __module__ = "moto.sns.tocsin_subscription"

    def __init__(self, arn: str) -> None:
        self.arn = arn

    @property
    def physical_resource_id(self) -> str:
        return self.arn

    @staticmethod
    def cloudformation_name_type() -> str:
        return ""

    @staticmethod
    def cloudformation_type() -> str:
        return "AWS::SNS::Subscription"

    @classmethod
    def create_from_cloudformation_json(  # type: ignore[misc]
        cls, resource_name: str, cloudformation_json: Any, account_id: str, region_name: str, **kwargs: Any
    ) -> "SubscriptionResource":
        p = cloudformation_json["Properties"]
        sub = sns_backends[account_id][region_name].subscribe(p["TopicArn"], p["Endpoint"], p["Protocol"])
        return cls(sub.arn)

    def delete(self, account_id: str, region_name: str) -> None:
        sns_backends[account_id][region_name].unsubscribe(self.arn)


class ScheduleResource(CloudFormationModel):
    __module__ = "moto.scheduler.tocsin_schedule"

    def __init__(self, group_name: str, name: str, arn: str) -> None:
        self.group_name = group_name
        self.name = name
        self.arn = arn

    @property
    def physical_resource_id(self) -> str:
        return self.name

    @staticmethod
    def cloudformation_name_type() -> str:
        return "Name"

    @staticmethod
    def cloudformation_type() -> str:
        return "AWS::Scheduler::Schedule"

    @classmethod
    def has_cfn_attr(cls, attr: str) -> bool:
        return attr == "Arn"

    def get_cfn_attribute(self, attribute_name: str) -> Any:
        if attribute_name == "Arn":
            return self.arn
        raise KeyError(attribute_name)

    @classmethod
    def create_from_cloudformation_json(  # type: ignore[misc]
        cls, resource_name: str, cloudformation_json: Any, account_id: str, region_name: str, **kwargs: Any
    ) -> "ScheduleResource":
        p = cloudformation_json["Properties"]
        group = p.get("GroupName") or "default"
        schedule = scheduler_backends[account_id][region_name].create_schedule(
            description=p.get("Description", ""),
            end_date=p.get("EndDate"),
            flexible_time_window=p.get("FlexibleTimeWindow", {"Mode": "OFF"}),
            group_name=group,
            kms_key_arn=p.get("KmsKeyArn"),
            name=p.get("Name", resource_name),
            schedule_expression=p["ScheduleExpression"],
            schedule_expression_timezone=p.get("ScheduleExpressionTimezone"),
            start_date=p.get("StartDate"),
            state=p.get("State", "ENABLED"),
            target=p["Target"],
            action_after_completion=None,
        )
        return cls(group, schedule.name, schedule.arn)

    def delete(self, account_id: str, region_name: str) -> None:
        scheduler_backends[account_id][region_name].delete_schedule(self.group_name, self.name)


# --------------------------------------------------------------------------------------------------
# AWS::SMSVOICE::ConfigurationSet
#
# Sources (cited where used):
# [CFN]      "AWS::SMSVOICE::ConfigurationSet" and its EventDestination / CloudWatchLogsDestination
#            property types, CloudFormation Template Reference,
#            https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-smsvoice-configurationset.html
#            (property names, patterns, lengths; ConfigurationSetName "Update requires: Replacement").
# [SCHEMA]   the type's registry schema as cfn-lint 1.58.0 ships it (providers/us-east-1.json, type
#            AWS::SMSVOICE::ConfigurationSet): additionalProperties false at every level;
#            EventDestinations maxItems 5; an EventDestination requires EventDestinationName,
#            Enabled and MatchingEventTypes (uniqueItems) and exactly one (oneOf) of
#            CloudWatchLogsDestination, KinesisFirehoseDestination, SnsDestination; both ARNs of a
#            CloudWatchLogsDestination required, pattern ^arn:\S+$; primaryIdentifier
#            ConfigurationSetName (what Ref returns), readOnlyProperties Arn (Fn::GetAtt's only
#            attribute); the handlers' permissions, i.e. the operations they call (create:
#            CreateConfigurationSet, SetDefaultSenderId, SetDefaultMessageFeedbackEnabled,
#            AssociateProtectConfiguration, CreateEventDestination, UpdateEventDestination,
#            TagResource; update adds DeleteEventDestination; delete: DeleteConfigurationSet).
# [CONTRACT] the resource type handler contract: "A create handler MUST return FAILED with an
#            AlreadyExists error code if the resource already existed prior to the create request"
#            (https://docs.aws.amazon.com/cloudformation-cli/latest/userguide/resource-type-test-contract.html),
#            with the plugins' fixed message "Resource of type '<type>' with identifier '<id>'
#            already exists." (cloudformation-cli-python-plugin PR #30, matching the Java plugin),
#            which a stack event shows as `Resource handler returned message: "..." (RequestToken:
#            ..., HandlerErrorCode: AlreadyExists)`. A delete handler's NotFound counts as deleted.
# [EUM-CW]   "Set up an Amazon CloudWatch event destination in AWS End User Messaging SMS",
#            https://docs.aws.amazon.com/sms-voice/latest/userguide/configuration-sets-cloud-watch.html:
#            "Before you can create a CloudWatch event destination, you must first create a
#            CloudWatch group", and an IAM role that allows the service to write to it.
# [LINT]     cfn-lint rule E1156, the format AWS::IAM::Role.Arn that cfn-lint adds to IamRoleArn:
#            arn:<partition>:iam::<12 digits>:role/<name>.
# [API]      the service's model (botocore pinpoint-sms-voice-v2, which the stand-in validates
#            every request against): CreateEventDestination has no Enabled member.
#
# CloudFormation answers CreateStack at once and fails a resource later, in a stack event; moto
# creates synchronously, so the CreateStack call itself answers the failure: its code is the
# HandlerErrorCode (or InvalidRequest for a property the schema refuses), its message the event's.
# --------------------------------------------------------------------------------------------------

CONFIGURATION_SET = "AWS::SMSVOICE::ConfigurationSet"

_STANDINS: list[eum_standin.StandIn] = []
_standin_init = eum_standin.StandIn.__init__


def _remembering_init(self: eum_standin.StandIn) -> None:
    _standin_init(self)
    _STANDINS.append(self)


# moto_serial.py makes the process's one stand-in when it starts: remember it, to create through it.
eum_standin.StandIn.__init__ = _remembering_init  # type: ignore[method-assign]


class HandlerFailure(JsonRESTError):
    """A resource CloudFormation failed: the handler's error code and the stack event's words."""

    code = 400

    def __init__(self, handler_code: str, message: str, reason: str | None = None) -> None:
        super().__init__(handler_code, message)
        self.handler_code = handler_code
        self.reason = reason  # the service error's Reason, when a service error caused it


def _handler_returned(handler_code: str, message: str, reason: str | None = None) -> HandlerFailure:
    return HandlerFailure(
        handler_code, f'Resource handler returned message: "{message}" (HandlerErrorCode: {handler_code})', reason
    )


# How a handler reports the service's errors (the Java plugin's exception types, by the service
# error's kind); a ConflictException on create is AlreadyExists [CONTRACT], handled below.
_HANDLER_CODES = {
    "ValidationException": "InvalidRequest",
    "ResourceNotFoundException": "NotFound",
    "ServiceQuotaExceededException": "ServiceLimitExceeded",
    "ThrottlingException": "Throttling",
    "AccessDeniedException": "AccessDenied",
    "ConflictException": "ResourceConflict",
}


def _eum(account_id: str, region_name: str, op: str, request: dict[str, Any]) -> dict[str, Any]:
    """One End User Messaging call, as the handler makes it: through the stand-in's own front door
    (its model validation, its checks, its errors), in this process and under the lock the request
    that runs CloudFormation already holds."""
    if not _STANDINS:
        raise HandlerFailure("InternalFailure", "no End User Messaging stand-in in this process (moto_serial.py makes it)")
    standin = _STANDINS[-1]
    if standin.region(region_name).account != account_id:
        raise HandlerFailure("InternalFailure", f"the stand-in serves account {eum_standin.DEFAULT_ACCOUNT_ID} only, not {account_id}")
    status, body = standin.call(op, region_name, json.dumps(request).encode())
    if status == 200:
        return body
    kind = str(body.get("__type", ""))
    raise _handler_returned(
        _HANDLER_CODES.get(kind, "GeneralServiceException"), f"{kind}: {body.get('Message', '')}", body.get("Reason")
    )


def _type_name(v: Any) -> str:
    return {bool: "Boolean", int: "Integer", float: "Number", str: "String", list: "JSONArray", dict: "JSONObject"}.get(
        type(v), type(v).__name__
    )


_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
_ARN = re.compile(r"^arn:\S+$")
_PROTECT_ID = re.compile(r"^[A-Za-z0-9_:/-]+$")
_ROLE_ARN = re.compile(r"^arn:aws[a-zA-Z-]*:iam::\d{12}:role/.+$")
DESTINATION_KINDS = ("CloudWatchLogsDestination", "KinesisFirehoseDestination", "SnsDestination")


def _schema_errors(p: Any) -> list[str]:
    """What CloudFormation's validation of the properties against [SCHEMA] reports, in the JSON
    pointer form its stack events use ("#/EventDestinations/0: required key [Enabled] not found")."""
    out: list[str] = []

    def obj(v: Any, path: str, members: dict[str, Any], required: tuple[str, ...] = ()) -> bool:
        if not isinstance(v, dict):
            out.append(f"{path}: expected type: JSONObject, found: {_type_name(v)}")
            return False
        out.extend(f"{path}: extraneous key [{k}] is not permitted" for k in v if k not in members)
        out.extend(f"{path}: required key [{k}] not found" for k in required if k not in v)
        for k, check in members.items():
            if k in v:
                check(v[k], f"{path}/{k}")
        return True

    def string(pattern: re.Pattern[str] | None = None, min_len: int = 0, max_len: int | None = None) -> Any:
        def check(v: Any, path: str) -> None:
            if not isinstance(v, str):
                out.append(f"{path}: expected type: String, found: {_type_name(v)}")
            elif len(v) < min_len:
                out.append(f"{path}: expected minLength: {min_len}, actual: {len(v)}")
            elif max_len is not None and len(v) > max_len:
                out.append(f"{path}: expected maxLength: {max_len}, actual: {len(v)}")
            elif pattern is not None and not pattern.search(v):
                out.append(f"{path}: failed validation constraint for keyword [pattern]")

        return check

    def boolean(v: Any, path: str) -> None:
        if not isinstance(v, bool):
            out.append(f"{path}: expected type: Boolean, found: {_type_name(v)}")

    def array(item: Any, max_items: int | None = None, unique: bool = False) -> Any:
        def check(v: Any, path: str) -> None:
            if not isinstance(v, list):
                out.append(f"{path}: expected type: JSONArray, found: {_type_name(v)}")
                return
            if max_items is not None and len(v) > max_items:
                out.append(f"{path}: expected maximum item count: {max_items}, found: {len(v)}")
            if unique and len({json.dumps(x, sort_keys=True) for x in v}) != len(v):
                out.append(f"{path}: array items are not unique")
            for i, x in enumerate(v):
                item(x, f"{path}/{i}")

        return check

    arn = string(_ARN)
    kinds = {
        "CloudWatchLogsDestination": lambda v, path: obj(
            v, path, {"IamRoleArn": arn, "LogGroupArn": arn}, ("IamRoleArn", "LogGroupArn")
        ),
        "KinesisFirehoseDestination": lambda v, path: obj(
            v, path, {"IamRoleArn": arn, "DeliveryStreamArn": arn}, ("IamRoleArn", "DeliveryStreamArn")
        ),
        "SnsDestination": lambda v, path: obj(v, path, {"TopicArn": arn}, ("TopicArn",)),
    }

    def destination(v: Any, path: str) -> None:
        members = {
            "EventDestinationName": string(_NAME, 1, 64),
            "Enabled": boolean,
            "MatchingEventTypes": array(string(), unique=True),
            **kinds,
        }
        if obj(v, path, members, ("EventDestinationName", "Enabled", "MatchingEventTypes")):
            matched = sum(1 for k in DESTINATION_KINDS if k in v)
            if matched != 1:
                out.append(f"{path}: #: {matched} subschema(s) matched instead of one")

    tag = lambda v, path: obj(v, path, {"Key": string(None, 1, 128), "Value": string(None, 0, 256)}, ("Key", "Value"))  # noqa: E731
    obj(
        p,
        "#",
        {
            "ConfigurationSetName": string(_NAME, 1, 64),
            "DefaultSenderId": string(_NAME),
            "EventDestinations": array(destination, max_items=5),
            "MessageFeedbackEnabled": boolean,
            "ProtectConfigurationId": string(_PROTECT_ID, 1, 256),
            "Tags": array(tag, unique=True),
        },
    )
    return out


def _destination_request(name: str, d: dict[str, Any]) -> dict[str, Any]:
    kind = next(k for k in DESTINATION_KINDS if k in d)
    return {"EventDestinationName": name, "MatchingEventTypes": d["MatchingEventTypes"], kind: d[kind]}


def _check_cloudwatch_destination(d: dict[str, Any], path: str) -> None:
    """What the service needs before a CloudWatch Logs destination can be made [EUM-CW], and the
    role ARN's form [LINT]. The error's wording is the emulator's own (AWS documents none)."""
    cw = d.get("CloudWatchLogsDestination")
    if cw is None:
        return
    if not _ROLE_ARN.match(cw["IamRoleArn"]):
        raise _handler_returned(
            "InvalidRequest", f"{path}/CloudWatchLogsDestination/IamRoleArn: {cw['IamRoleArn']} is not an IAM role ARN"
        )
    region, account, group = eum_standin._group_of(cw["LogGroupArn"])  # read as the stand-in reads it
    if not group:
        raise _handler_returned("InvalidRequest", f"{path}: {cw['LogGroupArn']} is not a log group ARN")
    if group not in logs_backends[account][region].groups:
        raise _handler_returned("InvalidRequest", f"{path}: log group {group} does not exist (create it first)")


class ConfigurationSetResource(CloudFormationModel):
    __module__ = "moto.cloudformation.tocsin_sms_voice"

    def __init__(self, name: str, arn: str, properties: dict[str, Any], logical_id: str) -> None:
        self.name = name
        self.arn = arn
        self.properties = properties
        self.logical_id = logical_id

    @property
    def physical_resource_id(self) -> str:
        return self.name  # Ref: the primaryIdentifier, ConfigurationSetName [SCHEMA]

    @staticmethod
    def cloudformation_name_type() -> str:
        return "ConfigurationSetName"

    @staticmethod
    def cloudformation_type() -> str:
        return CONFIGURATION_SET

    @classmethod
    def has_cfn_attr(cls, attr: str) -> bool:
        return attr == "Arn"  # the one read-only property [SCHEMA]

    def get_cfn_attribute(self, attribute_name: str) -> Any:
        if attribute_name == "Arn":
            return self.arn
        raise KeyError(attribute_name)

    @staticmethod
    def _validate(logical_id: str, p: dict[str, Any]) -> None:
        errors = _schema_errors(p)
        if errors:
            raise HandlerFailure(
                "InvalidRequest", f"Properties validation failed for resource {logical_id} with message: {errors}"
            )
        for i, d in enumerate(p.get("EventDestinations", [])):
            _check_cloudwatch_destination(d, f"#/EventDestinations/{i}")

    @classmethod
    def create_from_cloudformation_json(  # type: ignore[misc]
        cls, resource_name: str, cloudformation_json: Any, account_id: str, region_name: str, **kwargs: Any
    ) -> "ConfigurationSetResource":
        logical_id = kwargs.get("LogicalId", resource_name)
        p = cloudformation_json["Properties"]
        cls._validate(logical_id, p)
        request: dict[str, Any] = {"ConfigurationSetName": resource_name}
        if "Tags" in p:
            request["Tags"] = p["Tags"]
        try:
            created = _eum(account_id, region_name, "CreateConfigurationSet", request)
        except HandlerFailure as e:
            if e.reason == "RESOURCE_ALREADY_EXISTS":  # [CONTRACT]
                raise _handler_returned(
                    "AlreadyExists", f"Resource of type '{CONFIGURATION_SET}' with identifier '{resource_name}' already exists."
                ) from e
            raise
        resource = cls(resource_name, created["ConfigurationSetArn"], {}, logical_id)
        try:
            resource._apply(account_id, region_name, p)
        except Exception:
            # A handler that fails after making the set deletes it again, so that neither the
            # rollback nor a retry meets a set CloudFormation does not know it made.
            resource.delete(account_id, region_name)
            raise
        return resource

    def _apply(self, account_id: str, region_name: str, p: dict[str, Any]) -> None:
        """Brings the set from `self.properties` to `p` with the operations the handlers call
        [SCHEMA]; those the stand-in does not implement answer an error naming them."""
        call = lambda op, request: _eum(account_id, region_name, op, {"ConfigurationSetName": self.name, **request})  # noqa: E731
        if p.get("DefaultSenderId") != self.properties.get("DefaultSenderId"):
            if "DefaultSenderId" in p:
                call("SetDefaultSenderId", {"SenderId": p["DefaultSenderId"]})
            else:
                call("DeleteDefaultSenderId", {})
        if p.get("MessageFeedbackEnabled") != self.properties.get("MessageFeedbackEnabled"):
            call("SetDefaultMessageFeedbackEnabled", {"MessageFeedbackEnabled": bool(p.get("MessageFeedbackEnabled"))})
        if p.get("ProtectConfigurationId") != self.properties.get("ProtectConfigurationId"):
            if "ProtectConfigurationId" in p:
                call("AssociateProtectConfiguration", {"ProtectConfigurationId": p["ProtectConfigurationId"]})
            else:
                call("DisassociateProtectConfiguration", {"ProtectConfigurationId": self.properties["ProtectConfigurationId"]})
        if self.properties and p.get("Tags") != self.properties.get("Tags"):
            _eum(account_id, region_name, "TagResource", {"ResourceArn": self.arn, "Tags": p.get("Tags", [])})
        old = {d["EventDestinationName"]: d for d in self.properties.get("EventDestinations", [])}
        new = {d["EventDestinationName"]: d for d in p.get("EventDestinations", [])}
        for name in sorted(old.keys() - new.keys()):
            call("DeleteEventDestination", {"EventDestinationName": name})
        for name, d in new.items():
            if name not in old:
                # CreateEventDestination has no Enabled: a new destination is enabled [API].
                call("CreateEventDestination", _destination_request(name, d))
                if not d["Enabled"]:
                    call("UpdateEventDestination", {"EventDestinationName": name, "Enabled": False})
            elif d != old[name]:
                call("UpdateEventDestination", {**_destination_request(name, d), "Enabled": d["Enabled"]})
        self.properties = p

    @classmethod
    def update_from_cloudformation_json(  # type: ignore[misc]
        cls,
        original_resource: "ConfigurationSetResource",
        new_resource_name: str,
        cloudformation_json: Any,
        account_id: str,
        region_name: str,
    ) -> "ConfigurationSetResource":
        p = cloudformation_json["Properties"]
        # moto draws a new name for an unnamed resource on every update; CloudFormation keeps it.
        name = p.get("ConfigurationSetName", original_resource.name)
        if name != original_resource.name:
            # ConfigurationSetName: "Update requires: Replacement" [CFN]: the new set first, then
            # the old one goes (CloudFormation deletes it in the update's cleanup).
            new = cls.create_from_cloudformation_json(
                name, cloudformation_json, account_id, region_name, LogicalId=original_resource.logical_id
            )
            original_resource.delete(account_id, region_name)
            return new
        cls._validate(original_resource.logical_id, p)
        original_resource._apply(account_id, region_name, p)
        return original_resource

    def delete(self, account_id: str, region_name: str) -> None:
        try:
            _eum(account_id, region_name, "DeleteConfigurationSet", {"ConfigurationSetName": self.name})
        except HandlerFailure as e:
            if e.handler_code != "NotFound":  # already gone: deleted, to CloudFormation [CONTRACT]
                raise


# --------------------------------------------------------------------------------------------------
# AWS::SMSVOICE::ProtectConfiguration
#
# [SCHEMA] (type AWS::SMSVOICE::ProtectConfiguration): properties CountryRuleSet (SMS, VOICE, MMS:
# lists of {CountryCode ^[A-Z]{2}$, ProtectStatus ALLOW|BLOCK|MONITOR|FILTER}),
# DeletionProtectionEnabled, Tags; primaryIdentifier ProtectConfigurationId (what Ref returns);
# readOnlyProperties Arn and ProtectConfigurationId (Fn::GetAtt's attributes). Created with
# CreateProtectConfiguration, then one UpdateProtectConfigurationCountryRuleSet per capability the
# template lists; deleted with DeleteProtectConfiguration (refused while deletion protection is on
# or while a configuration set is associated: the stand-in's checks, from [API]'s reasons).
# --------------------------------------------------------------------------------------------------

PROTECT_CONFIGURATION = "AWS::SMSVOICE::ProtectConfiguration"
_STATUSES = ("ALLOW", "BLOCK", "MONITOR", "FILTER")


def _protect_schema_errors(p: Any) -> list[str]:
    out: list[str] = []
    if not isinstance(p, dict):
        return [f"#: expected type: JSONObject, found: {_type_name(p)}"]
    out.extend(f"#: extraneous key [{k}] is not permitted" for k in p if k not in ("CountryRuleSet", "DeletionProtectionEnabled", "Tags"))
    if "DeletionProtectionEnabled" in p and not isinstance(p["DeletionProtectionEnabled"], bool):
        out.append(f"#/DeletionProtectionEnabled: expected type: Boolean, found: {_type_name(p['DeletionProtectionEnabled'])}")
    rules = p.get("CountryRuleSet", {})
    if not isinstance(rules, dict):
        out.append(f"#/CountryRuleSet: expected type: JSONObject, found: {_type_name(rules)}")
        return out
    out.extend(f"#/CountryRuleSet: extraneous key [{k}] is not permitted" for k in rules if k not in ("SMS", "VOICE", "MMS"))
    for cap, items in rules.items():
        if not isinstance(items, list):
            out.append(f"#/CountryRuleSet/{cap}: expected type: JSONArray, found: {_type_name(items)}")
            continue
        for i, rule in enumerate(items):
            path = f"#/CountryRuleSet/{cap}/{i}"
            if not isinstance(rule, dict) or set(rule) != {"CountryCode", "ProtectStatus"}:
                out.append(f"{path}: required keys [CountryCode, ProtectStatus], and no other")
            elif not re.fullmatch(r"[A-Z]{2}", str(rule["CountryCode"])):
                out.append(f"{path}/CountryCode: failed validation constraint for keyword [pattern]")
            elif rule["ProtectStatus"] not in _STATUSES:
                out.append(f"{path}/ProtectStatus: {rule['ProtectStatus']} is not a valid enum value")
    return out


class ProtectConfigurationResource(CloudFormationModel):
    __module__ = "moto.cloudformation.tocsin_sms_voice"

    def __init__(self, pid: str, arn: str, logical_id: str) -> None:
        self.id = pid
        self.arn = arn
        self.logical_id = logical_id

    @property
    def physical_resource_id(self) -> str:
        return self.id  # Ref: the primaryIdentifier, ProtectConfigurationId [SCHEMA]

    @staticmethod
    def cloudformation_name_type() -> str:
        return ""

    @staticmethod
    def cloudformation_type() -> str:
        return PROTECT_CONFIGURATION

    @classmethod
    def has_cfn_attr(cls, attr: str) -> bool:
        return attr in ("Arn", "ProtectConfigurationId")

    def get_cfn_attribute(self, attribute_name: str) -> Any:
        if attribute_name == "Arn":
            return self.arn
        if attribute_name == "ProtectConfigurationId":
            return self.id
        raise KeyError(attribute_name)

    @classmethod
    def create_from_cloudformation_json(  # type: ignore[misc]
        cls, resource_name: str, cloudformation_json: Any, account_id: str, region_name: str, **kwargs: Any
    ) -> "ProtectConfigurationResource":
        logical_id = kwargs.get("LogicalId", resource_name)
        p = cloudformation_json.get("Properties", {})
        errors = _protect_schema_errors(p)
        if errors:
            raise HandlerFailure(
                "InvalidRequest", f"Properties validation failed for resource {logical_id} with message: {errors}"
            )
        request: dict[str, Any] = {"DeletionProtectionEnabled": bool(p.get("DeletionProtectionEnabled", False))}
        if p.get("Tags"):
            request["Tags"] = p["Tags"]
        created = _eum(account_id, region_name, "CreateProtectConfiguration", request)
        resource = cls(created["ProtectConfigurationId"], created["ProtectConfigurationArn"], logical_id)
        for cap, rules in p.get("CountryRuleSet", {}).items():
            if rules:
                updates = {r["CountryCode"]: {"ProtectStatus": r["ProtectStatus"]} for r in rules}
                _eum(
                    account_id,
                    region_name,
                    "UpdateProtectConfigurationCountryRuleSet",
                    {"ProtectConfigurationId": resource.id, "NumberCapability": cap, "CountryRuleSetUpdates": updates},
                )
        return resource

    def delete(self, account_id: str, region_name: str) -> None:
        try:
            _eum(account_id, region_name, "DeleteProtectConfiguration", {"ProtectConfigurationId": self.id})
        except HandlerFailure as e:
            if e.handler_code != "NotFound":  # already gone: deleted, to CloudFormation [CONTRACT]
                raise


_moto_log_group_from_cloudformation = LogGroup.create_from_cloudformation_json


def _log_group_with_its_key(
    resource_name: str, cloudformation_json: Any, account_id: str, region_name: str, **kwargs: Any
) -> LogGroup:
    """moto's LogGroup drops the KmsKeyId property (its backend reads `kmsKeyId`): kept, so that
    DescribeLogGroups shows the key a deployed group is encrypted with, as on AWS."""
    group = _moto_log_group_from_cloudformation(resource_name, cloudformation_json, account_id, region_name, **kwargs)
    key = cloudformation_json.get("Properties", {}).get("KmsKeyId")
    if key:
        group.kms_key_id = key
    return group


_moto_delete = ResourceMap.delete


def _delete_keeping_retain_except_on_create(self: ResourceMap) -> None:
    """A stack's deletion keeps RetainExceptOnCreate resources, as it keeps Retain ones."""
    changed = [
        r for r in self._resource_json_map.values() if r.get("DeletionPolicy") == "RetainExceptOnCreate"
    ]
    for r in changed:
        r["DeletionPolicy"] = "Retain"
    try:
        _moto_delete(self)
    finally:
        for r in changed:
            r["DeletionPolicy"] = "RetainExceptOnCreate"


def _roll_back(resource_map: ResourceMap) -> None:
    """Deletes what a failed create made, but Retain resources; several passes for dependencies."""
    created = [
        logical
        for logical, r in resource_map._resource_json_map.items()
        if isinstance(resource_map._parsed_resources.get(logical), CloudFormationModel)
        and r.get("DeletionPolicy") != "Retain"
    ]
    for _ in range(len(created) + 1):
        left = []
        for logical in created:
            resource = resource_map._parsed_resources[logical]
            try:
                resource_map._delete_resource(resource, resource_map._resource_json_map[logical])
            except Exception:  # noqa: BLE001 - a dependency still in place: the next pass
                left.append(logical)
            else:
                resource_map._parsed_resources.pop(logical)
        if not left or len(left) == len(created):
            break
        created = left
    # moto makes resources lazily, when something reads them (DescribeStacks resolving an output,
    # ListStackResources): a rolled-back stack keeps only what it retained, and has no outputs.
    resource_map._resource_json_map = {
        logical: r for logical, r in resource_map._resource_json_map.items() if logical in resource_map._parsed_resources
    }


_moto_create_resources = Stack.create_resources


def _create_resources_or_roll_back(self: Stack) -> None:
    try:
        _moto_create_resources(self)
    except Exception:
        self.status = "ROLLBACK_IN_PROGRESS"
        _roll_back(self.resource_map)
        self.output_map._output_json_map = {}
        self.status = "ROLLBACK_COMPLETE"
        self._add_stack_event("ROLLBACK_COMPLETE")
        raise


ResourceMap.delete = _delete_keeping_retain_except_on_create  # type: ignore[method-assign]
LogGroup.create_from_cloudformation_json = staticmethod(_log_group_with_its_key)  # type: ignore[method-assign,assignment]
Stack.create_resources = _create_resources_or_roll_back  # type: ignore[method-assign]


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    runpy.run_path(os.path.join(here, "moto_serial.py"), run_name="__main__")
