# One image for every role; the role comes from KRAFT_* environment variables.
FROM python:3.11-slim
RUN useradd --create-home --uid 1000 kraft
WORKDIR /opt/kraft
COPY pyproject.toml README.md ./
COPY kafka_protocol ./kafka_protocol
COPY kraft ./kraft
COPY broker ./broker
COPY metadata_log ./metadata_log
COPY spark_source ./spark_source
RUN pip install --no-cache-dir '.[fast]'
USER kraft
ENTRYPOINT ["kraft"]
CMD ["--version"]
