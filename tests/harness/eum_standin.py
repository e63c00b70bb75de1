"""A local stand-in for AWS End User Messaging SMS (`pinpoint-sms-voice-v2`), mounted inside the moto
process by moto_serial.py: the SDK client stays real, only the server is ours.

moto 5.2.5 has no backend for this service. This module answers its AWS JSON 1.0 protocol
(`X-Amz-Target: PinpointSMSVoiceV2.<Operation>`), validates every request against the service's own
API model as botocore ships it (never hand-copied limits), plays the carriers behind it, and writes
each message's events into moto's CloudWatch Logs backend in-process, so the events carry moto's
event ids and `FilterLogEvents` through the SDK finds them.

Sources (cited where used):
- [API]   the service model, botocore `data/pinpoint-sms-voice-v2/2022-03-31/service-2.json`
          (shapes, constraints, error shapes and their reason enums).
- [TYPES] "Event types for SMS, MMS, and voice", AWS End User Messaging SMS User Guide,
          https://docs.aws.amazon.com/sms-voice/latest/userguide/configuration-sets-event-types.html
- [FORMAT] "Example SMS event data" / "Messaging events", same guide,
          https://docs.aws.amazon.com/sms-voice/latest/userguide/configuration-sets-event-format.html
          (also https://docs.aws.amazon.com/end-user-messaging/latest/userguide/nx-features-messaging-events.html)
- [STATUS] "View a phone number status and capabilities", same guide,
          https://docs.aws.amazon.com/sms-voice/latest/userguide/phone-numbers-status.html
- [KEYWORDS] "Required opt-out keywords", same guide,
          https://docs.aws.amazon.com/sms-voice/latest/userguide/keywords-required.html
- [TWOWAY] "Two-way SMS messaging" and UpdatePhoneNumber ([API]): inbound messages published to
          the number's TwoWayChannelArn (an SNS topic) as JSON with originationNumber,
          destinationNumber, messageKeyword, messageBody, inboundMessageId,
          previousPublishedMessageId.
- [SAR]   Service Authorization Reference, "Actions, resources, and condition keys for AWS End User
          Messaging SMS and Voice V2" (the ARN formats below; the IAM side is in src/iam/request.rs).

What it rejects, in the order SendTextMessage checks (as best known): the API-level throttle a test
armed; the model (unknown members, required members, types, lengths, patterns, ranges, enums, list
and map sizes, nested shapes); the configuration set; the protect configuration (named, or the set's) and its rule for the
destination's country (BLOCK); the origination identity (exists, ACTIVE); no identity at all; the
sandbox; the opt-out list; the monthly spend; MaxPrice; the identity's message
parts per second. An operation it does not implement answers an error naming it, never a success.

Usage: imported by moto_serial.py; `StandIn.wsgi(...)` answers a request or returns None (not ours).
"""

from __future__ import annotations

import json
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import botocore.loaders

try:  # moto's own default account: the account every request without a known key belongs to
    from moto.core import DEFAULT_ACCOUNT_ID
except ImportError:  # pragma: no cover - moto is always present where this runs
    DEFAULT_ACCOUNT_ID = "123456789012"

SERVICE = "pinpoint-sms-voice-v2"
TARGET_PREFIX = "PinpointSMSVoiceV2."
CONTROL_PREFIX = "/tocsin-eum/"
DEFAULT_REGION = "us-east-1"

# --------------------------------------------------------------------------------------------------
# The model: loaded at import, so a botocore without this service fails the emulator's start loudly.
# --------------------------------------------------------------------------------------------------

MODEL: dict[str, Any] = botocore.loaders.create_loader().load_service_model(SERVICE, "service-2")
SHAPES: dict[str, Any] = MODEL["shapes"]
OPERATIONS: dict[str, Any] = MODEL["operations"]
# Every pattern compiled once: one that Python cannot compile must stop the emulator, not pass input.
PATTERNS: dict[str, re.Pattern[str]] = {
    name: re.compile(shape["pattern"]) for name, shape in SHAPES.items() if "pattern" in shape
}


@dataclass(frozen=True)
class FieldError:
    name: str
    message: str
    missing: bool = False


def _join(path: str, member: str) -> str:
    return f"{path}.{member}" if path else member


def validate(shape_name: str, value: Any, path: str, errors: list[FieldError]) -> None:
    """Checks `value` against the model's shape `shape_name`, appending every violation.

    Patterns are matched whole (`re.fullmatch`). Smithy leaves @pattern unanchored, but the model's
    own patterns are written to be read whole (ContextValue `(?!\\s)^[\\s\\S]+(?<!\\s)` means "no
    leading or trailing whitespace" only when matched whole), and a full match refuses everything a
    search refuses and more: the stand-in errs on AWS's harsher side. Lengths count code points, as
    Smithy's @length does for strings.
    """
    shape = SHAPES[shape_name]
    kind = shape["type"]
    name = path or "(request)"
    if kind == "structure":
        if not isinstance(value, dict):
            errors.append(FieldError(name, "must be an object"))
            return
        members = shape.get("members", {})
        for key in value:
            if key not in members:
                # AWS's behaviour for a member its model lacks is undocumented; never accept one
                # silently (a typo in an adapter must fail here, not be ignored as AWS might).
                errors.append(FieldError(_join(path, key), f"{key} is not a member of {shape_name}"))
        for key in shape.get("required", []):
            if value.get(key) is None:
                errors.append(FieldError(_join(path, key), "Member must not be null", missing=True))
        for key, inner in value.items():
            if key in members and inner is not None:
                validate(members[key]["shape"], inner, _join(path, key), errors)
    elif kind == "list":
        if not isinstance(value, list):
            errors.append(FieldError(name, "must be a list"))
            return
        _size(shape, len(value), name, "items", errors)
        for i, item in enumerate(value):
            validate(shape["member"]["shape"], item, f"{path}[{i}]", errors)
    elif kind == "map":
        if not isinstance(value, dict):
            errors.append(FieldError(name, "must be an object"))
            return
        _size(shape, len(value), name, "entries", errors)
        for key, inner in value.items():
            entry = f"{path}[{json.dumps(key)}]"
            validate(shape["key"]["shape"], key, f"{entry} (key)", errors)
            validate(shape["value"]["shape"], inner, entry, errors)
    elif kind == "string":
        if not isinstance(value, str):
            errors.append(FieldError(name, "must be a string"))
            return
        _size(shape, len(value), name, "characters", errors)
        pattern = PATTERNS.get(shape_name)
        if pattern is not None and not pattern.fullmatch(value):
            errors.append(FieldError(name, f"Member must satisfy regular expression pattern: {shape['pattern']}"))
        if "enum" in shape and value not in shape["enum"]:
            errors.append(FieldError(name, f"Member must satisfy enum value set: {shape['enum']}"))
    elif kind in ("integer", "long"):
        if isinstance(value, bool) or not isinstance(value, int):
            errors.append(FieldError(name, "must be an integer"))
            return
        _range(shape, value, name, errors)
    elif kind in ("double", "float"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            errors.append(FieldError(name, "must be a number"))
            return
        _range(shape, value, name, errors)
    elif kind == "boolean":
        if not isinstance(value, bool):
            errors.append(FieldError(name, "must be a boolean"))
    elif kind == "timestamp":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            errors.append(FieldError(name, "must be epoch seconds"))
    elif kind == "blob":
        if not isinstance(value, str):
            errors.append(FieldError(name, "must be base64 text"))
    else:  # pragma: no cover - every kind the model uses is above
        errors.append(FieldError(name, f"shape kind {kind} is not validated by the stand-in"))


def _size(shape: dict[str, Any], n: int, name: str, unit: str, errors: list[FieldError]) -> None:
    if "min" in shape and n < shape["min"]:
        errors.append(FieldError(name, f"Member must have length greater than or equal to {shape['min']} ({unit})"))
    if "max" in shape and n > shape["max"]:
        errors.append(FieldError(name, f"Member must have length less than or equal to {shape['max']} ({unit})"))


def _range(shape: dict[str, Any], n: float, name: str, errors: list[FieldError]) -> None:
    if "min" in shape and n < shape["min"]:
        errors.append(FieldError(name, f"Member must have value greater than or equal to {shape['min']}"))
    if "max" in shape and n > shape["max"]:
        errors.append(FieldError(name, f"Member must have value less than or equal to {shape['max']}"))


# --------------------------------------------------------------------------------------------------
# Errors, as AWS JSON 1.0 answers them ([API] error shapes: Message, Reason, Fields, ResourceType…).
# --------------------------------------------------------------------------------------------------


class ServiceError(Exception):
    def __init__(self, type_: str, message: str, status: int = 400, **fields: Any) -> None:
        super().__init__(message)
        self.type_ = type_
        self.message = message
        self.status = status
        self.fields = {k: v for k, v in fields.items() if v is not None}

    def body(self) -> dict[str, Any]:
        return {"__type": self.type_, "Message": self.message, **self.fields}


def validation_error(reason: str, errors: Iterable[FieldError] = (), message: str | None = None) -> ServiceError:
    fields = [{"Name": e.name, "Message": e.message} for e in errors]
    # Coral's wording: "1 validation error detected: …", "2 validation errors detected: …".
    n = len(fields)
    text = message or (
        f"{n} validation error{'' if n == 1 else 's'} detected: "
        + "; ".join(f"{f['Name']}: {f['Message']}" for f in fields)
    )
    return ServiceError("ValidationException", text, Reason=reason, Fields=fields or None)


def not_found(resource_type: str, resource_id: str) -> ServiceError:
    return ServiceError(
        "ResourceNotFoundException",
        f"The {resource_type} {resource_id} does not exist.",
        ResourceType=resource_type,
        ResourceId=resource_id,
    )


def conflict(reason: str, message: str, resource_type: str | None = None, resource_id: str | None = None) -> ServiceError:
    return ServiceError("ConflictException", message, Reason=reason, ResourceType=resource_type, ResourceId=resource_id)


def quota(reason: str, message: str) -> ServiceError:
    return ServiceError("ServiceQuotaExceededException", message, Reason=reason)


def throttled() -> ServiceError:
    return ServiceError("ThrottlingException", "Rate exceeded")


# --------------------------------------------------------------------------------------------------
# The carrier: event types, statuses, and what each configured behaviour produces.
# --------------------------------------------------------------------------------------------------

# [TYPES]: the SMS event types and what each means (TEXT_SENT is in the model's enum but "not
# supported" as a matching type, per the model's EventDestination documentation).
TEXT_EVENT_TYPES: dict[str, str] = {
    "TEXT_DELIVERED": "Delivered: the message was delivered; depending on the destination country "
    "TEXT_DELIVERED and TEXT_SUCCESSFUL may be used interchangeably",
    "TEXT_SUCCESSFUL": "Successful: the message was accepted by the recipient's carrier",
    "TEXT_QUEUED": "Queued: the message is queued for delivery, but not delivered yet",
    "TEXT_PENDING": "Pending: the message is in the process of being delivered, but hasn't been delivered (or failed) yet",
    "TEXT_BLOCKED": "Blocked: the recipient's device or carrier is blocking messages sent to that recipient",
    "TEXT_TTL_EXPIRED": "TTL expired: delivering the message took longer than the TTL given when it was sent",
    "TEXT_CARRIER_UNREACHABLE": "Carrier unreachable: a temporary error on the recipient's carrier network",
    "TEXT_INVALID": "Invalid: the destination phone number is not valid",
    "TEXT_INVALID_MESSAGE": "Invalid message: the SMS message body is not valid and can't be delivered",
    "TEXT_CARRIER_BLOCKED": "Carrier blocked: the recipient's carrier blocked delivery (malicious or abusive content)",
    "TEXT_UNREACHABLE": "Unreachable: the recipient's device is unavailable (not on a mobile network, or off)",
    "TEXT_SPAM": "Spam: the recipient's carrier identified unsolicited commercial content and blocked it",
    "TEXT_UNKNOWN": "Unknown: the message couldn't be delivered for a reason no other event type covers",
    "TEXT_PROTECT_BLOCKED": "Protect blocked: blocked by a protect configuration",
}

# messageStatus is the event type without its TEXT_ prefix in every published example ([FORMAT]:
# TEXT_SUCCESSFUL/SUCCESSFUL; AWS's own UNKNOWN after 72 h). messageStatusDescription: only
# SUCCESSFUL's text is documented ([FORMAT]); DELIVERED's is the one a production consumer's test
# fixtures record (cds-snc/notification-api); every other text is the stand-in's own wording from
# [TYPES]. A consumer must key on eventType/messageStatus, never on this text.
STATUS_DESCRIPTIONS: dict[str, str] = {
    "SUCCESSFUL": "Message has been accepted by phone carrier",
    "DELIVERED": "Message has been accepted by phone",
    "PENDING": "Message is in the process of being delivered",
    "QUEUED": "Message is queued for delivery",
    "BLOCKED": "The recipient's device or carrier is blocking messages to this recipient",
    "TTL_EXPIRED": "The message was not handed off before its time to live expired",
    "CARRIER_UNREACHABLE": "Temporary error on the recipient's carrier network",
    "INVALID": "The destination phone number is not valid",
    "INVALID_MESSAGE": "The message body is not valid",
    "CARRIER_BLOCKED": "The recipient's carrier blocked this message",
    "UNREACHABLE": "The recipient's device is unreachable",
    "SPAM": "The recipient's carrier identified this message as spam",
    "UNKNOWN": "No final event was received from the carrier",
}

# What the carrier does per behaviour: (event type, isFinal) in order. [TYPES] documents no fixed
# sequence; "deliver" is the two-step sequence production consumers record (TEXT_SUCCESSFUL not
# final, then TEXT_DELIVERED final), "delivered_successful_final" the country where TEXT_SUCCESSFUL
# is final and no TEXT_DELIVERED follows ([FORMAT]'s example). A failure is one final event.
BEHAVIOURS: dict[str, list[tuple[str, bool]]] = {
    "deliver": [("TEXT_SUCCESSFUL", False), ("TEXT_DELIVERED", True)],
    "delivered_successful_final": [("TEXT_SUCCESSFUL", True)],
    "blocked": [("TEXT_BLOCKED", True)],
    "invalid": [("TEXT_INVALID", True)],
    "invalid_message": [("TEXT_INVALID_MESSAGE", True)],
    "unreachable": [("TEXT_UNREACHABLE", True)],
    "carrier_unreachable": [("TEXT_CARRIER_UNREACHABLE", True)],
    "spam": [("TEXT_SPAM", True)],
    "carrier_blocked": [("TEXT_CARRIER_BLOCKED", True)],
    "unknown": [("TEXT_UNKNOWN", True)],
    "ttl_expired": [("TEXT_TTL_EXPIRED", True)],
    # No event at all: after 72 h AWS itself reports UNKNOWN ([FORMAT]); `POST /tocsin-eum/give-up`.
    "silent": [],
    # Delivered, then the person texts STOP: the number joins the identity's opt-out list.
    "opted_out_by_reply": [("TEXT_SUCCESSFUL", False), ("TEXT_DELIVERED", True)],
}

# Events a carrier produces before it knows the number (no mcc/mnc/carrier on them: [FORMAT] says
# mcc and mnc are optional and may not be present).
NO_NETWORK = {"TEXT_INVALID", "TEXT_UNKNOWN", "TEXT_TTL_EXPIRED"}

# E.164 calling codes the stand-in has numbers and countries for (longest prefix wins).
CALLING_CODES: dict[str, str] = {
    "1": "US", "44": "GB", "49": "DE", "33": "FR", "34": "ES", "39": "IT", "31": "NL", "46": "SE",
    "61": "AU", "81": "JP", "91": "IN", "52": "MX", "55": "BR", "353": "IE", "64": "NZ",
}
COUNTRY_CODES: dict[str, str] = {iso: code for code, iso in CALLING_CODES.items()}
COUNTRY_CODES["CA"] = "1"
# The countries a protect configuration's rule set lists, each ALLOW when the configuration is made
# ([API] CreateProtectConfiguration: "By default all country rule sets for each capability are set
# to ALLOW"; the model's country rule set is a map of ISO 3166-1 alpha-2 codes, at most 300). The
# stand-in lists every ISO 3166-1 alpha-2 country; a code outside it is refused as AWS refuses an
# unsupported one.
RULE_SET_COUNTRIES: tuple[str, ...] = tuple(
    """AD AE AF AG AI AL AM AO AQ AR AS AT AU AW AX AZ BA BB BD BE BF BG BH BI BJ BL BM BN BO BQ BR BS
    BT BV BW BY BZ CA CC CD CF CG CH CI CK CL CM CN CO CR CU CV CW CX CY CZ DE DJ DK DM DO DZ EC EE EG
    EH ER ES ET FI FJ FK FM FO FR GA GB GD GE GF GG GH GI GL GM GN GP GQ GR GS GT GU GW GY HK HM HN HR
    HT HU ID IE IL IM IN IO IQ IR IS IT JE JM JO JP KE KG KH KI KM KN KP KR KW KY KZ LA LB LC LI LK LR
    LS LT LU LV LY MA MC MD ME MF MG MH MK ML MM MN MO MP MQ MR MS MT MU MV MW MX MY MZ NA NC NE NF NG
    NI NL NO NP NR NU NZ OM PA PE PF PG PH PK PL PM PN PR PS PT PW PY QA RE RO RS RU RW SA SB SC SD SE
    SG SH SI SJ SK SL SM SN SO SR SS ST SV SX SY SZ TC TD TF TG TH TJ TK TL TM TN TO TR TT TV TW TZ UA
    UG UM US UY UZ VA VC VE VG VI VN VU WF WS YE YT ZA ZM ZW""".split()
)
# A plausible network per country for events (the [FORMAT] example's US network: mcc 310 mnc 800).
NETWORKS: dict[str, tuple[str, str, str]] = {
    "US": ("310", "800", "T-Mobile"),
    "CA": ("302", "610", "Bell Mobility"),
    "GB": ("234", "15", "Vodafone"),
}

# The stand-in's route price per message part (USD) unless a test sets one: the US price the
# production fixtures above record (totalMessagePrice 0.00581 for one part).
DEFAULT_PRICE_PER_PART = 0.00581
# Message parts per second per identity unless a test sets one (stand-in defaults, on the low side:
# a US toll-free number's documented rate is 3 MPS; AWS raises rates only on request).
DEFAULT_MPS: dict[str, int] = {"TOLL_FREE": 3, "TEN_DLC": 1, "LONG_CODE": 1, "SHORT_CODE": 100, "SIMULATOR": 1}
SENDER_ID_MPS = 1
# The model's DryRun documentation: "The MPS limit when using DryRun is five."
DRY_RUN_MPS = 5

# GSM 03.38 basic character set and its extension table (an extension character takes two septets).
GSM_BASIC = set(
    "@£$¥èéùìòÇ\nØø\rÅåΔ_ΦΓΛΩΠΨΣΘΞÆæßÉ !\"#¤%&'()*+,-./0123456789:;<=>?"
    "¡ABCDEFGHIJKLMNOPQRSTUVWXYZÄÖÑÜ§¿abcdefghijklmnopqrstuvwxyzäöñüà"
)
GSM_EXTENSION = set("^{}\\[~]|€\f")


def encoding_and_parts(body: str) -> tuple[str, int]:
    """("GSM" or "Unicode", message parts): 160 septets in one part, 153 per part when split; 70
    UCS-2 units in one part, 67 when split. ([FORMAT] lists GSM and Unicode as the encodings.)"""
    if all(c in GSM_BASIC or c in GSM_EXTENSION for c in body):
        septets = sum(2 if c in GSM_EXTENSION else 1 for c in body)
        return "GSM", 1 if septets <= 160 else -(-septets // 153)
    units = len(body.encode("utf-16-le")) // 2
    return "Unicode", 1 if units <= 70 else -(-units // 67)


def country_of(number: str) -> str | None:
    digits = number.lstrip("+")
    for n in (3, 2, 1):
        if digits[:n] in CALLING_CODES:
            return CALLING_CODES[digits[:n]]
    return None


def now_ms() -> int:
    return int(time.time() * 1000)


# --------------------------------------------------------------------------------------------------
# The account's resources.
# --------------------------------------------------------------------------------------------------


@dataclass
class OptOutList:
    name: str
    arn: str
    created: float
    # number → (opted out at, epoch seconds; the end user opted out)
    numbers: dict[str, tuple[float, bool]] = field(default_factory=dict)

    def info(self) -> dict[str, Any]:
        return {"OptOutListArn": self.arn, "OptOutListName": self.name, "CreatedTimestamp": self.created}


@dataclass
class PhoneNumber:
    id: str
    arn: str
    number: str
    iso: str
    message_type: str
    capabilities: list[str]
    number_type: str
    opt_out_list: str
    created: float
    status: str = "PENDING"  # [STATUS]: "When you first purchase a phone number, ... PENDING"
    two_way: bool = False
    two_way_channel: str | None = None
    two_way_role: str | None = None
    self_managed_opt_outs: bool = False
    international: bool = False
    deletion_protection: bool = False
    pool_id: str | None = None
    registration_id: str | None = None

    def info(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "PhoneNumberArn": self.arn,
            "PhoneNumberId": self.id,
            "PhoneNumber": self.number,
            "Status": self.status,
            "IsoCountryCode": self.iso,
            "MessageType": self.message_type,
            "NumberCapabilities": self.capabilities,
            "NumberType": self.number_type,
            "MonthlyLeasingPrice": "2.00" if self.number_type == "TOLL_FREE" else "1.00",
            "TwoWayEnabled": self.two_way,
            "SelfManagedOptOutsEnabled": self.self_managed_opt_outs,
            "OptOutListName": self.opt_out_list,
            "InternationalSendingEnabled": self.international,
            "DeletionProtectionEnabled": self.deletion_protection,
            "CreatedTimestamp": self.created,
        }
        if self.two_way_channel:
            out["TwoWayChannelArn"] = self.two_way_channel
        if self.two_way_role:
            out["TwoWayChannelRole"] = self.two_way_role
        if self.pool_id:
            out["PoolId"] = self.pool_id
        if self.registration_id:
            out["RegistrationId"] = self.registration_id
        return out


@dataclass
class SenderId:
    sender_id: str
    iso: str
    arn: str
    message_types: list[str]
    created: float
    registered: bool = False
    deletion_protection: bool = False

    def info(self) -> dict[str, Any]:
        return {
            "SenderIdArn": self.arn,
            "SenderId": self.sender_id,
            "IsoCountryCode": self.iso,
            "MessageTypes": self.message_types,
            "MonthlyLeasingPrice": "0.00",
            "DeletionProtectionEnabled": self.deletion_protection,
            "Registered": self.registered,
        }


@dataclass
class Pool:
    id: str
    arn: str
    message_type: str
    opt_out_list: str
    created: float
    members: list[str] = field(default_factory=list)  # phone number ids and sender-id ARNs
    deletion_protection: bool = False

    def info(self) -> dict[str, Any]:
        return {
            "PoolArn": self.arn,
            "PoolId": self.id,
            "Status": "ACTIVE",
            "MessageType": self.message_type,
            "TwoWayEnabled": False,
            "SelfManagedOptOutsEnabled": False,
            "OptOutListName": self.opt_out_list,
            "SharedRoutesEnabled": False,
            "DeletionProtectionEnabled": self.deletion_protection,
            "CreatedTimestamp": self.created,
        }


@dataclass
class ConfigurationSet:
    name: str
    arn: str
    created: float
    destinations: dict[str, dict[str, Any]] = field(default_factory=dict)  # name → EventDestination
    protect_configuration: str | None = None  # the associated protect configuration's id

    def info(self) -> dict[str, Any]:
        out = {
            "ConfigurationSetArn": self.arn,
            "ConfigurationSetName": self.name,
            "EventDestinations": list(self.destinations.values()),
            "CreatedTimestamp": self.created,
        }
        if self.protect_configuration is not None:
            out["ProtectConfigurationId"] = self.protect_configuration
        return out


@dataclass
class ProtectConfiguration:
    """Country rules per capability: every country ALLOW when made ([API] CreateProtectConfiguration)."""

    id: str
    arn: str
    created: float
    deletion_protection: bool
    rules: dict[str, dict[str, str]] = field(
        default_factory=lambda: {cap: dict.fromkeys(RULE_SET_COUNTRIES, "ALLOW") for cap in ("SMS", "VOICE", "MMS")}
    )

    def info(self) -> dict[str, Any]:
        return {
            "ProtectConfigurationArn": self.arn,
            "ProtectConfigurationId": self.id,
            "CreatedTimestamp": self.created,
            "AccountDefault": False,
            "DeletionProtectionEnabled": self.deletion_protection,
        }

    def rule_set(self, capability: str) -> dict[str, Any]:
        return {
            "ProtectConfigurationArn": self.arn,
            "ProtectConfigurationId": self.id,
            "NumberCapability": capability,
            "CountryRuleSet": {iso: {"ProtectStatus": status} for iso, status in self.rules.get(capability, {}).items()},
        }


@dataclass
class Carrier:
    """What the carrier does with messages to one destination (or to any, as the default)."""

    behaviour: str = "deliver"
    hold: bool = False  # events kept until POST /tocsin-eum/release: late events
    duplicate: bool = False  # every event written twice
    pending: bool = False  # a TEXT_PENDING (not final) before the behaviour's events
    price_per_part: float = DEFAULT_PRICE_PER_PART
    network: tuple[str, str, str] | None = None  # (mcc, mnc, carrier name); None: the country's


@dataclass
class Message:
    message_id: str
    destination: str
    origination: str  # the number (or sender ID) the message leaves from
    origination_identity: str | None  # as the request named it
    identity_key: str  # phone number id / sender-id ARN: whose opt-out list and rate apply
    opt_out_list: str | None
    body: str
    message_type: str
    context: dict[str, str] | None
    time_to_live: int | None
    max_price: str | None
    configuration_set: str | None
    parts: int
    encoding: str
    price: float
    requested_at_ms: int
    behaviour: str
    origin_iso: str
    final_written: bool = False

    def record(self) -> dict[str, Any]:
        return {
            "message_id": self.message_id,
            "destination": self.destination,
            "origination": self.origination,
            "origination_identity": self.origination_identity,
            "body": self.body,
            "message_type": self.message_type,
            "context": self.context,
            "time_to_live": self.time_to_live,
            "max_price": self.max_price,
            "configuration_set": self.configuration_set,
            "parts": self.parts,
            "encoding": self.encoding,
            "price_usd": self.price,
            "requested_at_ms": self.requested_at_ms,
            "behaviour": self.behaviour,
        }


@dataclass
class Held:
    region: str
    group: str
    stream: str
    event: dict[str, Any]
    message: Message
    duplicate: bool


class Region:
    """One account's End User Messaging in one region."""

    def __init__(self, name: str, account: str) -> None:
        self.name = name
        self.account = account
        created = time.time()
        # "Default" exists from the start: every number without a named list uses it.
        self.opt_out_lists: dict[str, OptOutList] = {"Default": OptOutList("Default", self.arn("opt-out-list/Default"), created)}
        self.phone_numbers: dict[str, PhoneNumber] = {}
        self.sender_ids: dict[str, SenderId] = {}  # by ARN
        self.pools: dict[str, Pool] = {}
        self.configuration_sets: dict[str, ConfigurationSet] = {}
        self.protect_configurations: dict[str, ProtectConfiguration] = {}  # by id
        # A new account: in the sandbox, 1 USD a month (the model's DescribeAccountAttributes: "New
        # accounts are placed into an SMS or voice sandbox"; README: a new account's 1 USD limit).
        self.tier = "SANDBOXED"
        self.spend_limit = 1
        self.max_spend_limit = 1
        self.spend_overridden = False
        self.spend = 0.0
        self.spend_exhausted = False
        self.verified: dict[str, tuple[str, float]] = {}  # number → (id, created)
        self.carriers: dict[str, Carrier] = {}
        self.default_carrier = Carrier()
        self.throttle_next = 0
        self.mps: dict[str, int] = {}  # identity key → parts per second
        self.sent_parts: dict[str, list[tuple[float, int]]] = {}
        self.messages: list[Message] = []
        self.held: list[Held] = []
        self.dropped = 0
        self.counter = 0

    def arn(self, resource: str) -> str:
        return f"arn:aws:sms-voice:{self.name}:{self.account}:{resource}"

    def next_number(self, iso: str, number_type: str) -> str:
        self.counter += 1
        code = COUNTRY_CODES.get(iso)
        if code is None:
            raise ServiceError(
                "InternalServerException",
                f"the tocsin stand-in has no number inventory for {iso}",
                status=500,
            )
        if code == "1":
            prefix = "1833555" if number_type == "TOLL_FREE" else "1206555"
            return f"+{prefix}{self.counter:04d}"
        return f"+{code}7700{self.counter:06d}"

    # -- resolving names, ids and ARNs ------------------------------------------------------------

    def _name_of(self, name_or_arn: str, kind: str) -> str:
        marker = f":{kind}/"
        return name_or_arn.split(marker, 1)[1] if name_or_arn.startswith("arn:") and marker in name_or_arn else name_or_arn

    def configuration_set(self, name_or_arn: str) -> ConfigurationSet:
        cs = self.configuration_sets.get(self._name_of(name_or_arn, "configuration-set"))
        if cs is None:
            raise not_found("configuration-set", name_or_arn)
        return cs

    def protect_configuration(self, id_or_arn: str) -> ProtectConfiguration:
        pc = self.protect_configurations.get(self._name_of(id_or_arn, "protect-configuration"))
        if pc is None:
            raise not_found("protect-configuration", id_or_arn)
        return pc

    def opt_out_list(self, name_or_arn: str) -> OptOutList:
        lst = self.opt_out_lists.get(self._name_of(name_or_arn, "opt-out-list"))
        if lst is None:
            raise not_found("opt-out-list", name_or_arn)
        return lst

    def phone_number(self, id_number_or_arn: str) -> PhoneNumber | None:
        key = self._name_of(id_number_or_arn, "phone-number")
        for p in self.phone_numbers.values():
            if key in (p.id, p.number):
                return p
        return None

    def pool(self, id_or_arn: str) -> Pool | None:
        return self.pools.get(self._name_of(id_or_arn, "pool"))

    def sender_id(self, id_or_arn: str, iso: str | None) -> SenderId | None:
        if id_or_arn.startswith("arn:"):
            return self.sender_ids.get(id_or_arn)
        matches = [s for s in self.sender_ids.values() if s.sender_id == id_or_arn and (iso is None or s.iso == iso)]
        return matches[0] if matches else None

    def carrier(self, destination: str) -> Carrier:
        return self.carriers.get(destination, self.default_carrier)


# --------------------------------------------------------------------------------------------------
# The service.
# --------------------------------------------------------------------------------------------------

Handler = Callable[["StandIn", Region, dict[str, Any]], dict[str, Any]]
HANDLERS: dict[str, Handler] = {}


def operation(name: str) -> Callable[[Handler], Handler]:
    def register(f: Handler) -> Handler:
        if name not in OPERATIONS:  # the stand-in never answers an operation AWS does not have
            raise RuntimeError(f"{name} is not an operation of {SERVICE}")
        HANDLERS[name] = f
        return f

    return register


def paginate(items: list[dict[str, Any]], request: dict[str, Any], key: str) -> dict[str, Any]:
    start = 0
    token = request.get("NextToken")
    if token is not None:
        if not token.isdigit() or int(token) > len(items):
            raise validation_error("INVALID_NEXT_TOKEN", message=f"NextToken {token} is not valid")
        start = int(token)
    size = request.get("MaxResults", 100)
    out: dict[str, Any] = {key: items[start : start + size]}
    if start + size < len(items):
        out["NextToken"] = str(start + size)
    return out


def apply_filters(items: list[dict[str, Any]], filters: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Filters by the model's dashed names: `iso-country-code` reads IsoCountryCode, and so on."""
    for f in filters or []:
        attribute = "".join(part.capitalize() for part in f["Name"].split("-"))
        if attribute == "NumberCapability":
            attribute = "NumberCapabilities"
        if items and attribute not in items[0]:
            raise ServiceError(
                "InternalServerException",
                f"the tocsin stand-in does not implement the filter {f['Name']}",
                status=500,
            )

        def matches(item: dict[str, Any], values: list[str] = f["Values"], attribute: str = attribute) -> bool:
            v = item.get(attribute)
            if isinstance(v, bool):
                v = str(v).lower()
            if isinstance(v, list):
                return any(str(x) in values for x in v)
            return str(v) in values

        items = [i for i in items if matches(i)]
    return items


class StandIn:
    def __init__(self) -> None:
        self.regions: dict[str, Region] = {}

    def reset(self) -> None:
        self.regions = {}

    def region(self, name: str) -> Region:
        if name not in self.regions:
            self.regions[name] = Region(name, DEFAULT_ACCOUNT_ID)
        return self.regions[name]

    # -- WSGI ----------------------------------------------------------------------------------

    def wsgi(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes] | None:
        """Answers the request if it is ours (the service's target, or the control API)."""
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        path = environ.get("PATH_INFO", "")
        if target.startswith(TARGET_PREFIX):
            status, body = self.call(target[len(TARGET_PREFIX) :], _region_of(environ), _read(environ))
            return _answer(start_response, status, body, "application/x-amz-json-1.0")
        if path.startswith(CONTROL_PREFIX):
            status, body = self.control(environ.get("REQUEST_METHOD", "GET"), path[len(CONTROL_PREFIX) :], environ)
            return _answer(start_response, status, body, "application/json")
        return None

    def call(self, op: str, region_name: str, raw: bytes) -> tuple[int, dict[str, Any]]:
        try:
            if op not in OPERATIONS:
                raise ServiceError("UnknownOperationException", f"{op} is not an operation of {SERVICE}")
            handler = HANDLERS.get(op)
            if handler is None:
                raise ServiceError(
                    "InternalServerException",
                    f"the tocsin stand-in does not implement {op}: teach tests/harness/eum_standin.py",
                    status=500,
                )
            try:
                request = json.loads(raw or b"{}")
            except ValueError as e:
                raise ServiceError("SerializationException", f"the body is not JSON: {e}") from e
            region = self.region(region_name)
            # The front door's throttle comes before anything is read: the request never happened.
            if op == "SendTextMessage" and region.throttle_next > 0:
                region.throttle_next -= 1
                raise throttled()
            errors: list[FieldError] = []
            validate(OPERATIONS[op]["input"]["shape"], request, "", errors)
            if errors:
                reason = "MISSING_PARAMETER" if all(e.missing for e in errors) else "FIELD_VALIDATION_FAILED"
                raise validation_error(reason, errors)
            answer = handler(self, region, request)
            # The stand-in's own answers are held to the model too: a wrong answer is a stand-in bug.
            output = OPERATIONS[op].get("output")
            if output is not None:
                wrong: list[FieldError] = []
                validate(output["shape"], answer, "", wrong)
                if wrong:
                    raise ServiceError(
                        "InternalServerException",
                        "the tocsin stand-in answered outside the model: "
                        + "; ".join(f"{e.name}: {e.message}" for e in wrong),
                        status=500,
                    )
            return 200, answer
        except ServiceError as e:
            return e.status, e.body()

    # -- the control API (not AWS's) -------------------------------------------------------------

    def control(self, method: str, path: str, environ: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        try:
            body: dict[str, Any] = {}
            if method == "POST":
                raw = _read(environ)
                body = json.loads(raw or b"{}")
                if not isinstance(body, dict):
                    raise ControlError("the body must be a JSON object")
            query = dict(p.split("=", 1) for p in environ.get("QUERY_STRING", "").split("&") if "=" in p)
            region = self.region(body.pop("region", None) or query.get("region") or DEFAULT_REGION)
            action = CONTROLS.get((method, path))
            if action is None:
                raise ControlError(f"no control {method} /tocsin-eum/{path}")
            return 200, action(self, region, body)
        except (ControlError, ServiceError, ValueError, KeyError, TypeError) as e:
            text = e.message if isinstance(e, ServiceError) else str(e)
            return 400, {"error": text}


class ControlError(Exception):
    pass


def _region_of(environ: dict[str, Any]) -> str:
    # The SigV4 credential scope: Credential=KEY/DATE/REGION/SERVICE/aws4_request.
    auth = environ.get("HTTP_AUTHORIZATION", "")
    m = re.search(r"Credential=[^/]+/\d{8}/([^/]+)/", auth)
    return m.group(1) if m else DEFAULT_REGION


def _read(environ: dict[str, Any]) -> bytes:
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    return environ["wsgi.input"].read(length) if length > 0 else b""


def _answer(start_response: Callable[..., Any], status: int, body: dict[str, Any], content_type: str) -> list[bytes]:
    data = json.dumps(body).encode()
    reasons = {200: "OK", 400: "Bad Request", 500: "Internal Server Error"}
    start_response(
        f"{status} {reasons.get(status, 'Error')}",
        [
            ("Content-Type", content_type),
            ("Content-Length", str(len(data))),
            ("x-amzn-RequestId", str(uuid.uuid4())),
        ],
    )
    return [data]


# --------------------------------------------------------------------------------------------------
# Operations ([API] for every request and answer shape).
# --------------------------------------------------------------------------------------------------


@operation("DescribeAccountAttributes")
def describe_account_attributes(s: StandIn, r: Region, q: dict[str, Any]) -> dict[str, Any]:
    return paginate([{"Name": "ACCOUNT_TIER", "Value": r.tier}], q, "AccountAttributes")


@operation("DescribeSpendLimits")
def describe_spend_limits(s: StandIn, r: Region, q: dict[str, Any]) -> dict[str, Any]:
    limits = [
        {
            "Name": "TEXT_MESSAGE_MONTHLY_SPEND_LIMIT",
            "EnforcedLimit": r.spend_limit,
            "MaxLimit": r.max_spend_limit,
            "Overridden": r.spend_overridden,
        }
    ]
    return paginate(limits, q, "SpendLimits")


@operation("DescribeVerifiedDestinationNumbers")
def describe_verified_destination_numbers(s: StandIn, r: Region, q: dict[str, Any]) -> dict[str, Any]:
    items = [
        {
            "VerifiedDestinationNumberArn": r.arn(f"verified-destination-number/{vid}"),
            "VerifiedDestinationNumberId": vid,
            "DestinationPhoneNumber": number,
            "Status": "VERIFIED",
            "CreatedTimestamp": created,
        }
        for number, (vid, created) in r.verified.items()
    ]
    ids = q.get("VerifiedDestinationNumberIds")
    if ids:
        for i in ids:
            if not any(x["VerifiedDestinationNumberId"] == i or x["VerifiedDestinationNumberArn"] == i for x in items):
                raise not_found("verified-destination-number", i)
        items = [x for x in items if x["VerifiedDestinationNumberId"] in ids or x["VerifiedDestinationNumberArn"] in ids]
    numbers = q.get("DestinationPhoneNumbers")
    if numbers:
        items = [x for x in items if x["DestinationPhoneNumber"] in numbers]
    items = apply_filters(items, q.get("Filters"))
    return paginate(items, q, "VerifiedDestinationNumbers")


@operation("CreateOptOutList")
def create_opt_out_list(s: StandIn, r: Region, q: dict[str, Any]) -> dict[str, Any]:
    name = q["OptOutListName"]
    if name in r.opt_out_lists:
        raise conflict("RESOURCE_ALREADY_EXISTS", f"Opt-out list {name} already exists", "opt-out-list", name)
    lst = OptOutList(name, r.arn(f"opt-out-list/{name}"), time.time())
    r.opt_out_lists[name] = lst
    return {"OptOutListArn": lst.arn, "OptOutListName": name, "Tags": q.get("Tags", []), "CreatedTimestamp": lst.created}


@operation("DescribeOptOutLists")
def describe_opt_out_lists(s: StandIn, r: Region, q: dict[str, Any]) -> dict[str, Any]:
    names = q.get("OptOutListNames")
    lists = [r.opt_out_list(n) for n in names] if names else list(r.opt_out_lists.values())
    return paginate([lst.info() for lst in lists], q, "OptOutLists")


def _opted_out(lst: OptOutList, number: str) -> dict[str, Any]:
    at, end_user = lst.numbers[number]
    return {"OptedOutNumber": number, "OptedOutTimestamp": at, "EndUserOptedOut": end_user}


@operation("PutOptedOutNumber")
def put_opted_out_number(s: StandIn, r: Region, q: dict[str, Any]) -> dict[str, Any]:
    lst = r.opt_out_list(q["OptOutListName"])
    number = q["OptedOutNumber"]
    lst.numbers.setdefault(number, (time.time(), False))
    return {"OptOutListArn": lst.arn, "OptOutListName": lst.name, **_opted_out(lst, number)}


@operation("DeleteOptedOutNumber")
def delete_opted_out_number(s: StandIn, r: Region, q: dict[str, Any]) -> dict[str, Any]:
    lst = r.opt_out_list(q["OptOutListName"])
    number = q["OptedOutNumber"]
    if number not in lst.numbers:
        # The model: "If the specified destination phone number doesn't exist ... an error is returned."
        raise not_found("opted-out-number", number)
    answer = {"OptOutListArn": lst.arn, "OptOutListName": lst.name, **_opted_out(lst, number)}
    del lst.numbers[number]
    return answer


@operation("DescribeOptedOutNumbers")
def describe_opted_out_numbers(s: StandIn, r: Region, q: dict[str, Any]) -> dict[str, Any]:
    lst = r.opt_out_list(q["OptOutListName"])
    wanted = q.get("OptedOutNumbers")
    if wanted:
        # A number that is NOT in the list: ResourceNotFoundException (ResourceType opted-out-number),
        # not an empty list. The model's documentation of this operation: "If you specify an opted out
        # number that isn't valid, an exception is returned", worded as DescribePhoneNumbers' "If you
        # specify a phone number ID that isn't valid, an error is returned" (a missing id: not found);
        # the ResourceType enum carries `opted-out-number` for exactly this. Unverified against a live
        # account: a caller must read this error as "not opted out" (and ResourceType opt-out-list as
        # a missing list), which also works if AWS ever answers an empty list instead.
        for number in wanted:
            if number not in lst.numbers:
                raise not_found("opted-out-number", number)
        items = [_opted_out(lst, n) for n in wanted]
    else:
        items = [_opted_out(lst, n) for n in lst.numbers]
    items = apply_filters(items, q.get("Filters"))
    return {"OptOutListArn": lst.arn, "OptOutListName": lst.name, **paginate(items, q, "OptedOutNumbers")}


@operation("RequestPhoneNumber")
def request_phone_number(s: StandIn, r: Region, q: dict[str, Any]) -> dict[str, Any]:
    list_name = r.opt_out_list(q["OptOutListName"]).name if q.get("OptOutListName") else "Default"
    pool = None
    if q.get("PoolId"):
        pool = r.pool(q["PoolId"])
        if pool is None:
            raise not_found("pool", q["PoolId"])
    if q["NumberType"] == "SIMULATOR" and q["MessageType"] != "TRANSACTIONAL":
        # The model: "When you request a SIMULATOR phone number, you must set MessageType as TRANSACTIONAL."
        raise validation_error(
            "INVALID_PARAMETER",
            [FieldError("MessageType", "a SIMULATOR number must be TRANSACTIONAL")],
        )
    pid = "phone-" + uuid.uuid4().hex
    p = PhoneNumber(
        id=pid,
        arn=r.arn(f"phone-number/{pid}"),
        number=r.next_number(q["IsoCountryCode"], q["NumberType"]),
        iso=q["IsoCountryCode"],
        message_type=q["MessageType"],
        capabilities=q["NumberCapabilities"],
        number_type=q["NumberType"],
        opt_out_list=list_name,
        created=time.time(),
        international=bool(q.get("InternationalSendingEnabled", False)),
        deletion_protection=bool(q.get("DeletionProtectionEnabled", False)),
        pool_id=pool.id if pool else None,
        registration_id=q.get("RegistrationId"),
    )
    r.phone_numbers[pid] = p
    if pool:
        pool.members.append(pid)
    return {**p.info(), "Tags": q.get("Tags", [])}


@operation("DescribePhoneNumbers")
def describe_phone_numbers(s: StandIn, r: Region, q: dict[str, Any]) -> dict[str, Any]:
    ids = q.get("PhoneNumberIds")
    numbers: list[PhoneNumber] = []
    if ids:
        for i in ids:
            p = r.phone_number(i)
            if p is None:
                raise not_found("phone-number", i)
            numbers.append(p)
    else:
        numbers = list(r.phone_numbers.values())
    items = apply_filters([p.info() for p in numbers], q.get("Filters"))
    return paginate(items, q, "PhoneNumbers")


@operation("UpdatePhoneNumber")
def update_phone_number(s: StandIn, r: Region, q: dict[str, Any]) -> dict[str, Any]:
    """Two-way messaging, self-managed opt-outs, the opt-out list, deletion protection. AWS refuses
    a number that is not active, a number in a pool ([API]: "If the origination phone number is
    associated with a pool, an error is returned"), two-way on without a channel, and a channel
    that is not an SNS topic of the account that exists (or Amazon Connect)."""
    p = r.phone_number(q["PhoneNumberId"])
    if p is None:
        raise not_found("phone-number", q["PhoneNumberId"])
    if p.status != "ACTIVE":
        raise conflict("RESOURCE_NOT_ACTIVE", f"phone number {p.id} is {p.status}", "phone-number", p.id)
    if p.pool_id:
        raise conflict("PHONE_NUMBER_ASSOCIATED_TO_POOL", f"phone number {p.id} is in pool {p.pool_id}", "phone-number", p.id)
    channel = q.get("TwoWayChannelArn", p.two_way_channel)
    enabled = q.get("TwoWayEnabled", p.two_way)
    if enabled and not channel:
        raise validation_error("TWO_WAY_CHANNEL_NOT_PRESENT", message="two-way messaging needs a TwoWayChannelArn")
    if "TwoWayChannelArn" in q and not channel.startswith("connect.") and not _topic_exists(r, channel):
        raise validation_error("TWO_WAY_TOPIC_NOT_PRESENT", message=f"no SNS topic {channel}")
    if "OptOutListName" in q:
        p.opt_out_list = r.opt_out_list(q["OptOutListName"]).name
    p.two_way, p.two_way_channel = enabled, channel
    p.two_way_role = q.get("TwoWayChannelRole", p.two_way_role)
    p.self_managed_opt_outs = q.get("SelfManagedOptOutsEnabled", p.self_managed_opt_outs)
    p.deletion_protection = q.get("DeletionProtectionEnabled", p.deletion_protection)
    p.international = q.get("InternationalSendingEnabled", p.international)
    members = OPERATIONS["UpdatePhoneNumber"]["output"]["shape"]
    return {k: v for k, v in p.info().items() if k in SHAPES[members]["members"]}


def _topic_exists(r: Region, arn: str) -> bool:
    from moto.sns.models import sns_backends  # the backend of the very process serving the SDK

    parts = arn.split(":")
    if len(parts) != 6 or parts[2] != "sns":
        return False
    return arn in sns_backends[parts[4]][parts[3]].topics


@operation("CreatePool")
def create_pool(s: StandIn, r: Region, q: dict[str, Any]) -> dict[str, Any]:
    identity = q["OriginationIdentity"]
    member: str
    opt_out = "Default"
    p = r.phone_number(identity)
    if p is not None:
        if p.pool_id:
            raise conflict("PHONE_NUMBER_ASSOCIATED_TO_POOL", f"{identity} is in pool {p.pool_id}", "phone-number", p.id)
        member, opt_out = p.id, p.opt_out_list
    else:
        sid = r.sender_id(identity, q.get("IsoCountryCode"))
        if sid is None:
            raise not_found("phone-number", identity)
        member = sid.arn
    pool_id = "pool-" + uuid.uuid4().hex
    pool = Pool(pool_id, r.arn(f"pool/{pool_id}"), q["MessageType"], opt_out, time.time(), [member])
    pool.deletion_protection = bool(q.get("DeletionProtectionEnabled", False))
    r.pools[pool_id] = pool
    if p is not None:
        p.pool_id = pool_id
    info = pool.info()
    info["Tags"] = q.get("Tags", [])
    return info


@operation("DescribePools")
def describe_pools(s: StandIn, r: Region, q: dict[str, Any]) -> dict[str, Any]:
    ids = q.get("PoolIds")
    pools: list[Pool] = []
    if ids:
        for i in ids:
            pool = r.pool(i)
            if pool is None:
                raise not_found("pool", i)
            pools.append(pool)
    else:
        pools = list(r.pools.values())
    return paginate(apply_filters([p.info() for p in pools], q.get("Filters")), q, "Pools")


@operation("RequestSenderId")
def request_sender_id(s: StandIn, r: Region, q: dict[str, Any]) -> dict[str, Any]:
    arn = r.arn(f"sender-id/{q['SenderId']}/{q['IsoCountryCode']}")
    if arn in r.sender_ids:
        raise conflict("RESOURCE_ALREADY_EXISTS", f"{q['SenderId']} already exists in {q['IsoCountryCode']}", "sender-id", arn)
    sid = SenderId(q["SenderId"], q["IsoCountryCode"], arn, q.get("MessageTypes", ["TRANSACTIONAL"]), time.time())
    sid.deletion_protection = bool(q.get("DeletionProtectionEnabled", False))
    r.sender_ids[arn] = sid
    return {**sid.info(), "Tags": q.get("Tags", [])}


@operation("DescribeSenderIds")
def describe_sender_ids(s: StandIn, r: Region, q: dict[str, Any]) -> dict[str, Any]:
    wanted = q.get("SenderIds")
    found: list[SenderId] = []
    if wanted:
        for w in wanted:
            sid = r.sender_id(w["SenderId"], w["IsoCountryCode"])
            if sid is None:
                raise not_found("sender-id", f"{w['SenderId']}/{w['IsoCountryCode']}")
            found.append(sid)
    else:
        found = list(r.sender_ids.values())
    return paginate(apply_filters([x.info() for x in found], q.get("Filters")), q, "SenderIds")


@operation("CreateConfigurationSet")
def create_configuration_set(s: StandIn, r: Region, q: dict[str, Any]) -> dict[str, Any]:
    name = q["ConfigurationSetName"]
    if name in r.configuration_sets:
        raise conflict("RESOURCE_ALREADY_EXISTS", f"Configuration set {name} already exists", "configuration-set", name)
    cs = ConfigurationSet(name, r.arn(f"configuration-set/{name}"), time.time())
    r.configuration_sets[name] = cs
    return {"ConfigurationSetArn": cs.arn, "ConfigurationSetName": name, "Tags": q.get("Tags", []), "CreatedTimestamp": cs.created}


@operation("DeleteConfigurationSet")
def delete_configuration_set(s: StandIn, r: Region, q: dict[str, Any]) -> dict[str, Any]:
    cs = r.configuration_set(q["ConfigurationSetName"])
    del r.configuration_sets[cs.name]
    return {
        "ConfigurationSetArn": cs.arn,
        "ConfigurationSetName": cs.name,
        "EventDestinations": list(cs.destinations.values()),
        "CreatedTimestamp": cs.created,
    }


@operation("DescribeConfigurationSets")
def describe_configuration_sets(s: StandIn, r: Region, q: dict[str, Any]) -> dict[str, Any]:
    names = q.get("ConfigurationSetNames")
    sets = [r.configuration_set(n) for n in names] if names else list(r.configuration_sets.values())
    items = [cs.info() for cs in sets]
    for f in q.get("Filters") or []:
        # The configuration-set filters read the event destinations, not a flat attribute.
        if f["Name"] == "event-destination-name":
            items = [i for i in items if any(d["EventDestinationName"] in f["Values"] for d in i["EventDestinations"])]
        elif f["Name"] == "matching-event-types":
            items = [
                i for i in items if any(t in f["Values"] for d in i["EventDestinations"] for t in d["MatchingEventTypes"])
            ]
        else:
            raise ServiceError(
                "InternalServerException", f"the tocsin stand-in does not implement the filter {f['Name']}", status=500
            )
    return paginate(items, q, "ConfigurationSets")


@operation("CreateProtectConfiguration")
def create_protect_configuration(s: StandIn, r: Region, q: dict[str, Any]) -> dict[str, Any]:
    pid = f"protect-{uuid.uuid4().hex}"
    pc = ProtectConfiguration(pid, r.arn(f"protect-configuration/{pid}"), time.time(), bool(q.get("DeletionProtectionEnabled", False)))
    r.protect_configurations[pid] = pc
    return {**pc.info(), "Tags": q.get("Tags", [])}


@operation("DeleteProtectConfiguration")
def delete_protect_configuration(s: StandIn, r: Region, q: dict[str, Any]) -> dict[str, Any]:
    pc = r.protect_configuration(q["ProtectConfigurationId"])
    if pc.deletion_protection:
        raise conflict("DELETION_PROTECTION_ENABLED", f"Protect configuration {pc.id} has deletion protection", "protect-configuration", pc.id)
    if any(cs.protect_configuration == pc.id for cs in r.configuration_sets.values()):
        raise conflict(
            "PROTECT_CONFIGURATION_ASSOCIATED_WITH_CONFIGURATION_SET",
            f"Protect configuration {pc.id} is associated with a configuration set",
            "protect-configuration",
            pc.id,
        )
    del r.protect_configurations[pc.id]
    return pc.info()


@operation("DescribeProtectConfigurations")
def describe_protect_configurations(s: StandIn, r: Region, q: dict[str, Any]) -> dict[str, Any]:
    ids = q.get("ProtectConfigurationIds")
    found = [r.protect_configuration(i) for i in ids] if ids else list(r.protect_configurations.values())
    return paginate(apply_filters([pc.info() for pc in found], q.get("Filters")), q, "ProtectConfigurations")


@operation("GetProtectConfigurationCountryRuleSet")
def get_protect_configuration_country_rule_set(s: StandIn, r: Region, q: dict[str, Any]) -> dict[str, Any]:
    return r.protect_configuration(q["ProtectConfigurationId"]).rule_set(q["NumberCapability"])


@operation("UpdateProtectConfigurationCountryRuleSet")
def update_protect_configuration_country_rule_set(s: StandIn, r: Region, q: dict[str, Any]) -> dict[str, Any]:
    pc = r.protect_configuration(q["ProtectConfigurationId"])
    capability = q["NumberCapability"]
    updates = q["CountryRuleSetUpdates"]
    unknown = sorted(iso for iso in updates if iso not in RULE_SET_COUNTRIES)
    if unknown:
        errors = [FieldError(f"CountryRuleSetUpdates.{iso}", f"{iso} is not a supported country") for iso in unknown]
        raise validation_error("FIELD_VALIDATION_FAILED", errors)
    rules = pc.rules.setdefault(capability, dict.fromkeys(RULE_SET_COUNTRIES, "ALLOW"))
    for iso, rule in updates.items():
        rules[iso] = rule["ProtectStatus"]
    return pc.rule_set(capability)


@operation("AssociateProtectConfiguration")
def associate_protect_configuration(s: StandIn, r: Region, q: dict[str, Any]) -> dict[str, Any]:
    pc = r.protect_configuration(q["ProtectConfigurationId"])
    cs = r.configuration_set(q["ConfigurationSetName"])
    cs.protect_configuration = pc.id  # "This replaces the configuration sets current protect configuration" [API]
    return {
        "ConfigurationSetArn": cs.arn,
        "ConfigurationSetName": cs.name,
        "ProtectConfigurationArn": pc.arn,
        "ProtectConfigurationId": pc.id,
    }


@operation("DisassociateProtectConfiguration")
def disassociate_protect_configuration(s: StandIn, r: Region, q: dict[str, Any]) -> dict[str, Any]:
    pc = r.protect_configuration(q["ProtectConfigurationId"])
    cs = r.configuration_set(q["ConfigurationSetName"])
    if cs.protect_configuration != pc.id:
        raise conflict(
            "PROTECT_CONFIGURATION_NOT_ASSOCIATED_WITH_CONFIGURATION_SET",
            f"Protect configuration {pc.id} is not associated with {cs.name}",
            "protect-configuration",
            pc.id,
        )
    cs.protect_configuration = None
    return {
        "ConfigurationSetArn": cs.arn,
        "ConfigurationSetName": cs.name,
        "ProtectConfigurationArn": pc.arn,
        "ProtectConfigurationId": pc.id,
    }


def _destination(q: dict[str, Any], name: str, enabled: bool, types: list[str]) -> dict[str, Any]:
    targets = [k for k in ("CloudWatchLogsDestination", "KinesisFirehoseDestination", "SnsDestination") if q.get(k)]
    if len(targets) != 1:
        # The model's CreateEventDestination: "You must provide a value for a single event destination
        # ... If an event destination isn't provided then an exception is returned."
        raise validation_error(
            "INVALID_PARAMETER",
            [FieldError("CloudWatchLogsDestination", "exactly one of CloudWatchLogsDestination, KinesisFirehoseDestination, SnsDestination")],
        )
    if targets[0] != "CloudWatchLogsDestination":
        raise ServiceError(
            "InternalServerException",
            f"the tocsin stand-in does not implement {targets[0]} (only CloudWatchLogsDestination)",
            status=500,
        )
    if "TEXT_SENT" in types:
        # The model's EventDestination: "The TEXT_SENT event type is not supported."
        raise validation_error("INVALID_PARAMETER", [FieldError("MatchingEventTypes", "TEXT_SENT is not supported")])
    return {
        "EventDestinationName": name,
        "Enabled": enabled,
        "MatchingEventTypes": types,
        targets[0]: q[targets[0]],
    }


@operation("CreateEventDestination")
def create_event_destination(s: StandIn, r: Region, q: dict[str, Any]) -> dict[str, Any]:
    cs = r.configuration_set(q["ConfigurationSetName"])
    name = q["EventDestinationName"]
    if name in cs.destinations:
        raise conflict("RESOURCE_ALREADY_EXISTS", f"Event destination {name} already exists", "event-destination", name)
    if len(cs.destinations) >= 5:
        # The model: "Each configuration set can contain between 0 and 5 event destinations."
        raise quota("EVENT_DESTINATIONS_PER_CONFIGURATION_SET", "A configuration set has at most 5 event destinations")
    dest = _destination(q, name, True, q["MatchingEventTypes"])
    cs.destinations[name] = dest
    return {"ConfigurationSetArn": cs.arn, "ConfigurationSetName": cs.name, "EventDestination": dest}


@operation("UpdateEventDestination")
def update_event_destination(s: StandIn, r: Region, q: dict[str, Any]) -> dict[str, Any]:
    cs = r.configuration_set(q["ConfigurationSetName"])
    name = q["EventDestinationName"]
    old = cs.destinations.get(name)
    if old is None:
        raise not_found("event-destination", name)
    merged = {k: v for k, v in old.items() if k.endswith("Destination")}
    for k in ("CloudWatchLogsDestination", "KinesisFirehoseDestination", "SnsDestination"):
        if q.get(k):
            merged = {k: q[k]}
    dest = _destination(
        merged,
        name,
        q.get("Enabled", old["Enabled"]),
        q.get("MatchingEventTypes", old["MatchingEventTypes"]),
    )
    cs.destinations[name] = dest
    return {"ConfigurationSetArn": cs.arn, "ConfigurationSetName": cs.name, "EventDestination": dest}


@operation("DeleteEventDestination")
def delete_event_destination(s: StandIn, r: Region, q: dict[str, Any]) -> dict[str, Any]:
    cs = r.configuration_set(q["ConfigurationSetName"])
    dest = cs.destinations.pop(q["EventDestinationName"], None)
    if dest is None:
        raise not_found("event-destination", q["EventDestinationName"])
    return {"ConfigurationSetArn": cs.arn, "ConfigurationSetName": cs.name, "EventDestination": dest}


@dataclass
class Origin:
    address: str  # what the recipient sees: the number, or the sender ID
    key: str  # whose rate limit applies (phone number id, sender-id ARN)
    mps: int
    opt_out_list: str | None
    iso: str


def _origin_of_number(r: Region, p: PhoneNumber, given: str) -> Origin:
    if p.status != "ACTIVE":
        raise conflict("RESOURCE_NOT_ACTIVE", f"Phone number {given} is {p.status}, not ACTIVE", "phone-number", p.id)
    return Origin(p.number, p.id, r.mps.get(p.id, DEFAULT_MPS.get(p.number_type, 1)), p.opt_out_list, p.iso)


def _origin(r: Region, identity: str | None, destination_iso: str | None) -> Origin:
    if identity is None:
        # No identity named: one of the account's ACTIVE numbers in the destination's country.
        candidates = [p for p in r.phone_numbers.values() if p.status == "ACTIVE" and p.iso == destination_iso]
        if not candidates:
            raise conflict(
                "NO_ORIGINATION_IDENTITIES_FOUND",
                f"No origination identity in this account can send to {destination_iso}",
            )
        p = candidates[0]
        return _origin_of_number(r, p, p.number)
    p = r.phone_number(identity)
    if p is not None:
        return _origin_of_number(r, p, identity)
    if identity.startswith("pool-") or ":pool/" in identity:
        pool = r.pool(identity)
        if pool is None:
            raise not_found("pool", identity)
        members = [r.phone_numbers[m] for m in pool.members if m in r.phone_numbers]
        active = [m for m in members if m.status == "ACTIVE" and m.iso == destination_iso]
        if not active:
            raise conflict("NO_ORIGINATION_IDENTITIES_FOUND", f"Pool {pool.id} has no ACTIVE number for {destination_iso}", "pool", pool.id)
        o = _origin_of_number(r, active[0], active[0].number)
        o.opt_out_list = pool.opt_out_list
        return o
    if identity.startswith("phone-") or identity.startswith("+") or ":phone-number/" in identity:
        raise not_found("phone-number", identity)
    sid = r.sender_id(identity, destination_iso) if not identity.startswith("arn:") else r.sender_id(identity, None)
    if sid is None:
        raise not_found("sender-id", identity)
    return Origin(sid.sender_id, sid.arn, r.mps.get(sid.arn, SENDER_ID_MPS), None, sid.iso)


@operation("SendTextMessage")
def send_text_message(s: StandIn, r: Region, q: dict[str, Any]) -> dict[str, Any]:
    destination = q["DestinationPhoneNumber"]
    cs = r.configuration_set(q["ConfigurationSetName"]) if q.get("ConfigurationSetName") else None
    destination_iso = country_of(destination)
    # The protect configuration the request names overrides the configuration set's.
    protect_id = q.get("ProtectConfigurationId") or (cs.protect_configuration if cs else None)
    protect = r.protect_configuration(protect_id) if protect_id else None
    if protect is not None and destination_iso and protect.rules["SMS"].get(destination_iso) == "BLOCK":
        raise conflict(
            "DESTINATION_COUNTRY_BLOCKED_BY_PROTECT_CONFIGURATION",
            f"Messages to {destination_iso} are blocked by protect configuration {protect.id}",
            "protect-configuration",
            protect.id,
        )
    origin = _origin(r, q.get("OriginationIdentity"), destination_iso)
    if r.tier == "SANDBOXED" and destination not in r.verified:
        raise conflict(
            "DESTINATION_PHONE_NUMBER_NOT_VERIFIED",
            f"{destination} is not a verified destination number and the account is in the sandbox",
            "verified-destination-number",
            destination,
        )
    if origin.opt_out_list is not None and destination in r.opt_out_lists[origin.opt_out_list].numbers:
        raise conflict(
            "DESTINATION_PHONE_NUMBER_OPTED_OUT",
            f"{destination} is opted out in {origin.opt_out_list}",
            "opted-out-number",
            destination,
        )
    body = q.get("MessageBody", "")
    encoding, parts = encoding_and_parts(body)
    carrier = r.carrier(destination)
    price = round(parts * carrier.price_per_part, 5)
    dry_run = bool(q.get("DryRun", False))
    if not dry_run and (r.spend_exhausted or r.spend + price > r.spend_limit):
        raise quota("MONTHLY_SPEND_LIMIT_REACHED_FOR_TEXT", "The account's monthly text spend limit is reached")
    if q.get("MaxPrice") is not None and float(q["MaxPrice"]) < price:
        why = f"the message costs {price} USD, over MaxPrice {q['MaxPrice']}"
        raise validation_error("PRICE_OVER_THRESHOLD", [FieldError("MaxPrice", why)], message=why)
    # Message parts per second per identity, over the last second (DryRun: at most five).
    limit = min(origin.mps, DRY_RUN_MPS) if dry_run else origin.mps
    now = time.time()
    window = [(t, n) for t, n in r.sent_parts.get(origin.key, []) if now - t < 1.0]
    if sum(n for _, n in window) + parts > limit:
        r.sent_parts[origin.key] = window
        raise throttled()
    window.append((now, parts))
    r.sent_parts[origin.key] = window
    message_id = str(uuid.uuid4())
    if dry_run:
        return {"MessageId": message_id}
    r.spend += price
    msg = Message(
        message_id=message_id,
        destination=destination,
        origination=origin.address,
        origination_identity=q.get("OriginationIdentity"),
        identity_key=origin.key,
        opt_out_list=origin.opt_out_list,
        body=body,
        message_type=q.get("MessageType", "PROMOTIONAL"),  # SNS's precedent: Promotional unless said
        context=q.get("Context"),
        time_to_live=q.get("TimeToLive"),
        max_price=q.get("MaxPrice"),
        configuration_set=cs.name if cs else None,
        parts=parts,
        encoding=encoding,
        price=price,
        requested_at_ms=now_ms(),
        behaviour=carrier.behaviour,
        origin_iso=origin.iso,
    )
    r.messages.append(msg)
    carry(r, msg, carrier)
    return {"MessageId": message_id}


# --------------------------------------------------------------------------------------------------
# Events into CloudWatch Logs (moto's backend, in-process).
# --------------------------------------------------------------------------------------------------


def event_record(msg: Message, event_type: str, is_final: bool, at_ms: int, carrier: Carrier) -> dict[str, Any]:
    """One event in [FORMAT]'s field order."""
    iso = country_of(msg.destination) or "ZZ"
    status = event_type.removeprefix("TEXT_")
    ev: dict[str, Any] = {
        "eventType": event_type,
        "eventVersion": "1.0",
        "eventTimestamp": at_ms,
        "isFinal": is_final,
        "originationPhoneNumber": msg.origination,
        "destinationPhoneNumber": msg.destination,
        "isoCountryCode": iso,
        # [FORMAT] words it as international sending being enabled for the number; read here as
        # what the name says, a destination outside the origination identity's country.
        "isInternationalSend": iso != msg.origin_iso,
    }
    network = carrier.network or NETWORKS.get(iso)
    if network is not None and event_type not in NO_NETWORK:
        ev["mcc"], ev["mnc"], ev["carrierName"] = network
    ev.update(
        {
            "messageId": msg.message_id,
            "messageRequestTimestamp": msg.requested_at_ms,
            "messageEncoding": msg.encoding,
            "messageType": msg.message_type,
            "messageStatus": status,
            "messageStatusDescription": STATUS_DESCRIPTIONS.get(status, TEXT_EVENT_TYPES.get(event_type, status)),
        }
    )
    if msg.context is not None:
        ev["context"] = msg.context  # the request's Context, verbatim, in every event of the message
    ev.update({"totalMessageParts": msg.parts, "totalMessagePrice": msg.price, "totalCarrierFee": 0.0})
    return ev


# How far apart a carrier's events are stamped (milliseconds).
STEP_MS = 250


def carry(r: Region, msg: Message, carrier: Carrier) -> None:
    steps = list(BEHAVIOURS[carrier.behaviour])
    if carrier.pending:
        steps.insert(0, ("TEXT_PENDING", False))
    # Each step comes a little after the last, as a carrier's would: an event is never stamped
    # before the request that caused it, and the final one never before the progress before it.
    at = now_ms()
    for step, (event_type, is_final) in enumerate(steps, start=1):
        publish(r, msg, event_record(msg, event_type, is_final, at + STEP_MS * step, carrier), carrier)
        msg.final_written = msg.final_written or is_final
    if carrier.behaviour == "opted_out_by_reply" and msg.opt_out_list is not None:
        r.opt_out_lists[msg.opt_out_list].numbers[msg.destination] = (time.time(), True)


def _matches(destination: dict[str, Any], event_type: str) -> bool:
    types = destination["MatchingEventTypes"]
    return "ALL" in types or "TEXT_ALL" in types or event_type in types


def _group_of(log_group_arn: str) -> tuple[str, str, str]:
    """(region, account, group name) of `arn:aws:logs:REGION:ACCOUNT:log-group:NAME[:*]`."""
    parts = log_group_arn.split(":", 6)
    if len(parts) < 7 or parts[5] != "log-group":
        return ("", "", "")
    return parts[3], parts[4], parts[6].removesuffix(":*")


def publish(r: Region, msg: Message, event: dict[str, Any], carrier: Carrier) -> None:
    """Writes `event` to every enabled CloudWatch Logs destination of the message's configuration
    set whose types match (a message without a configuration set has nowhere to go)."""
    if msg.configuration_set is None or msg.configuration_set not in r.configuration_sets:
        return
    cs = r.configuration_sets[msg.configuration_set]
    for name, dest in sorted(cs.destinations.items()):
        if not dest["Enabled"] or not _matches(dest, event["eventType"]) or "CloudWatchLogsDestination" not in dest:
            continue
        region, account, group = _group_of(dest["CloudWatchLogsDestination"]["LogGroupArn"])
        stream = f"tocsin-eum-{name}"  # AWS's stream naming is undocumented: the stand-in's own
        if carrier.hold:
            r.held.append(Held(region, group, stream, event, msg, carrier.duplicate))
            continue
        for _ in range(2 if carrier.duplicate else 1):
            if not write_log_event(region or r.name, account or r.account, group, stream, event):
                r.dropped += 1


def write_log_event(region: str, account: str, group: str, stream: str, event: dict[str, Any]) -> bool:
    """Puts one log event into moto's CloudWatch Logs; False when AWS could not deliver it (no such
    group, or a timestamp CloudWatch Logs refuses): AWS drops what it cannot deliver."""
    from moto.logs.models import logs_backends  # the backend of the very process serving the SDK

    backend = logs_backends[account][region]
    if group not in backend.groups:
        return False
    if stream not in backend.groups[group].streams:
        backend.create_log_stream(group, stream)
    message = json.dumps(event, separators=(",", ":"))
    _, rejected = backend.put_log_events(group, stream, [{"timestamp": event["eventTimestamp"], "message": message}])
    return not rejected


# --------------------------------------------------------------------------------------------------
# The control API: /tocsin-eum/… on the emulator's own port (the Rust side wraps it).
# --------------------------------------------------------------------------------------------------

Control = Callable[[StandIn, Region, dict[str, Any]], dict[str, Any]]


def _only(body: dict[str, Any], allowed: set[str]) -> None:
    unknown = set(body) - allowed
    if unknown:
        raise ControlError(f"unknown field(s) {sorted(unknown)}; allowed: {sorted(allowed)}")


def c_carrier(s: StandIn, r: Region, b: dict[str, Any]) -> dict[str, Any]:
    _only(b, {"destination", "behaviour", "hold", "duplicate", "pending", "price_per_part", "network"})
    behaviour = b.get("behaviour", "deliver")
    if behaviour not in BEHAVIOURS:
        raise ControlError(f"unknown behaviour {behaviour}; known: {sorted(BEHAVIOURS)}")
    network = b.get("network")
    c = Carrier(
        behaviour=behaviour,
        hold=bool(b.get("hold", False)),
        duplicate=bool(b.get("duplicate", False)),
        pending=bool(b.get("pending", False)),
        price_per_part=float(b.get("price_per_part", DEFAULT_PRICE_PER_PART)),
        network=(str(network["mcc"]), str(network["mnc"]), str(network["name"])) if network else None,
    )
    destination = b["destination"]
    if destination == "*":
        r.default_carrier = c
    else:
        r.carriers[destination] = c
    return {}


def c_throttle(s: StandIn, r: Region, b: dict[str, Any]) -> dict[str, Any]:
    _only(b, {"next"})
    r.throttle_next = int(b["next"])
    return {}


def c_rate(s: StandIn, r: Region, b: dict[str, Any]) -> dict[str, Any]:
    _only(b, {"identity", "parts_per_second"})
    identity = b["identity"]
    p = r.phone_number(identity)
    sid = r.sender_id(identity, None)
    if p is None and sid is None:
        raise ControlError(f"no identity {identity}")
    r.mps[p.id if p is not None else sid.arn] = int(b["parts_per_second"])  # type: ignore[union-attr]
    return {}


def c_account(s: StandIn, r: Region, b: dict[str, Any]) -> dict[str, Any]:
    _only(b, {"tier", "spend_limit_usd", "spend_exhausted", "verified_destinations"})
    if "tier" in b:
        if b["tier"] not in ("SANDBOXED", "PRODUCTION"):
            raise ControlError("tier is SANDBOXED or PRODUCTION")
        r.tier = b["tier"]
    if "spend_limit_usd" in b:
        r.spend_limit = int(b["spend_limit_usd"])
        r.max_spend_limit = max(r.max_spend_limit, r.spend_limit)
        r.spend_overridden = True
    if "spend_exhausted" in b:
        r.spend_exhausted = bool(b["spend_exhausted"])
    for number in b.get("verified_destinations", []):
        r.verified.setdefault(number, ("verified-" + uuid.uuid4().hex, time.time()))
    return {}


def c_phone_number_status(s: StandIn, r: Region, b: dict[str, Any]) -> dict[str, Any]:
    _only(b, {"phone_number", "status"})
    p = r.phone_number(b["phone_number"])
    if p is None:
        raise ControlError(f"no phone number {b['phone_number']}")
    if b["status"] not in SHAPES["NumberStatus"]["enum"]:
        raise ControlError(f"status is one of {SHAPES['NumberStatus']['enum']}")
    p.status = b["status"]
    return {}


def c_release(s: StandIn, r: Region, b: dict[str, Any]) -> dict[str, Any]:
    """Writes every held event now (or at `at_ms`): events that come late."""
    _only(b, {"at_ms"})
    at = int(b.get("at_ms") or now_ms())
    held, r.held = r.held, []
    for h in held:
        event = {**h.event, "eventTimestamp": max(at, h.event["messageRequestTimestamp"])}
        for _ in range(2 if h.duplicate else 1):
            if not write_log_event(h.region or r.name, r.account, h.group, h.stream, event):
                r.dropped += 1
    return {"released": len(held)}


def c_give_up(s: StandIn, r: Region, b: dict[str, Any]) -> dict[str, Any]:
    """72 hours without a final event: AWS reports UNKNOWN itself ([FORMAT]); now, or at `at_ms`."""
    _only(b, {"at_ms"})
    at = int(b.get("at_ms") or now_ms())
    pending_final = {id(h.message) for h in r.held if h.event["isFinal"]}
    written = 0
    for msg in r.messages:
        if msg.final_written or id(msg) in pending_final:
            continue
        event = event_record(msg, "TEXT_UNKNOWN", True, at, Carrier())
        publish(r, msg, event, Carrier())
        msg.final_written = True
        written += 1
    return {"written": written}


def c_messages(s: StandIn, r: Region, b: dict[str, Any]) -> dict[str, Any]:
    return {"messages": [m.record() for m in r.messages]}


def c_state(s: StandIn, r: Region, b: dict[str, Any]) -> dict[str, Any]:
    return {"held": len(r.held), "dropped": r.dropped, "spend_usd": round(r.spend, 5), "tier": r.tier}


def c_identities(s: StandIn, r: Region, b: dict[str, Any]) -> dict[str, Any]:
    """What the IAM gate needs to name a request's resources as AWS does: each form an origination
    identity can take in a request (number, id, ARN, bare sender ID) → the identity's ARN."""
    resolve: dict[str, str] = {}
    for p in r.phone_numbers.values():
        resolve[p.number] = p.arn
        resolve[p.id] = p.arn
    for pool in r.pools.values():
        resolve[pool.id] = pool.arn
    bare: dict[str, list[str]] = {}
    for sid in r.sender_ids.values():
        bare.setdefault(sid.sender_id, []).append(sid.arn)
    for name, arns in bare.items():
        if len(arns) == 1:  # a sender ID in several countries is resolved by destination, unknown here
            resolve[name] = arns[0]
    return {"resolve": resolve}


# The required opt-out keywords ([KEYWORDS]), matched on the message's first word ("a message that
# begins with a keyword"). US toll-free numbers: opt-outs are the carrier's, STOP the only opt-out
# keyword, and START or UNSTOP resubscribe.
OPT_OUT_KEYWORDS = {"ARRET", "CANCEL", "END", "OPT-OUT", "OPTOUT", "QUIT", "REMOVE", "STOP", "TD", "UNSUBSCRIBE"}
TOLL_FREE_OPT_OUT = {"STOP"}
TOLL_FREE_OPT_IN = {"START", "UNSTOP"}
HELP_KEYWORDS = {"HELP"}


def c_reply(s: StandIn, r: Region, b: dict[str, Any]) -> dict[str, Any]:
    """A person texts `text` from `from` to the origination number `to`. End User Messaging acts on
    an opt-out or opt-in keyword first (the number's opt-out list, unless it self-manages
    opt-outs), then publishes the inbound message to the number's two-way channel (an SNS topic
    of moto's), `copies` times (SNS delivers at least once). Nothing is published when two-way is
    off: AWS drops the reply."""
    _only(b, {"from", "to", "text", "copies"})
    p = next((n for n in r.phone_numbers.values() if n.number == b["to"]), None)
    if p is None:
        raise ControlError(f"no origination number {b['to']}")
    text = str(b.get("text", ""))
    words = text.strip().split()
    first = words[0].upper() if words else ""
    toll_free = p.number_type == "TOLL_FREE" and p.iso == "US"
    opt_out = TOLL_FREE_OPT_OUT if toll_free else OPT_OUT_KEYWORDS
    opt_in = TOLL_FREE_OPT_IN if toll_free else set()
    keyword = first if first in opt_out | opt_in | HELP_KEYWORDS else None
    lst = r.opt_out_lists.get(p.opt_out_list)
    if lst is not None and (toll_free or not p.self_managed_opt_outs):
        if first in opt_out:
            lst.numbers[b["from"]] = (time.time(), True)
        elif first in opt_in:
            lst.numbers.pop(b["from"], None)
    if not (p.two_way and p.two_way_channel):
        return {"published": 0}
    previous = next(
        (m.message_id for m in reversed(r.messages) if m.origination == p.number and m.destination == b["from"]),
        None,
    )
    payload: dict[str, Any] = {
        "originationNumber": b["from"],
        "destinationNumber": p.number,
        "messageBody": text,
        "inboundMessageId": str(uuid.uuid4()),
    }
    if keyword:
        payload["messageKeyword"] = keyword
    if previous:
        payload["previousPublishedMessageId"] = previous
    from moto.sns.models import sns_backends

    parts = p.two_way_channel.split(":")
    backend = sns_backends[parts[4]][parts[3]]
    copies = int(b.get("copies", 1))
    for _ in range(copies):
        backend.publish(json.dumps(payload, separators=(",", ":")), arn=p.two_way_channel)
    return {"published": copies, "inbound_message_id": payload["inboundMessageId"]}


CONTROLS: dict[tuple[str, str], Control] = {
    ("POST", "carrier"): c_carrier,
    ("POST", "throttle"): c_throttle,
    ("POST", "rate"): c_rate,
    ("POST", "account"): c_account,
    ("POST", "phone-number-status"): c_phone_number_status,
    ("POST", "reply"): c_reply,
    ("POST", "release"): c_release,
    ("POST", "give-up"): c_give_up,
    ("GET", "messages"): c_messages,
    ("GET", "state"): c_state,
    ("GET", "identities"): c_identities,
}
