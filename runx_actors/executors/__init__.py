"""Shipped executors (architecture §5): the in-process :class:`LocalExecutor`, tools from
Python callables, workspace-confined ``fs.read``/``fs.write``, a subprocess tool (argv,
no shell: :func:`subprocess_tool`), and model backends
(:class:`ScriptedModel` for tests and demos,
:class:`OpenAIChatModel` for OpenAI-compatible chat-completions APIs).

Typical use::

    async with open_local_executor(tools=workspace_tools(root),
                                   models={"scripted": ScriptedModel([...])}) as ex:
        ...
"""

from ._fs import MAX_READ_BYTES as MAX_READ_BYTES
from ._fs import MAX_WRITE_BYTES as MAX_WRITE_BYTES
from ._fs import Workspace as Workspace
from ._fs import fs_read_tool as fs_read_tool
from ._fs import fs_write_tool as fs_write_tool
from ._fs import workspace_tools as workspace_tools
from ._local import DEFAULT_BACKOFF as DEFAULT_BACKOFF
from ._local import DEFAULT_MAX_BACKOFF as DEFAULT_MAX_BACKOFF
from ._local import DEFAULT_MAX_MODEL_RESULT_BYTES as DEFAULT_MAX_MODEL_RESULT_BYTES
from ._local import DEFAULT_MAX_RETRY_AFTER as DEFAULT_MAX_RETRY_AFTER
from ._local import DEFAULT_MAX_TOOL_OUTPUT_BYTES as DEFAULT_MAX_TOOL_OUTPUT_BYTES
from ._local import DEFAULT_MODEL_ATTEMPTS as DEFAULT_MODEL_ATTEMPTS
from ._local import DEFAULT_RETAINED_TOMBSTONES as DEFAULT_RETAINED_TOMBSTONES
from ._local import LocalExecutor as LocalExecutor
from ._local import LocalExecutorStatistics as LocalExecutorStatistics
from ._local import open_local_executor as open_local_executor
from ._models import Model as Model
from ._models import ModelEmit as ModelEmit
from ._models import ModelError as ModelError
from ._models import ScriptedModel as ScriptedModel
from ._models import ScriptTurn as ScriptTurn
from ._models import StreamingModel as StreamingModel
from ._models import call_tools as call_tools
from ._models import reply as reply
from ._models import tool_call as tool_call
from ._openai import ChatCompletionError as ChatCompletionError
from ._openai import OpenAIChatModel as OpenAIChatModel
from ._openai import chat_completions_body as chat_completions_body
from ._openai import model_result_from_chat as model_result_from_chat
from ._subprocess import DEFAULT_SUBPROCESS_TIMEOUT as DEFAULT_SUBPROCESS_TIMEOUT
from ._subprocess import EXIT_NONZERO as EXIT_NONZERO
from ._subprocess import MAX_OUTPUT_BYTES as MAX_OUTPUT_BYTES
from ._subprocess import MINIMAL_ENV_KEYS as MINIMAL_ENV_KEYS
from ._subprocess import SUBPROCESS_PARAMETERS as SUBPROCESS_PARAMETERS
from ._subprocess import TERMINATE_GRACE as TERMINATE_GRACE
from ._subprocess import minimal_env as minimal_env
from ._subprocess import subprocess_tool as subprocess_tool
from ._tools import DEFAULT_PARAMETERS as DEFAULT_PARAMETERS
from ._tools import Tool as Tool
from ._tools import ToolCheck as ToolCheck
from ._tools import ToolContext as ToolContext
from ._tools import ToolError as ToolError
from ._tools import ToolUnknownError as ToolUnknownError
from ._tools import python_tool as python_tool
from ._tools import tool as tool

__all__ = [
    "MAX_READ_BYTES", "MAX_WRITE_BYTES", "Workspace", "fs_read_tool", "fs_write_tool",
    "workspace_tools",
    "DEFAULT_BACKOFF", "DEFAULT_MAX_BACKOFF", "DEFAULT_MAX_RETRY_AFTER",
    "DEFAULT_MAX_MODEL_RESULT_BYTES", "DEFAULT_MAX_TOOL_OUTPUT_BYTES", "DEFAULT_MODEL_ATTEMPTS",
    "DEFAULT_RETAINED_TOMBSTONES", "LocalExecutor",
    "LocalExecutorStatistics",
    "open_local_executor",
    "Model", "ModelEmit", "ModelError", "ScriptedModel", "ScriptTurn", "StreamingModel",
    "call_tools", "reply", "tool_call",
    "DEFAULT_SUBPROCESS_TIMEOUT", "EXIT_NONZERO", "MAX_OUTPUT_BYTES", "MINIMAL_ENV_KEYS",
    "SUBPROCESS_PARAMETERS", "TERMINATE_GRACE", "minimal_env", "subprocess_tool",
    "ChatCompletionError", "OpenAIChatModel", "chat_completions_body",
    "model_result_from_chat",
    "DEFAULT_PARAMETERS", "Tool", "ToolCheck", "ToolContext", "ToolError",
    "ToolUnknownError", "python_tool", "tool",
]

for _name in __all__:
    _obj = globals()[_name]
    if isinstance(_obj, type) and _obj.__module__.startswith(__name__ + "."):
        _obj.__module__ = __name__
del _name, _obj
