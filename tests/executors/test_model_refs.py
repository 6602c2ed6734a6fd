"""A mistyped model ref is found and explained (issue 9 "mistakes are found late";
RUN-EXE-5): ``ModelUnavailableError`` names the ref and says how to fail or cancel a Run
that froze it; the executor says which refs it serves."""

from __future__ import annotations

import pickle

from runx_actors import effect
from runx_actors.executors import ScriptedModel, open_local_executor, reply
from runx_actors.protocol.errors import ModelUnavailableError, RunNotFoundError
from runx_actors.protocol.values import RunReason, RunStatus
from runx_actors.runtime import open_runtime
from runx_actors.store.memory import MemoryStore


def test_the_error_names_the_ref_and_the_way_out() -> None:
    failure = effect.ToolFailure("provider_failure", "model 'gtp-4' is not served")
    error = ModelUnavailableError("the executor cannot serve this model", failure=failure,
                                  model="gtp-4")
    text = str(error)
    assert "'gtp-4'" in text and "rt.cancel(run_id)" in text and "serve" in text
    assert error.model == "gtp-4" and error.failure == failure
    again = pickle.loads(pickle.dumps(error))
    assert str(again) == text and again.model == "gtp-4"


async def test_a_run_with_a_mistyped_model_ref_is_explained_and_can_be_cancelled() -> None:
    store = MemoryStore()
    caught: list[BaseException] = []
    async with open_local_executor(models={"gpt": ScriptedModel([reply("hi")])}) as ex:
        assert ex.serves_model("gpt") and not ex.serves_model("gtp")
        try:
            async with open_runtime(store, ex, scope="refs", model="gtp") as rt:
                await rt.create_run("run-1", ["hello"])
                await rt.drive("run-1")
        except* ModelUnavailableError as group:
            caught.extend(_leaves(group))
        (error,) = caught
        assert isinstance(error, ModelUnavailableError) and error.model == "gtp"
        assert "'gtp'" in str(error) and "rt.cancel" in str(error)
        # the way out the message names: a runtime serving the ref opens, and the Run
        # that froze the mistyped ref (if the first runtime got to create it) is cancelled
        async with open_runtime(store, ex, scope="refs", model="gpt") as rt:
            try:
                await rt.snapshot("run-1")
            except RunNotFoundError:
                return  # refused at open: no Run froze the ref
            await rt.cancel("run-1")
            state = (await rt.snapshot("run-1")).state
            assert state.status is RunStatus.STOPPED and state.result is not None
            assert state.result.reason is RunReason.CANCELLED


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for sub in error.exceptions for leaf in _leaves(sub)]
    return [error]
