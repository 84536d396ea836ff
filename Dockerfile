# The Rewind worker image used by docker-compose.yml.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md worker.py ./
COPY workflows ./workflows
COPY activities ./activities
COPY checkpoint_bridge ./checkpoint_bridge
COPY rewind ./rewind
COPY examples ./examples
RUN pip install --no-cache-dir .
CMD ["python", "worker.py"]
