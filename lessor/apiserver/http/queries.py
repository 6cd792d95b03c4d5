"""The query parameters of a responder, as a pydantic model: the one statement of their names,
bounds and defaults, which the responder is handed parsed (lessor.apiserver.http.answers) and
the OpenAPI document lists (lessor.apiserver.routes.openapi)."""

from __future__ import annotations

import functools
from typing import Annotated, TypeVar

import falcon
from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError

from lessor.apiserver.http.errors import BadRequestError
from lessor.protocol.json_object import Json

QueryT = TypeVar("QueryT", bound="Query")


class Query(BaseModel):
    """A responder's query parameters, one field each, named by its alias. A parameter the model
    does not name is ignored, and one given twice counts with its last value, as Falcon's own
    getters always read them here."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=True)


def _ascii_digits(raw: object) -> object:
    # ASCII digits only: str.isdigit also takes "²", which int() then refuses, and int() takes
    # "1_0", "٣" and " 7 ".
    if isinstance(raw, str):
        if not (raw.isascii() and raw.isdigit() and len(raw) <= 16):
            raise ValueError("not an integer")
        return int(raw)
    return raw


# A whole number of a query string; its bounds are the field's (`ge`, `le`).
Digits = Annotated[int, BeforeValidator(_ascii_digits)]


def query_of(req: falcon.Request, model: type[QueryT]) -> QueryT:
    """The request's query string as `model`; a value it refuses is a 400 naming the parameter."""
    given = {}
    for name, field in model.model_fields.items():
        key = field.alias or name
        value = req.get_param(key)
        if value is not None:
            given[key] = value
    try:
        return model.model_validate(given)
    except ValidationError as error:
        key = str(error.errors()[0]["loc"][0])
        raise BadRequestError(_refusal(key, _schema(model)["properties"][key])) from None


@functools.cache
def _schema(model: type[Query]) -> Json:
    return model.model_json_schema(by_alias=True)


def _refusal(key: str, schema: Json) -> str:
    """What a refused parameter must be, in the terms the document gives it."""
    if schema.get("type") == "integer":
        return f"{key} must be an integer from {schema['minimum']} to {schema['maximum']}"
    return f"{key} is not valid"
