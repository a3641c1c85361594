# regionsync node image: docker build -t regionsync . ; see deploy/compose.yaml
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /build
COPY pyproject.toml README.md LICENSE CHANGELOG.md ./
COPY src ./src
COPY crdt ./crdt
COPY sim ./sim
# the Python SDK: `regionsync outbox-relay` publishes through it
COPY clients/python ./clients/python
# at the versions the repository's tests ran with (README "make test")
COPY constraints ./constraints
RUN pip install -c constraints/dev.txt . ./clients/python && rm -rf /build

# an unprivileged user owns the data directory (named volumes inherit the ownership)
RUN useradd --system --uid 10001 --home-dir /var/lib/regionsync --shell /usr/sbin/nologin \
        regionsync \
    && mkdir -p /var/lib/regionsync /etc/regionsync \
    && chown regionsync:regionsync /var/lib/regionsync
USER regionsync
WORKDIR /var/lib/regionsync

# HTTP API and probes; gRPC replication between regions
EXPOSE 8080 7070
HEALTHCHECK --interval=10s --timeout=3s --start-period=15s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2)"]

ENTRYPOINT ["regionsync"]
CMD ["serve", "--config", "/etc/regionsync/node.toml"]
