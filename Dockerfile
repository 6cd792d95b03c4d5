# The lessor image: one package, three entry points (`lessor apiserver`, `lessor operator`,
# and the `lessor` client). Built from the wheel, so it holds exactly what pip installs.
#   docker build -t lessor:dev .
FROM python:3.12-slim AS build
WORKDIR /src
COPY setup.cfg pyproject.toml README.md ./
COPY lessor ./lessor
COPY man ./man
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.12-slim
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links /wheels lessor \
    && rm -rf /wheels \
    && useradd --uid 65532 --user-group --no-create-home --shell /usr/sbin/nologin lessor
USER 65532:65532
# Writable paths are mounted (an emptyDir at /tmp); the root filesystem stays read-only.
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
EXPOSE 8000 8080
ENTRYPOINT ["lessor"]
CMD ["--help"]
