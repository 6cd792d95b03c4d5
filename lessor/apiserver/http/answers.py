"""What a responder answers when it succeeds, stated once, beside the responder; and the one
rule by which every answer's model becomes its JSON.

`@responds(Model, status=...)` says it; the responder then only computes its answer, a `Model`
(a list of them with `many=True`) put in `resp.media`. The wrapper sets the success status,
hands the responder its parsed query (a `query` parameter of the responder's, typed by a Query
model) and its parsed body (a `body` parameter, typed by the request's model; `Model | None`
where the body may be left out), checks that the answer is that model, and serializes it by
the one rule (lessor.protocol.responses.serialized, which the CLI writes `-o json` by too), so
neither a request nor an answer can drift from the OpenAPI document, which is made from the
same statement (lessor.apiserver.routes.openapi).
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, Union, cast, get_args, get_origin, get_type_hints

import falcon
from pydantic import BaseModel

from lessor.apiserver.http.bodies import parse
from lessor.apiserver.http.queries import Query, query_of
from lessor.protocol.json_object import Json
from lessor.protocol.responses import serialized

ResponderT = TypeVar("ResponderT", bound=Callable[..., None])
_ANSWER = "__answer__"


class ResponseDriftError(Exception):
    """An answer its declaration does not describe: a bug in this server, so a 500 (logged),
    never a body that disagrees with the document."""


@dataclass(frozen=True)
class Answer:
    """A responder's contract: read by its wrapper on every request, and by the document."""

    status: int  # the success the responder answers unless it says otherwise
    body: type[BaseModel] | None  # None: no JSON body (204, or text)
    many: bool  # a JSON array of `body`s
    query: type[Query] | None  # the query parameters the responder reads
    request: type[BaseModel] | None  # the JSON body the responder reads
    request_optional: bool  # the body may be left out (the responder gets None)
    # Other successes the responder may choose, with their bodies (an execution's 202).
    others: Mapping[int, type[BaseModel]] = field(default_factory=dict)

    def bodies(self) -> dict[int, type[BaseModel] | None]:
        """Every success, and its body's model."""
        return {self.status: self.body, **self.others}

    def serialize(self, status: int, media: object) -> Json | list[Json] | None:
        """The JSON of `media`, once it is what this contract says `status` answers: an
        instance of that status's model, a list of them where `many`, nothing where the status
        has no JSON body. Anything else (a dict included) raises ResponseDriftError."""
        bodies = self.bodies()
        if status not in bodies:
            raise ResponseDriftError(f"{status} is no success of this responder")
        model = bodies[status]
        if model is None:
            if media is not None:
                raise ResponseDriftError(f"{status} has no JSON body: {_kind(media)} answered")
            return None
        if not self.many:
            return serialized(_exactly(model, media))
        if not isinstance(media, list):
            raise ResponseDriftError(f"a list of {model.__name__} expected: {_kind(media)}")
        return [serialized(_exactly(model, item)) for item in media]


def _exactly(model: type[BaseModel], media: object) -> BaseModel:
    """`media`, if it is a `model` itself: a subclass has fields the model's answer must not
    carry (a Lease's kubeconfig in a list of LeaseSummary)."""
    if type(media) is not model:
        raise ResponseDriftError(f"{model.__name__} expected: {_kind(media)} answered")
    return media


def _kind(media: object) -> str:
    """What was answered, named by its type: never its value (it may hold a kubeconfig)."""
    return type(media).__name__


def responds(
    body: type[BaseModel] | None = None,
    *,
    status: int = 200,
    many: bool = False,
    others: Mapping[int, type[BaseModel]] | None = None,
) -> Callable[[ResponderT], ResponderT]:
    """Declares the responder's answer. A responder with a `query` parameter gets the request's
    query string parsed into that parameter's model (a bad value is a 400)."""

    def declare(responder: ResponderT) -> ResponderT:
        request, optional = _body_model(responder)
        query = _query_model(responder)
        answer = Answer(status, body, many, query, request, optional, others or {})

        @functools.wraps(responder)
        def answering(
            resource: object, req: falcon.Request, resp: falcon.Response, **params: Any
        ) -> None:
            if answer.query is not None:
                params["query"] = query_of(req, answer.query)
            if answer.request is not None:
                sent = req.context.body
                left_out = answer.request_optional and not sent
                params["body"] = None if left_out else parse(answer.request, sent, req.content_type)
            resp.status = answer.status
            responder(resource, req, resp, **params)
            answered = answer.serialize(resp.status_code, resp.media)
            if answered is not None:
                resp.media = answered

        setattr(answering, _ANSWER, answer)
        return cast(ResponderT, answering)

    return declare


def answer_of(responder: object) -> Answer | None:
    """The answer a responder declared with `responds`, if it did."""
    found = getattr(responder, _ANSWER, None)
    return found if isinstance(found, Answer) else None


def _body_model(responder: Callable[..., None]) -> tuple[type[BaseModel] | None, bool]:
    """The model of the responder's `body` parameter, and whether it may be None."""
    if "body" not in inspect.signature(responder).parameters:
        return None, False
    hint = get_type_hints(responder)["body"]
    models = [a for a in get_args(hint) if a is not type(None)]
    is_union = get_origin(hint) in (Union, types.UnionType)
    model = models[0] if is_union and len(models) == 1 else hint
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise TypeError(f"{responder.__qualname__}: its body must be typed by a pydantic model")
    return model, model is not hint


def _query_model(responder: Callable[..., None]) -> type[Query] | None:
    if "query" not in inspect.signature(responder).parameters:
        return None
    model = get_type_hints(responder)["query"]
    if not (isinstance(model, type) and issubclass(model, Query)):
        raise TypeError(f"{responder.__qualname__}: its query must be typed by a Query model")
    return model
