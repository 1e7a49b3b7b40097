# One image for every role: `kraft server`, configured by KRAFT_* environment variables
# (KRAFT_NODE_ID, KRAFT_PROCESS_ROLES, KRAFT_LISTENERS, ...; see INTERFACE.md).

# Builder: compiles the record walk (kafka_protocol/_record_walk.c) into a wheel, so that the
# image itself carries no compiler.  The official slim image has the Python headers; an image
# whose Python is Debian's own (the stand-in base on registry-less machines) gets python3-dev.
FROM python:3.11-slim AS builder
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && (python -c "import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_path('include'), 'Python.h')))" \
        || apt-get install -y --no-install-recommends python3-dev) \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md setup.py ./
COPY kafka_protocol ./kafka_protocol
COPY metadata_log ./metadata_log
COPY kraft ./kraft
COPY broker ./broker
COPY spark_source ./spark_source
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# /etc/kraft/certs: where compose's one-shot `kraft certs create` writes the CA and the nodes'
# certificates (a named volume mounted there starts out owned by kraft).
RUN useradd --create-home --uid 10001 --shell /usr/sbin/nologin kraft \
    && mkdir -p /var/lib/kraft /etc/kraft/certs \
    && chown kraft:kraft /var/lib/kraft /etc/kraft/certs

WORKDIR /opt/kraft
COPY --from=builder /wheels /wheels
RUN pip install "$(echo /wheels/kraft_platform-*.whl)[fast]" && rm -rf /wheels

# A single combined node by default, secured: SASL_SSL for Kafka clients and HTTPS for the REST
# API on every interface, and security.autoconfigure generates on the first start what is not
# given (a CA and certificate, the super user "admin" with its password printed once in
# `docker logs`; kraft/node/autoconfigure.py).  Give your own (KRAFT_SSL_KEYSTORE_LOCATION,
# KRAFT_SASL_JAAS_CONFIG, ...) and nothing is generated; compose files override all of these.
ENV KRAFT_NODE_ID=1 \
    KRAFT_PROCESS_ROLES=broker,controller \
    KRAFT_LISTENERS=SASL_SSL://0.0.0.0:9092 \
    KRAFT_ADVERTISED_LISTENERS=SASL_SSL://localhost:9092 \
    KRAFT_ADMIN_LISTENER=https://0.0.0.0:8080 \
    KRAFT_SECURITY_AUTOCONFIGURE=true \
    KRAFT_LOG_DIRS=/var/lib/kraft/data \
    KRAFT_METADATA_LOG_DIR=/var/lib/kraft/metadata

USER kraft
VOLUME ["/var/lib/kraft"]
EXPOSE 9092 9093 8080
# /v1/health stays open without credentials; the admin API is HTTPS by default (its certificate
# is checked by the clients, not by this probe of the container's own loopback), HTTP when the
# admin listener is set to http://.
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
    CMD python -c "import os, ssl, urllib.request; scheme = os.environ.get('KRAFT_ADMIN_LISTENER', 'https').split(':')[0]; urllib.request.urlopen(scheme + '://127.0.0.1:8080/v1/health', timeout=2, context=ssl._create_unverified_context() if scheme == 'https' else None)"
STOPSIGNAL SIGTERM
ENTRYPOINT ["kraft", "server"]
