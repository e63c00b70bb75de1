"""moto's server as moto_serial.py runs it, plus what tocsin's deploy tests need and moto's
CloudFormation lacks:

- the resource type AWS::Logs::SubscriptionFilter, created and deleted through moto's own CloudWatch
  Logs backend with the checks that backend makes on PutSubscriptionFilter (the log group exists,
  the destination function exists, at most 2 filters per log group: LimitExceededException);
  CloudFormation names an unnamed filter `<stack>-<logical id>-<suffix>`, as moto names every
  other unnamed resource;
- the resource type AWS::SNS::Subscription (the on-call topic's e-mail, webhook and SMS
  subscriptions), through moto's SNS backend, which confirms every subscription at once;
- the resource type AWS::Scheduler::Schedule, through moto's EventBridge Scheduler backend, which
  refuses a second schedule of the same name in a schedule group (ConflictException), as AWS does;
- a failed CreateStack rolls back, as CloudFormation does: every resource it created is deleted
  except those with DeletionPolicy Retain (RetainExceptOnCreate ones are deleted: that is what the
  policy is for), and the stack is left ROLLBACK_COMPLETE (delete it before creating it again). The
  call still answers with the failing resource's error, so tests see why;
- DeleteStack keeps RetainExceptOnCreate resources, like Retain ones (moto keeps only Retain).

Usage: python moto_cfn.py HOST PORT
"""

import os
import runpy
from typing import Any

from moto.cloudformation.models import Stack
from moto.cloudformation.parsing import ResourceMap
from moto.core.common_models import CloudFormationModel
from moto.logs.models import logs_backends
from moto.scheduler.models import scheduler_backends
from moto.sns.models import sns_backends


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
        logs_backends[account_id][region_name].delete_subscription_filter(self.log_group_name, self.filter_name)


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
Stack.create_resources = _create_resources_or_roll_back  # type: ignore[method-assign]


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    runpy.run_path(os.path.join(here, "moto_serial.py"), run_name="__main__")
