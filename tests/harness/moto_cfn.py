"""moto's server as moto_serial.py runs it, plus the one CloudFormation resource type tocsin's
deploy tests need and moto's CloudFormation lacks: AWS::Logs::SubscriptionFilter.

The resource is created and deleted through moto's own CloudWatch Logs backend, with the checks
that backend makes on PutSubscriptionFilter (the log group exists, the destination function
exists, at most 2 filters per log group: LimitExceededException). CloudFormation names an
unnamed filter `<stack>-<logical id>-<suffix>`, as moto names every other unnamed resource.

Usage: python moto_cfn.py HOST PORT
"""

import os
import runpy
from typing import Any

from moto.core.common_models import CloudFormationModel
from moto.logs.models import logs_backends


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


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    runpy.run_path(os.path.join(here, "moto_serial.py"), run_name="__main__")
