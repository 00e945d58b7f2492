# One image for every Kora workload: `kora agent`, `kora mcp`, `kora model` (the operator picks the command).
# Not built in this repository's CI (no container engine on its machines); kept minimal and reproducible with
# the same exact pins the tests use.
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /opt/kora
COPY pyproject.toml constraints.txt README.md ./
COPY kora ./kora
RUN pip install --no-cache-dir -c constraints.txt . && useradd --uid 65532 --no-create-home kora
USER 65532
EXPOSE 8000
ENTRYPOINT ["kora"]
CMD ["agent"]
