"""What a responder answers when it succeeds, stated once, beside the responder; and the one
rule by which every answer's model becomes its JSON.

`@responds(Model, status=...)` says it; the responder then only computes its answer, a `Model`
(a list of them with `many=True`) put in `resp.media`. The wrapper sets the success status,
hands the responder its parsed query (a `query` parameter of the responder's, typed by a Query
model), checks that the answer is that model, and serializes it by `serialized`, so an answer
cannot drift from the OpenAPI document, which is made from the same statement
(lessor.apiserver.routes.openapi).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast, get_type_hints

import falcon
from pydantic import BaseModel

from lessor.apiserver.http.queries import Query, query_of
from lessor.protocol.json_object import Json

ResponderT = TypeVar("ResponderT", bound=Callable[..., None])
_ANSWER = "__answer__"


class ResponseDriftError(Exception):
    """An answer its declaration does not describe: a bug in this server, so a 500 (logged),
    never a body that disagrees with the document."""


def serialized(body: BaseModel) -> Json:
    """The JSON of an answer's model, successes and errors alike: the one rule, stated here
    only. Fields are spelt as the document spells them (the aliases: `statusUrl`, `exitCode`,
    `queueDepth`, ...), and an answer holds exactly the fields its server set: one set to None
    is null (a Pending lease's `expires_at`, which the spec lists among a listed lease's
    fields), one never set is absent (the `alias` of a lease that has none). `exclude_none`
    would drop those nulls, which clients have always received."""
    return body.model_dump(mode="json", by_alias=True, exclude_unset=True)


@dataclass(frozen=True)
class Answer:
    """A responder's contract: read by its wrapper on every request, and by the document."""

    status: int  # the success the responder answers unless it says otherwise
    body: type[BaseModel] | None  # None: no JSON body (204, or text)
    many: bool  # a JSON array of `body`s
    query: type[Query] | None  # the query parameters the responder reads
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
        answer = Answer(status, body, many, _query_model(responder), others or {})

        @functools.wraps(responder)
        def answering(
            resource: object, req: falcon.Request, resp: falcon.Response, **params: Any
        ) -> None:
            if answer.query is not None:
                params["query"] = query_of(req, answer.query)
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


def _query_model(responder: Callable[..., None]) -> type[Query] | None:
    if "query" not in inspect.signature(responder).parameters:
        return None
    model = get_type_hints(responder)["query"]
    if not (isinstance(model, type) and issubclass(model, Query)):
        raise TypeError(f"{responder.__qualname__}: its query must be typed by a Query model")
    return model
