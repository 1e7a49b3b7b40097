# One image for every role: `kraft server`, configured by KRAFT_* environment variables
# (KRAFT_NODE_ID, KRAFT_PROCESS_ROLES, KRAFT_LISTENERS, ...): the contract is docs/INTERFACE.md,
# the details README.md's "Containers".
#
#   docker build -t kraft-platform:local \
#       --build-arg VERSION=0.1.0 --build-arg REVISION=$(git rev-parse HEAD) \
#       --build-arg CREATED=$(date -u +%Y-%m-%dT%H:%M:%SZ) .
#
# Dependencies are pinned with their hashes in docker/requirements.txt and installed in a layer
# of their own before any code is copied, so a code change rebuilds only the last layers.
# After a change to pyproject.toml's dependencies, regenerate it (pip-tools 7.6 on Python 3.11,
# against PyPI only) with the command in its header, and the builder's with:
#   pip-compile --allow-unsafe --generate-hashes -o docker/build-requirements.txt \
#       docker/build-requirements.in

# Builder: compiles the record walk (kafka_protocol/_record_walk.c) into the project's wheel,
# so that the final image carries no compiler, no sources and no build tree.  The official
# slim image has the Python headers; one whose Python is Debian's own (the stand-in base on
# registry-less machines) gets python3-dev.
FROM python:3.11-slim AS builder
# Names the builder's (untagged) images, so that superseded ones can be found and removed.
LABEL kraft-platform.stage=builder
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && (python -c "import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_path('include'), 'Python.h')))" \
        || apt-get install -y --no-install-recommends python3-dev) \
    && rm -rf /var/lib/apt/lists/*
COPY docker/build-requirements.txt /tmp/
RUN pip install --no-cache-dir --require-hashes -r /tmp/build-requirements.txt
WORKDIR /src
COPY pyproject.toml README.md setup.py ./
COPY kafka_protocol ./kafka_protocol
COPY metadata_log ./metadata_log
COPY kraft ./kraft
COPY broker ./broker
COPY spark_source ./spark_source
RUN pip wheel --no-cache-dir --no-deps --no-build-isolation --wheel-dir /wheels .

FROM python:3.11-slim

# A single combined node by default, secured: SASL_SSL for Kafka clients on 9092 and HTTPS for
# the REST API on 8080, on every interface; security.autoconfigure generates on the first start
# what is not given (a CA and a certificate naming the advertised host, the super user "admin"
# with its password printed once in `docker logs`; kraft/node/autoconfigure.py).  Give your
# own (KRAFT_SSL_KEYSTORE_LOCATION, KRAFT_SASL_JAAS_CONFIG, ...) and nothing is generated;
# compose files override all of these.  Published on another host port (-p 19092:9092)?
# Tell clients so: -e KRAFT_ADVERTISED_ADDRESS=localhost:19092 (the certificate follows).
# Everything that does not depend on the code comes before it: on a code change only the
# wheel's layers are built again (each step costs a copy of the image on a vfs engine).
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    KRAFT_NODE_ID=1 \
    KRAFT_PROCESS_ROLES=broker,controller \
    KRAFT_LISTENERS=SASL_SSL://0.0.0.0:9092 \
    KRAFT_ADVERTISED_ADDRESS=localhost:9092 \
    KRAFT_ADMIN_LISTENER=https://0.0.0.0:8080 \
    KRAFT_SECURITY_AUTOCONFIGURE=true \
    KRAFT_LOG_DIRS=/var/lib/kraft/data \
    KRAFT_METADATA_LOG_DIR=/var/lib/kraft/metadata

# /etc/kraft/certs: where compose's one-shot `kraft certs create` writes the CA and the nodes'
# certificates (a named volume mounted there starts out owned by kraft).
RUN useradd --create-home --uid 10001 --user-group --shell /usr/sbin/nologin kraft \
    && mkdir -p /var/lib/kraft /etc/kraft/certs \
    && chown kraft:kraft /var/lib/kraft /etc/kraft/certs

# The locked dependencies, hash-checked.  pysyncobj comes as a source distribution only: it is
# built with the pinned setuptools (no unpinned build environment), which goes again after.
COPY docker/requirements.txt docker/build-requirements.txt /tmp/lock/
RUN pip install --require-hashes --no-deps -r /tmp/lock/build-requirements.txt \
    && pip install --require-hashes --no-deps --no-build-isolation -r /tmp/lock/requirements.txt \
    && pip uninstall -y setuptools \
    && rm -rf /tmp/lock
COPY docker/entrypoint.sh /usr/local/bin/kraft-entrypoint

VOLUME ["/var/lib/kraft"]
# What the default node binds: Kafka (SASL_SSL) and the REST API (HTTPS); a single combined
# node's controller is in-process (no CONTROLLER listener, no Raft port).
EXPOSE 9092 8080
# The node's own configuration says where its REST API is (KRAFT_ADMIN_LISTENER, the node's
# --config/--override, its scheme, host and port): `kraft healthcheck` reads it as
# `kraft server` does.
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 CMD ["kraft", "healthcheck"]
STOPSIGNAL SIGTERM
# Starts as root only to hand a fresh bind mount to uid 10001, then runs as kraft (setpriv).
ENTRYPOINT ["kraft-entrypoint", "kraft", "server"]

# The code: the wheel from the builder, its dependencies already there.
COPY --from=builder /wheels /tmp/wheels
RUN pip install --no-deps /tmp/wheels/kraft_platform-*.whl && rm -rf /tmp/wheels

# Last: build arguments change the cache of every RUN after them.
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="kraft-platform" \
      org.opencontainers.image.description="A Kafka-compatible streaming platform in Python: one node (broker, controller or both) per container" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="$VERSION" \
      org.opencontainers.image.revision="$REVISION" \
      org.opencontainers.image.created="$CREATED" \
      org.opencontainers.image.base.name="python:3.11-slim"
