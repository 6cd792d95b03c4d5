# The lessor image: one package, three entry points (`lessor apiserver`, `lessor operator`,
# and the `lessor` client). Built from the wheel, so it holds exactly what pip installs, in a
# virtual environment (/opt/lessor) so that any Python base works, a distribution's included.
#   docker build -t lessor:dev .
# `make release` builds it as lessor:<version> with REVISION and SOURCE set (release/build.py).
# BASE is any image with python3 (3.11+) and its venv module: python:3.12-slim by default. A
# builder that cannot reach PyPI passes a directory of wheels as PIP_FIND_LINKS, with
# PIP_NO_INDEX=1 (e2e/kind/lessor_image.py does, with a Debian base made on the machine).
ARG BASE=python:3.12-slim
# Helm, which the operator renders chart addons with (docs/operator.md, "Preparation"), built
# from its Go module at HELM_VERSION (versions.json's `helm`; a test holds them equal). A
# builder that cannot pull golang passes HELM_BUILDER, an image with a helm already built at
# /go/bin/helm: then nothing is built (e2e/kind/lessor_image.py does).
ARG HELM_BUILDER=golang:1.26-bookworm

FROM ${HELM_BUILDER} AS helm
ARG HELM_VERSION=v3.22.0
RUN test -x /go/bin/helm \
    || CGO_ENABLED=0 go install -trimpath -ldflags="-s -w" "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}"

FROM ${BASE} AS build
ARG PIP_FIND_LINKS
ARG PIP_NO_INDEX
WORKDIR /src
# The dependencies first, as wheels, from the packaging metadata alone (a stand-in package of the
# same name): their layers are rebuilt when setup.cfg or pyproject.toml change, not at every
# change of lessor's code, which then costs one small wheel and one install.
COPY setup.cfg pyproject.toml ./
RUN python3 -m venv /opt/build \
    && mkdir lessor && echo '__version__ = "0"' > lessor/__init__.py && touch README.md LICENSE \
    && /opt/build/bin/pip wheel --no-cache-dir --wheel-dir /deps ".[server]" \
    && rm -rf lessor README.md LICENSE build lessor.egg-info /deps/lessor-*.whl
COPY README.md LICENSE ./
COPY lessor ./lessor
COPY man ./man
RUN /opt/build/bin/pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM ${BASE}
COPY --from=build /deps /deps
RUN python3 -m venv /opt/lessor \
    && /opt/lessor/bin/pip install --no-cache-dir --no-index --find-links /deps /deps/*.whl \
    && rm -rf /deps \
    && useradd --uid 65532 --user-group --no-create-home --shell /usr/sbin/nologin lessor
COPY --from=helm /go/bin/helm /usr/local/bin/helm
COPY --from=build /wheels /wheels
RUN /opt/lessor/bin/pip install --no-cache-dir --no-index --no-deps /wheels/*.whl \
    && /opt/lessor/bin/pip check \
    && rm -rf /wheels
USER 65532:65532
# Writable paths are mounted (an emptyDir at /tmp); the root filesystem stays read-only.
ENV PATH=/opt/lessor/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
EXPOSE 8000 8080
ENTRYPOINT ["lessor"]
CMD ["--help"]
# What the image says it is, as OCI annotations (`docker inspect`, and the registry's page):
# its version (`python -m release version` writes this default; a test holds it to
# lessor/__init__.py), the commit it was built from, and where that commit lives. Last, so that
# a build of another commit reuses every layer above.
ARG VERSION=0.2.0
ARG REVISION=
ARG SOURCE=https://github.com/lessor-dev/lessor
LABEL org.opencontainers.image.title=lessor \
      org.opencontainers.image.version=${VERSION} \
      org.opencontainers.image.revision=${REVISION} \
      org.opencontainers.image.source=${SOURCE} \
      org.opencontainers.image.licenses=Apache-2.0
