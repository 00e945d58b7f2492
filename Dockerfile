# One image for every Kora workload: `kora agent|mcp|memory|model-proxy|model|operator` (the operator and the
# Helm chart pick the command; the entrypoint is `kora`, the default command `agent`). Non-root (uid 65532 by
# default; any other non-root uid works too, as does a read-only root filesystem with /tmp writable), Debian
# bookworm's python3 (3.11) with a virtualenv at /opt/kora/venv, installed with the test suite's exact pins
# (constraints.txt). Where a registry is reachable:
#
#   docker build -t registry.example/kora:0.1.0 .
#   docker build --build-arg EXTRAS=embeddings \
#     --build-arg PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu -t registry.example/kora:0.1.0-embeddings .
#
# Without Docker or a registry, scripts/image/build.sh builds the same image from Debian's archive (mmdebstrap,
# umoci) as an OCI archive. Keep the two in step: same packages, paths, user, layers and configuration.
# docs/image.md explains both.
ARG BASE=debian:bookworm-slim

# Kora's wheel, built apart so the image gets neither the sources nor the build tools.
FROM ${BASE} AS wheel
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-venv \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md ./
COPY kora ./kora
RUN python3 -m venv /tmp/build && /tmp/build/bin/pip wheel --no-cache-dir --no-deps -w /wheels .

FROM ${BASE}
ARG BASE
# embeddings: ModelAPI Hosted mode's model (torch, sentence-transformers; ~+1.4 GB with the CPU-only torch, which
# needs PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu; from PyPI alone torch brings CUDA, ~+3 GB).
ARG EXTRAS=
ARG PIP_EXTRA_INDEX_URL=
ARG VERSION=0.1.0
ARG REVISION=unknown

# Layer 1: Debian. Documentation, manuals and translations are not installed (licences are). libnss-wrapper gives
# the embedded Postgres a user name when the uid has none (kora.memory_service.passwd); libstdc++6 loads greenlet's
# C++ extension, which SQLAlchemy's asyncio (the shared A2A task store) needs.
RUN printf '%s\n' 'path-exclude=/usr/share/man/*' 'path-exclude=/usr/share/info/*' 'path-exclude=/usr/share/locale/*' \
      'path-exclude=/usr/share/doc/*' 'path-include=/usr/share/doc/*/copyright' 'path-exclude=/usr/share/lintian/*' \
      > /etc/dpkg/dpkg.cfg.d/kora-nodoc \
    && apt-get update && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates libnss-wrapper libstdc++6 \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/log/* \
    && echo 'kora:x:65532:65532:Kora:/home/kora:/usr/sbin/nologin' >> /etc/passwd \
    && echo 'kora:x:65532:' >> /etc/group \
    && install -d -o 65532 -g 65532 -m 0755 /home/kora

# Layer 2: the dependencies only (rebuilt when the pins or pyproject.toml change, not when the code does).
COPY constraints.txt pyproject.toml scripts/image/requirements.py /tmp/kora/
RUN python3 -m venv /opt/kora/venv \
    && python3 /tmp/kora/requirements.py /tmp/kora/pyproject.toml "$EXTRAS" > /tmp/kora/requirements.txt \
    && /opt/kora/venv/bin/pip install --no-cache-dir -c /tmp/kora/constraints.txt -r /tmp/kora/requirements.txt \
    && rm -rf /tmp/kora /root/.cache

# Layer 3: Kora.
COPY --from=wheel /wheels /tmp/wheels
RUN /opt/kora/venv/bin/pip install --no-cache-dir --no-deps /tmp/wheels/kora-*.whl \
    && /opt/kora/venv/bin/pip check && rm -rf /tmp/wheels /root/.cache

ENV PATH=/opt/kora/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 LANG=C.UTF-8
LABEL org.opencontainers.image.title="kora" \
      org.opencontainers.image.description="Kora: agent, mcp, memory, model-proxy, model and operator workloads (entrypoint kora)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="${BASE}" \
      io.kora.extras="${EXTRAS:-none}"
USER 65532:65532
WORKDIR /home/kora
EXPOSE 8000
ENTRYPOINT ["kora"]
CMD ["agent"]
