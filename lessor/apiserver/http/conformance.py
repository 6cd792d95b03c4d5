"""Whether an answer is what the document says it is: the API's responses are checked against
their models (lessor.protocol.responses) before they leave, so an answer cannot drift from the
OpenAPI document made from the same models."""

from __future__ import annotations

from pydantic import BaseModel, ValidationError

from lessor.protocol.json_object import Json


class ResponseDriftError(Exception):
    """An answer its model does not describe: a bug in this server, so a 500 (logged), never a
    body that disagrees with the document."""


def conform(model: type[BaseModel], body: Json) -> Json:
    """`body`, once it is what the document calls `model`: each field of its type, every
    required one present, and none the model does not name. The body itself is answered, not
    the model re-serialized, so checking it changes no byte of any answer."""
    try:
        model.model_validate(body)
    except ValidationError as error:
        # Where and what, never the values: an answer may carry a kubeconfig or a token.
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc']))}: {e['msg']}"
            for e in error.errors(include_input=False, include_url=False)
        )
        raise ResponseDriftError(f"{model.__name__}: {problems}") from None
    names = {field.alias or name for name, field in model.model_fields.items()}
    if unknown := set(body) - names:
        raise ResponseDriftError(f"{model.__name__} does not name {sorted(unknown)}")
    return body


def conform_each(model: type[BaseModel], bodies: list[Json]) -> list[Json]:
    """A list of `model`s, each checked as `conform` checks one."""
    return [conform(model, body) for body in bodies]
