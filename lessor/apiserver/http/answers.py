"""What a responder answers when it succeeds, stated once, beside the responder.

`@responds(Model, status=...)` says it; the responder then only computes its answer. The
wrapper sets the success status, hands the responder its parsed query (a `query` parameter of
the responder's, typed by a Query model), and checks the body against the model, so an answer
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

from lessor.apiserver.http.conformance import ResponseDriftError, conform, conform_each
from lessor.apiserver.http.queries import Query, query_of

ResponderT = TypeVar("ResponderT", bound=Callable[..., None])
_ANSWER = "__answer__"


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

    def check(self, status: int, media: Any) -> None:
        """Raises unless `media` is what the model of `status` describes."""
        bodies = self.bodies()
        if status not in bodies:
            raise ResponseDriftError(f"{status} is no success of this responder")
        model = bodies[status]
        if model is not None and self.many:
            conform_each(model, media)
        elif model is not None:
            conform(model, media)


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
            answer.check(resp.status_code, resp.media)

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
