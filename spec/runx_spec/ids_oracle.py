"""The spec's independent identity oracle under the short names trace validation uses.

The derivation itself is ``runx_spec._ids`` (written from spec §2.1/§2.2, importing nothing
of ``runx_actors``); this module only names its functions for ``runx_spec.trace``.
"""

from __future__ import annotations

from ._ids import (
    derive_call_id as call,
)
from ._ids import (
    derive_decline_command_id as decline_cid,
)
from ._ids import (
    derive_effect_id as effect,
)
from ._ids import (
    derive_input_command_id as input_cid,
)
from ._ids import (
    derive_model_step_id as model_step,
)
from ._ids import (
    derive_prepare_command_id as prepare_cid,
)
from ._ids import (
    derive_recovery_command_id as recovery_cid,
)
from ._ids import (
    derive_response_command_id as response_cid,
)
from ._ids import (
    derive_response_id as response,
)
from ._ids import (
    derive_settlement_command_id as settlement_cid,
)
from ._ids import (
    derive_start_command_id as start_cid,
)
from ._ids import (
    derive_tool_step_id as tool_step,
)
from ._ids import (
    derive_withdraw_command_id as withdraw_cid,
)
from ._ids import (
    namespaced_hash,
)

__all__ = [
    "namespaced_hash", "prepare_cid", "model_step", "call", "tool_step", "response",
    "response_cid", "input_cid", "withdraw_cid", "effect", "start_cid", "settlement_cid",
    "recovery_cid", "decline_cid",
]
