# The lessor image: one package, three entry points (`lessor apiserver`, `lessor operator`,
# and the `lessor` client). Built from the wheel, so it holds exactly what pip installs, in a
# virtual environment (/opt/lessor) so that any Python base works, a distribution's included.
#   docker build -t lessor:dev .
# BASE is any image with python3 (3.11+) and its venv module: python:3.12-slim by default. A
# builder that cannot reach PyPI passes a directory of wheels as PIP_FIND_LINKS, with
# PIP_NO_INDEX=1 (e2e/kind/lessor_image.py does, with a Debian base made on the machine).
ARG BASE=python:3.12-slim

FROM ${BASE} AS build
ARG PIP_FIND_LINKS
ARG PIP_NO_INDEX
WORKDIR /src
COPY setup.cfg pyproject.toml README.md LICENSE ./
COPY lessor ./lessor
COPY man ./man
RUN python3 -m venv /opt/build \
    && /opt/build/bin/pip wheel --no-cache-dir --wheel-dir /wheels ".[server]"

FROM ${BASE}
COPY --from=build /wheels /wheels
RUN python3 -m venv /opt/lessor \
    && /opt/lessor/bin/pip install --no-cache-dir --no-index --find-links /wheels "lessor[server]" \
    && rm -rf /wheels \
    && useradd --uid 65532 --user-group --no-create-home --shell /usr/sbin/nologin lessor
USER 65532:65532
# Writable paths are mounted (an emptyDir at /tmp); the root filesystem stays read-only.
ENV PATH=/opt/lessor/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
EXPOSE 8000 8080
ENTRYPOINT ["lessor"]
CMD ["--help"]
