"""The lessor API's answers, read through the response models the server answers with
(lessor.protocol.responses), and written back out as the server wrote them.

An answer is validated once, where it arrives, and the commands read attributes of its model:
a field that is missing or of the wrong type is one line naming the request and the field
(never its value: an answer may carry a kubeconfig or a session token) and exit code 1, as any
other server fault, instead of a KeyError's traceback in the middle of a command. Fields the
model does not know, from a newer server, are ignored (the models' default).
"""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel, ValidationError

from lessor import __version__
from lessor.cli.errors import SERVER, CliError
from lessor.protocol.json_object import Json
from lessor.protocol.responses import serialized
from lessor.protocol.validation_errors import describe

M = TypeVar("M", bound=BaseModel)


class MalformedAnswerError(CliError):
    """A server answer that does not fit the model of its endpoint: a server of another
    version, or not lessor's, more likely than a bug. Exit code 1, as any server fault."""

    def __init__(self, message: str) -> None:
        super().__init__(message, SERVER)


def _malformed(method: str, path: str, model: str, problems: str) -> MalformedAnswerError:
    """The line: the request (its query left out: a long poll's `waitSeconds` says nothing),
    the model, and each field's problem."""
    request = f"{method} {path.partition('?')[0]}"
    return MalformedAnswerError(
        f"the answer to {request} is not a {model} this lessor ({__version__}) can read: {problems}"
    )


def read(model: type[M], body: object, method: str, path: str) -> M:
    """The answer to `method path` as `model`, or MalformedAnswerError."""
    try:
        return model.model_validate(body)
    except ValidationError as error:
        problems = describe(error, root="the body")
        raise _malformed(method, path, model.__name__, problems) from None


def read_list(model: type[M], body: object, method: str, path: str) -> list[M]:
    """A listing's answer, a JSON array of `model`s; a problem is named by its item's index."""
    listing = f"list of {model.__name__}"
    if not isinstance(body, list):
        raise _malformed(method, path, listing, "the body: Input should be a list")
    items = []
    for index, item in enumerate(body):
        try:
            items.append(model.model_validate(item))
        except ValidationError as error:
            problems = f"item {index}: {describe(error, root='the item')}"
            raise _malformed(method, path, listing, problems) from None
    return items


def as_sent(answer: BaseModel) -> Json:
    """The answer's JSON as the server sent it, for `-o json`, `-o yaml` and `-o jsonpath`,
    which show what the server said: by the API's one rule (`serialized`), so the keys are the
    document's spelling (`resourceKind`, `exitCode`), a field the server set to null is null,
    and one it never set is absent. Fields this CLI does not know, from a newer server, are not
    shown: what `-o json` prints is what this version of lessor documents."""
    return serialized(answer)
