"""Agent Run Protocol v1 core (tier T1): pure, synchronous, deterministic.

Identities, canonical JSON and digests, the 16 facts and 16 commands, MachineState,
``decide``/``evolve``, planning and queries, commit evaluation and fold. Imports no trio,
no database driver and no clock (RUN-SCP-1)."""

from ._decide import CANCEL_MESSAGE as CANCEL_MESSAGE
from ._decide import DECIDE_TABLE as DECIDE_TABLE
from ._decide import Phase as Phase
from ._decide import decide as decide
from ._decide import phase_of as phase_of
from ._evolve import KIND_FOR_POLICY as KIND_FOR_POLICY
from ._evolve import evolve as evolve
from ._evolve import valid_run_end as valid_run_end
from ._evolve import valid_scheduling as valid_scheduling
from .canonical import ENVELOPE_VERSION as ENVELOPE_VERSION
from .canonical import MAX_SAFE_INTEGER as MAX_SAFE_INTEGER
from .canonical import JSONValue as JSONValue
from .canonical import canonical_json as canonical_json
from .canonical import canonical_json_text as canonical_json_text
from .canonical import content_digest as content_digest
from .canonical import decode_envelope as decode_envelope
from .canonical import decode_frozen as decode_frozen
from .canonical import freeze_tool_arguments as freeze_tool_arguments
from .canonical import normalize_json_text as normalize_json_text
from .canonical import parse_json_strict as parse_json_strict
from .canonical import read_envelope as read_envelope
from .canonical import sha256_digest as sha256_digest
from .canonical import typed_envelope as typed_envelope
from .commands import COMMAND_BY_WIRE_NAME as COMMAND_BY_WIRE_NAME
from .commands import COMMAND_TYPES as COMMAND_TYPES
from .commands import EFFECT_COMMANDS as EFFECT_COMMANDS
from .commands import AcceptInput as AcceptInput
from .commands import AgentCommand as AgentCommand
from .commands import ApproveToolCall as ApproveToolCall
from .commands import CancelRun as CancelRun
from .commands import Command as Command
from .commands import DeclineToolCall as DeclineToolCall
from .commands import PrepareModelRequest as PrepareModelRequest
from .commands import RecoverModelExecution as RecoverModelExecution
from .commands import RejectModelResult as RejectModelResult
from .commands import RejectToolCall as RejectToolCall
from .commands import StartModelExecution as StartModelExecution
from .commands import StartToolCall as StartToolCall
from .commands import SubmitModelFailure as SubmitModelFailure
from .commands import SubmitModelResult as SubmitModelResult
from .commands import SubmitToolFailure as SubmitToolFailure
from .commands import SubmitToolResponse as SubmitToolResponse
from .commands import SubmitToolResult as SubmitToolResult
from .commands import WithdrawPreparedStep as WithdrawPreparedStep
from .commit import MAX_ID_BYTES as MAX_ID_BYTES
from .commit import MAX_NAME_BYTES as MAX_NAME_BYTES
from .commit import Append as Append
from .commit import BatchResult as BatchResult
from .commit import CommandEnvelope as CommandEnvelope
from .commit import CommitDecision as CommitDecision
from .commit import CommitRequest as CommitRequest
from .commit import CommitResult as CommitResult
from .commit import CommitStatus as CommitStatus
from .commit import CommitView as CommitView
from .commit import PromptTokenGuard as PromptTokenGuard
from .commit import Replay as Replay
from .commit import Snapshot as Snapshot
from .commit import batch_refusal as batch_refusal
from .commit import check_batch as check_batch
from .commit import create_group as create_group
from .commit import envelope as envelope
from .commit import evaluate_batch as evaluate_batch
from .commit import evaluate_commit as evaluate_commit
from .commit import expected_command_ids as expected_command_ids
from .commit import fold_run as fold_run
from .commit import initialize_run as initialize_run
from .commit import validate_identity as validate_identity
from .commit import validate_name as validate_name
from .digests import DECISIONS as DECISIONS
from .digests import FROZEN_TYPES as FROZEN_TYPES
from .digests import MODEL_REQUEST as MODEL_REQUEST
from .digests import MODEL_RESULT as MODEL_RESULT
from .digests import TOOL_DEFINITION as TOOL_DEFINITION
from .digests import TOOL_OUTPUT as TOOL_OUTPUT
from .digests import TOOL_RESPONSE_DECISION as TOOL_RESPONSE_DECISION
from .digests import TOOL_RESPONSE_PAYLOAD as TOOL_RESPONSE_PAYLOAD
from .digests import decision_digest as decision_digest
from .digests import decode_frozen_value as decode_frozen_value
from .digests import digest_model_request as digest_model_request
from .digests import digest_model_result as digest_model_result
from .digests import digest_tool_definition as digest_tool_definition
from .digests import digest_tool_output as digest_tool_output
from .digests import digest_tool_response_payload as digest_tool_response_payload
from .digests import encode_frozen as encode_frozen
from .digests import model_request_from_json as model_request_from_json
from .digests import model_request_json as model_request_json
from .digests import model_result_from_json as model_result_from_json
from .digests import model_result_json as model_result_json
from .digests import tool_definition_from_json as tool_definition_from_json
from .digests import tool_definition_json as tool_definition_json
from .errors import AbandonWithExecutorError as AbandonWithExecutorError
from .errors import CanonicalJSONError as CanonicalJSONError
from .errors import CommandConflictError as CommandConflictError
from .errors import CommandRefusedError as CommandRefusedError
from .errors import CorruptLogError as CorruptLogError
from .errors import CorruptRecordError as CorruptRecordError
from .errors import CorruptStoreError as CorruptStoreError
from .errors import DecodeError as DecodeError
from .errors import DispatchError as DispatchError
from .errors import DispatchRejectedError as DispatchRejectedError
from .errors import DispatchRetryableError as DispatchRetryableError
from .errors import DispatchUnknownError as DispatchUnknownError
from .errors import DriveCancelledError as DriveCancelledError
from .errors import EffectNotExecutingError as EffectNotExecutingError
from .errors import EvolveError as EvolveError
from .errors import ExecutionAbortedError as ExecutionAbortedError
from .errors import ExecutionNotFoundError as ExecutionNotFoundError
from .errors import ExecutionStoreError as ExecutionStoreError
from .errors import FencedError as FencedError
from .errors import FrozenValueMissingError as FrozenValueMissingError
from .errors import LeaseLostError as LeaseLostError
from .errors import LedgerConflictError as LedgerConflictError
from .errors import LoopError as LoopError
from .errors import MissingPolicyPortsError as MissingPolicyPortsError
from .errors import ModelUnavailableError as ModelUnavailableError
from .errors import NoExecutionPortError as NoExecutionPortError
from .errors import OutcomeCollectedError as OutcomeCollectedError
from .errors import OutcomeNotReadyError as OutcomeNotReadyError
from .errors import OutcomeUnavailableError as OutcomeUnavailableError
from .errors import OwnershipLostError as OwnershipLostError
from .errors import PreconditionError as PreconditionError
from .errors import PrepareStalledError as PrepareStalledError
from .errors import ProjectionDivergenceError as ProjectionDivergenceError
from .errors import ReadError as ReadError
from .errors import ReconcileError as ReconcileError
from .errors import RunAlreadyRunningError as RunAlreadyRunningError
from .errors import RunExistsError as RunExistsError
from .errors import RunNotFoundError as RunNotFoundError
from .errors import RunTerminalError as RunTerminalError
from .errors import RuntimeClosedError as RuntimeClosedError
from .errors import RunxError as RunxError
from .errors import SchemaVersionError as SchemaVersionError
from .errors import SettlementsEvictedError as SettlementsEvictedError
from .errors import StaleRuntimeError as StaleRuntimeError
from .errors import StateConflictError as StateConflictError
from .errors import StoreOpenError as StoreOpenError
from .errors import TargetWithoutEffectError as TargetWithoutEffectError
from .errors import ToolOfferError as ToolOfferError
from .errors import ValidationError as ValidationError
from .facts import EVENT_TYPE_PREFIX as EVENT_TYPE_PREFIX
from .facts import FACT_BY_WIRE_NAME as FACT_BY_WIRE_NAME
from .facts import FACT_TYPES as FACT_TYPES
from .facts import Fact as Fact
from .facts import InputAccepted as InputAccepted
from .facts import ModelStepCompleted as ModelStepCompleted
from .facts import ModelStepFailed as ModelStepFailed
from .facts import ModelStepPrepared as ModelStepPrepared
from .facts import ModelStepRecovered as ModelStepRecovered
from .facts import ModelStepRejected as ModelStepRejected
from .facts import ModelStepStarted as ModelStepStarted
from .facts import ModelStepWithdrawn as ModelStepWithdrawn
from .facts import RunCreated as RunCreated
from .facts import RunEnded as RunEnded
from .facts import ToolCallAnswered as ToolCallAnswered
from .facts import ToolCallApproved as ToolCallApproved
from .facts import ToolCallCompleted as ToolCallCompleted
from .facts import ToolCallFailed as ToolCallFailed
from .facts import ToolCallStarted as ToolCallStarted
from .facts import ToolStepOpened as ToolStepOpened
from .ids import NS_DECLINE_COMMAND as NS_DECLINE_COMMAND
from .ids import NS_EFFECT as NS_EFFECT
from .ids import NS_INPUT_COMMAND as NS_INPUT_COMMAND
from .ids import NS_MODEL_REQUEST as NS_MODEL_REQUEST
from .ids import NS_MODEL_STEP as NS_MODEL_STEP
from .ids import NS_RECOVERY_COMMAND as NS_RECOVERY_COMMAND
from .ids import NS_RESPONSE as NS_RESPONSE
from .ids import NS_RESPONSE_COMMAND as NS_RESPONSE_COMMAND
from .ids import NS_SETTLEMENT_COMMAND as NS_SETTLEMENT_COMMAND
from .ids import NS_START_COMMAND as NS_START_COMMAND
from .ids import NS_TOOL_CALL as NS_TOOL_CALL
from .ids import NS_TOOL_STEP as NS_TOOL_STEP
from .ids import NS_WITHDRAW_COMMAND as NS_WITHDRAW_COMMAND
from .ids import derive as derive
from .ids import derive_call_id as derive_call_id
from .ids import derive_decline_command_id as derive_decline_command_id
from .ids import derive_effect_id as derive_effect_id
from .ids import derive_input_command_id as derive_input_command_id
from .ids import derive_model_request_command_id as derive_model_request_command_id
from .ids import derive_model_step_id as derive_model_step_id
from .ids import derive_prepare_command_id as derive_prepare_command_id
from .ids import derive_recovery_command_id as derive_recovery_command_id
from .ids import derive_response_command_id as derive_response_command_id
from .ids import derive_response_id as derive_response_id
from .ids import derive_settlement_command_id as derive_settlement_command_id
from .ids import derive_start_command_id as derive_start_command_id
from .ids import derive_tool_step_id as derive_tool_step_id
from .ids import derive_withdraw_command_id as derive_withdraw_command_id
from .plan import RECOVERY_MESSAGE as RECOVERY_MESSAGE
from .plan import Action as Action
from .plan import Idle as Idle
from .plan import NeedModelRequest as NeedModelRequest
from .plan import Prompt as Prompt
from .plan import PromptInput as PromptInput
from .plan import RecoveryTarget as RecoveryTarget
from .plan import StartModelCall as StartModelCall
from .plan import StartToolCalls as StartToolCalls
from .plan import WithdrawPrepared as WithdrawPrepared
from .plan import executing_calls as executing_calls
from .plan import is_quiescent as is_quiescent
from .plan import needs_recovery as needs_recovery
from .plan import plan_next as plan_next
from .plan import recovery_command as recovery_command
from .plan import recovery_targets as recovery_targets
from .plan import waiting_calls as waiting_calls
from .state import LIVE_CALL_STATUSES as LIVE_CALL_STATUSES
from .state import OPEN as OPEN
from .state import TERMINAL_CALL_STATUSES as TERMINAL_CALL_STATUSES
from .state import MachineState as MachineState
from .state import ModelStep as ModelStep
from .state import Open as Open
from .state import Step as Step
from .state import ToolCallState as ToolCallState
from .state import ToolStep as ToolStep
from .state import validate_machine_state as validate_machine_state
from .state import validate_tool_call_state as validate_tool_call_state
from .values import SCHEDULING_MODES as SCHEDULING_MODES
from .values import AgentInput as AgentInput
from .values import CallID as CallID
from .values import CommandID as CommandID
from .values import Digest as Digest
from .values import EffectID as EffectID
from .values import Failure as Failure
from .values import FailureClass as FailureClass
from .values import InputID as InputID
from .values import JSONText as JSONText
from .values import ModelRef as ModelRef
from .values import ModelRejectDisposition as ModelRejectDisposition
from .values import ModelRequest as ModelRequest
from .values import ModelResult as ModelResult
from .values import ModelStepStatus as ModelStepStatus
from .values import ModelToolCall as ModelToolCall
from .values import NewRun as NewRun
from .values import PromptToken as PromptToken
from .values import ResponseID as ResponseID
from .values import ResponseKind as ResponseKind
from .values import ResponsePolicy as ResponsePolicy
from .values import ResponseRequest as ResponseRequest
from .values import RunCompletedEnd as RunCompletedEnd
from .values import RunEnd as RunEnd
from .values import RunFailedEnd as RunFailedEnd
from .values import RunFailure as RunFailure
from .values import RunID as RunID
from .values import RunReason as RunReason
from .values import RunResult as RunResult
from .values import RunStatus as RunStatus
from .values import RunStoppedEnd as RunStoppedEnd
from .values import Scope as Scope
from .values import StepID as StepID
from .values import ToolCallBinding as ToolCallBinding
from .values import ToolCallFailure as ToolCallFailure
from .values import ToolCallResult as ToolCallResult
from .values import ToolCallStatus as ToolCallStatus
from .values import ToolDefinition as ToolDefinition
from .values import ToolFailureOutcome as ToolFailureOutcome
from .values import ToolPlacement as ToolPlacement
from .values import ToolRef as ToolRef
from .values import ToolReplay as ToolReplay
from .values import ToolResult as ToolResult
from .values import ToolScheduling as ToolScheduling
from .values import ToolSpec as ToolSpec
from .values import Usage as Usage
from .values import is_digest as is_digest

__all__ = [
    "RunxError",
    "CommandRefusedError",
    "StaleRuntimeError",
    "CommandConflictError",
    "RunTerminalError",
    "RunNotFoundError",
    "PreconditionError",
    "EvolveError",
    "CorruptLogError",
    "ValidationError",
    "CanonicalJSONError",
    "DecodeError",
    "RunExistsError",
    "OwnershipLostError",
    "ProjectionDivergenceError",
    "FrozenValueMissingError",
    "LoopError",
    "RunAlreadyRunningError",
    "ModelUnavailableError",
    "PrepareStalledError",
    "EffectNotExecutingError",
    "DriveCancelledError",
    "RuntimeClosedError",
    "ToolOfferError",
    "DispatchError",
    "DispatchRetryableError",
    "DispatchUnknownError",
    "DispatchRejectedError",
    "ReadError",
    "OutcomeNotReadyError",
    "ExecutionNotFoundError",
    "OutcomeUnavailableError",
    "OutcomeCollectedError",
    "ExecutionAbortedError",
    "SettlementsEvictedError",
    "ReconcileError",
    "TargetWithoutEffectError",
    "MissingPolicyPortsError",
    "AbandonWithExecutorError",
    "NoExecutionPortError",
    "ExecutionStoreError",
    "LedgerConflictError",
    "StateConflictError",
    "FencedError",
    "LeaseLostError",
    "SchemaVersionError",
    "CorruptRecordError",
    "CorruptStoreError",
    "StoreOpenError",
    "NS_MODEL_REQUEST",
    "NS_MODEL_STEP",
    "NS_TOOL_CALL",
    "NS_TOOL_STEP",
    "NS_RESPONSE",
    "NS_RESPONSE_COMMAND",
    "NS_INPUT_COMMAND",
    "NS_WITHDRAW_COMMAND",
    "NS_EFFECT",
    "NS_START_COMMAND",
    "NS_SETTLEMENT_COMMAND",
    "NS_RECOVERY_COMMAND",
    "NS_DECLINE_COMMAND",
    "derive",
    "derive_model_request_command_id",
    "derive_prepare_command_id",
    "derive_model_step_id",
    "derive_call_id",
    "derive_tool_step_id",
    "derive_response_id",
    "derive_response_command_id",
    "derive_input_command_id",
    "derive_withdraw_command_id",
    "derive_effect_id",
    "derive_start_command_id",
    "derive_settlement_command_id",
    "derive_recovery_command_id",
    "derive_decline_command_id",
    "RunID",
    "StepID",
    "CallID",
    "CommandID",
    "ResponseID",
    "InputID",
    "ToolRef",
    "ModelRef",
    "EffectID",
    "PromptToken",
    "Scope",
    "Digest",
    "JSONText",
    "RunStatus",
    "RunReason",
    "ModelStepStatus",
    "ToolCallStatus",
    "ToolFailureOutcome",
    "ResponsePolicy",
    "ResponseKind",
    "ToolReplay",
    "ToolPlacement",
    "ModelRejectDisposition",
    "FailureClass",
    "SCHEDULING_MODES",
    "Failure",
    "AgentInput",
    "NewRun",
    "ToolScheduling",
    "ToolSpec",
    "ResponseRequest",
    "ToolCallBinding",
    "ToolResult",
    "ToolCallResult",
    "ToolCallFailure",
    "RunFailure",
    "RunCompletedEnd",
    "RunStoppedEnd",
    "RunFailedEnd",
    "RunEnd",
    "RunResult",
    "Usage",
    "ToolDefinition",
    "ModelRequest",
    "ModelToolCall",
    "ModelResult",
    "is_digest",
    "JSONValue",
    "MAX_SAFE_INTEGER",
    "ENVELOPE_VERSION",
    "canonical_json",
    "canonical_json_text",
    "parse_json_strict",
    "normalize_json_text",
    "typed_envelope",
    "sha256_digest",
    "content_digest",
    "read_envelope",
    "decode_envelope",
    "decode_frozen",
    "freeze_tool_arguments",
    "MODEL_REQUEST",
    "MODEL_RESULT",
    "TOOL_OUTPUT",
    "TOOL_RESPONSE_PAYLOAD",
    "TOOL_DEFINITION",
    "TOOL_RESPONSE_DECISION",
    "FROZEN_TYPES",
    "DECISIONS",
    "model_request_json",
    "model_result_json",
    "tool_definition_json",
    "model_request_from_json",
    "model_result_from_json",
    "tool_definition_from_json",
    "digest_model_request",
    "digest_model_result",
    "digest_tool_output",
    "digest_tool_response_payload",
    "digest_tool_definition",
    "decision_digest",
    "encode_frozen",
    "decode_frozen_value",
    "RunCreated",
    "ModelStepPrepared",
    "ModelStepWithdrawn",
    "ModelStepStarted",
    "ModelStepRecovered",
    "ModelStepRejected",
    "ModelStepFailed",
    "ModelStepCompleted",
    "ToolStepOpened",
    "ToolCallStarted",
    "ToolCallApproved",
    "ToolCallCompleted",
    "ToolCallAnswered",
    "ToolCallFailed",
    "InputAccepted",
    "RunEnded",
    "Fact",
    "FACT_TYPES",
    "FACT_BY_WIRE_NAME",
    "EVENT_TYPE_PREFIX",
    "AcceptInput",
    "PrepareModelRequest",
    "WithdrawPreparedStep",
    "StartModelExecution",
    "RecoverModelExecution",
    "SubmitModelResult",
    "SubmitModelFailure",
    "RejectModelResult",
    "StartToolCall",
    "SubmitToolResult",
    "SubmitToolFailure",
    "DeclineToolCall",
    "ApproveToolCall",
    "RejectToolCall",
    "SubmitToolResponse",
    "CancelRun",
    "Command",
    "AgentCommand",
    "COMMAND_TYPES",
    "COMMAND_BY_WIRE_NAME",
    "EFFECT_COMMANDS",
    "Open",
    "OPEN",
    "ModelStep",
    "ToolCallState",
    "ToolStep",
    "Step",
    "MachineState",
    "validate_machine_state",
    "validate_tool_call_state",
    "LIVE_CALL_STATUSES",
    "TERMINAL_CALL_STATUSES",
    "PromptInput",
    "Prompt",
    "NeedModelRequest",
    "WithdrawPrepared",
    "StartModelCall",
    "StartToolCalls",
    "Idle",
    "Action",
    "plan_next",
    "waiting_calls",
    "executing_calls",
    "needs_recovery",
    "RecoveryTarget",
    "recovery_targets",
    "recovery_command",
    "is_quiescent",
    "RECOVERY_MESSAGE",
    "CommandEnvelope",
    "envelope",
    "Snapshot",
    "CommitRequest",
    "CommitStatus",
    "CommitResult",
    "CommitView",
    "Replay",
    "Append",
    "CommitDecision",
    "PromptTokenGuard",
    "evaluate_commit",
    "BatchResult",
    "evaluate_batch",
    "check_batch",
    "batch_refusal",
    "expected_command_ids",
    "create_group",
    "initialize_run",
    "fold_run",
    "validate_identity",
    "validate_name",
    "MAX_NAME_BYTES",
    "MAX_ID_BYTES",
    "decide",
    "Phase",
    "phase_of",
    "DECIDE_TABLE",
    "CANCEL_MESSAGE",
    "evolve",
    "valid_run_end",
    "valid_scheduling",
    "KIND_FOR_POLICY",
]
